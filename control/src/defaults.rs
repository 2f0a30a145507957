//! Server-side defaults for the built-in types, the ones clients read back
//! (kube-apiserver sets many more; these are the ones tools and controllers rely on).

use serde_json::{Value, json};

fn default(obj: &mut Value, path: &[&str], value: Value) {
    let mut cur = obj;
    for seg in &path[..path.len() - 1] {
        if !cur[*seg].is_object() {
            if cur[*seg].is_null() {
                cur[*seg] = json!({});
            } else {
                return;
            }
        }
        cur = &mut cur[*seg];
    }
    let last = path[path.len() - 1];
    if cur.get(last).is_none_or(Value::is_null) {
        cur[last] = value;
    }
}

fn pod_spec(spec: &mut Value) {
    default(spec, &["restartPolicy"], json!("Always"));
    default(spec, &["terminationGracePeriodSeconds"], json!(30));
    default(spec, &["dnsPolicy"], json!("ClusterFirst"));
    default(spec, &["schedulerName"], json!("default-scheduler"));
    if let Some(cs) = spec.get_mut("containers").and_then(Value::as_array_mut) {
        for c in cs {
            default(
                c,
                &["terminationMessagePath"],
                json!("/dev/termination-log"),
            );
            default(c, &["terminationMessagePolicy"], json!("File"));
            let latest = c["image"].as_str().is_some_and(|i| {
                i.ends_with(":latest") || !i.rsplit('/').next().unwrap_or("").contains(':')
            });
            default(
                c,
                &["imagePullPolicy"],
                json!(if latest { "Always" } else { "IfNotPresent" }),
            );
            if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
                for p in ports {
                    default(p, &["protocol"], json!("TCP"));
                }
            }
        }
    }
}

/// Apply defaults for `kind` (on create and update).
pub fn apply(kind: &str, obj: &mut Value) {
    match kind {
        "Namespace" => {
            default(obj, &["spec", "finalizers"], json!(["kubernetes"]));
            default(obj, &["status", "phase"], json!("Active"));
        }
        "Pod" => {
            if obj["spec"].is_object() {
                pod_spec(&mut obj["spec"]);
            }
            default(obj, &["status", "phase"], json!("Pending"));
        }
        "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet" => {
            if kind != "DaemonSet" {
                default(obj, &["spec", "replicas"], json!(1));
            }
            default(obj, &["spec", "revisionHistoryLimit"], json!(10));
            if kind == "Deployment" {
                default(obj, &["spec", "progressDeadlineSeconds"], json!(600));
                default(obj, &["spec", "strategy", "type"], json!("RollingUpdate"));
                if obj["spec"]["strategy"]["type"] == "RollingUpdate" {
                    default(
                        obj,
                        &["spec", "strategy", "rollingUpdate", "maxSurge"],
                        json!("25%"),
                    );
                    default(
                        obj,
                        &["spec", "strategy", "rollingUpdate", "maxUnavailable"],
                        json!("25%"),
                    );
                }
            }
            if kind == "StatefulSet" {
                default(obj, &["spec", "podManagementPolicy"], json!("OrderedReady"));
            }
            if obj["spec"]["template"]["spec"].is_object() {
                pod_spec(&mut obj["spec"]["template"]["spec"]);
            }
        }
        "Service" => {
            default(obj, &["spec", "type"], json!("ClusterIP"));
            default(obj, &["spec", "sessionAffinity"], json!("None"));
            if let Some(ports) = obj["spec"].get_mut("ports").and_then(Value::as_array_mut) {
                for p in ports {
                    default(p, &["protocol"], json!("TCP"));
                    if let Some(port) = p.get("port").cloned() {
                        default(p, &["targetPort"], port);
                    }
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deployment_and_service_defaults() {
        let mut d = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x:1", "ports": [{"containerPort": 80}]}]}}}});
        apply("Deployment", &mut d);
        assert_eq!(d["spec"]["replicas"], 1);
        assert_eq!(d["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"],
            "IfNotPresent"
        );
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["ports"][0]["protocol"],
            "TCP"
        );
        let mut s = json!({"spec": {"ports": [{"port": 80}]}});
        apply("Service", &mut s);
        assert_eq!(s["spec"]["ports"][0]["targetPort"], 80);
        let mut r = json!({"spec": {"replicas": 3}});
        apply("ReplicaSet", &mut r);
        assert_eq!(r["spec"]["replicas"], 3);
    }
}
