//! The fields kube refuses to change once an object exists, checked on every update of
//! the main resource with kube's field paths and wording: a workload's `spec.selector`
//! (what it owns would change under it), a Job's pod template, a StatefulSet's spec beyond
//! the fields kube lets move, a Service's `clusterIP`, and the data of a ConfigMap or
//! Secret marked `immutable`.

use serde_json::Value;

use crate::errors::Cause;

/// What kube lets change in a StatefulSet's spec.
const STATEFULSET_MUTABLE: &[&str] = &[
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
];

const IMMUTABLE: &str = "field is immutable";

fn changed(old: &Value, new: &Value, path: &[&str]) -> bool {
    let at = |v: &Value| path.iter().fold(v, |v, k| &v[*k]).clone();
    at(old) != at(new)
}

fn invalid(path: &[&str], new: &Value) -> Cause {
    let value = path.iter().fold(new, |v, k| &v[*k]);
    Cause::invalid(path.join("."), &value.to_string(), IMMUTABLE)
}

/// Carry what an update may leave out (a Service's allocated `clusterIP`), then the
/// causes to refuse the update of `old` to `new` for, of kind `kind` in `group`.
pub fn check(group: &str, kind: &str, old: &Value, new: &mut Value) -> Vec<Cause> {
    let mut out = Vec::new();
    match (group, kind) {
        ("apps", "Deployment" | "ReplicaSet" | "DaemonSet")
            if changed(old, new, &["spec", "selector"]) =>
        {
            out.push(invalid(&["spec", "selector"], new));
        }
        ("apps", "StatefulSet") => {
            let frozen = |v: &Value| -> Vec<(String, Value)> {
                v["spec"]
                    .as_object()
                    .map(|s| {
                        s.iter()
                            .filter(|(k, _)| !STATEFULSET_MUTABLE.contains(&k.as_str()))
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            if frozen(old) != frozen(new) {
                out.push(Cause::forbidden(
                    "spec",
                    "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
                ));
            }
        }
        ("batch", "Job") => {
            if changed(old, new, &["spec", "selector"]) {
                out.push(invalid(&["spec", "selector"], new));
            }
            // kube lets a suspended Job's scheduling directives change; a running one's
            // template is fixed.
            if old["spec"]["suspend"] != true && changed(old, new, &["spec", "template"]) {
                out.push(invalid(&["spec", "template"], new));
            }
        }
        ("", "Service") => {
            let had = old["spec"]["clusterIP"]
                .as_str()
                .filter(|ip| !ip.is_empty());
            match (had, new["spec"]["clusterIP"].as_str()) {
                (Some(ip), None | Some("")) if new["spec"].is_object() => {
                    new["spec"]["clusterIP"] = Value::String(ip.to_string());
                }
                (Some(ip), Some(now)) if ip != now => {
                    out.push(invalid(&["spec", "clusterIP"], new));
                }
                _ => {}
            }
        }
        ("", "ConfigMap" | "Secret") if old["immutable"] == true => {
            let forbid =
                |field: &str| Cause::forbidden(field, "field is immutable when `immutable` is set");
            for field in ["data", "binaryData"] {
                if old.get(field) != new.get(field) {
                    out.push(forbid(field));
                }
            }
            if new["immutable"] != true {
                out.push(forbid("immutable"));
            }
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_workload_keeps_its_selector() {
        let old = json!({"spec": {"selector": {"matchLabels": {"app": "a"}}, "replicas": 1}});
        let mut scaled =
            json!({"spec": {"selector": {"matchLabels": {"app": "a"}}, "replicas": 3}});
        assert!(check("apps", "Deployment", &old, &mut scaled).is_empty());
        let mut moved = json!({"spec": {"selector": {"matchLabels": {"app": "b"}}}});
        let causes = check("apps", "Deployment", &old, &mut moved);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec.selector");
        assert!(causes[0].message.ends_with("field is immutable"));
        // Another group's Deployment kind is not apps'.
        assert!(check("example.com", "Deployment", &old, &mut moved).is_empty());
    }

    #[test]
    fn a_statefulset_moves_only_what_kube_lets_move() {
        let old = json!({"spec": {"serviceName": "db", "replicas": 3, "ordinals": {"start": 0}}});
        let mut ok =
            json!({"spec": {"serviceName": "db", "replicas": 1, "ordinals": {"start": 2}}});
        assert!(check("apps", "StatefulSet", &old, &mut ok).is_empty());
        let mut bad = json!({"spec": {"serviceName": "other", "replicas": 3}});
        let causes = check("apps", "StatefulSet", &old, &mut bad);
        assert_eq!(causes[0].field, "spec");
        assert!(
            causes[0]
                .message
                .starts_with("Forbidden: updates to statefulset spec")
        );
    }

    #[test]
    fn a_service_keeps_its_cluster_ip_and_an_immutable_config_map_its_data() {
        let old = json!({"spec": {"clusterIP": "10.0.0.7"}});
        let mut left_out = json!({"spec": {"ports": []}});
        assert!(check("", "Service", &old, &mut left_out).is_empty());
        assert_eq!(left_out["spec"]["clusterIP"], "10.0.0.7");
        let mut changed = json!({"spec": {"clusterIP": "10.0.0.8"}});
        assert_eq!(
            check("", "Service", &old, &mut changed)[0].field,
            "spec.clusterIP"
        );
        let old = json!({"immutable": true, "data": {"a": "1"}});
        let mut new = json!({"immutable": true, "data": {"a": "2"}});
        let causes = check("", "ConfigMap", &old, &mut new);
        assert_eq!(causes.len(), 1);
        assert_eq!(
            causes[0].message,
            "Forbidden: field is immutable when `immutable` is set"
        );
        let mut thawed = json!({"immutable": false, "data": {"a": "1"}});
        assert_eq!(check("", "Secret", &old, &mut thawed)[0].field, "immutable");
    }
}
