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
    // (Init containers are left as they came: workloads stored so would roll out again.)
    for list in ["containers", "ephemeralContainers"] {
        let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
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

fn template_pod_spec(template: &mut Value) {
    if template["spec"].is_object() {
        pod_spec(&mut template["spec"]);
    }
}

/// A Job's spec (also a CronJob's job template): one pod at a time to one completion when
/// neither is given, six retries, pods replaced once terminated or failed.
fn job_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    if spec["completions"].is_null() && spec["parallelism"].is_null() {
        spec["completions"] = json!(1);
        spec["parallelism"] = json!(1);
    }
    default(spec, &["parallelism"], json!(1));
    default(spec, &["completionMode"], json!("NonIndexed"));
    if spec["backoffLimitPerIndex"].is_null() {
        default(spec, &["backoffLimit"], json!(6));
    }
    default(spec, &["suspend"], json!(false));
    if spec["podFailurePolicy"].is_null() {
        default(
            spec,
            &["podReplacementPolicy"],
            json!("TerminatingOrFailed"),
        );
    }
    template_pod_spec(&mut spec["template"]);
}

/// What kube-apiserver sets on create once the object has its uid: a Job's selector (unless
/// `manualSelector`), and the labels on its pod template that the selector matches; and
/// an APIService's status, which says it is not served.
pub fn on_create(kind: &str, obj: &mut Value) {
    if kind == "APIService" {
        // Stored and listed, never proxied: its status says so rather than leave it blank.
        obj["status"] = json!({"conditions": [{
            "type": "Available",
            "status": "False",
            "reason": "NotServed",
            "message": "Sluice stores APIServices but does not proxy aggregated APIs: requests for this group and version are not served",
            "lastTransitionTime": sluice_kube::time::now_rfc3339(),
        }]});
        return;
    }
    if kind != "Job" || obj["spec"]["manualSelector"] == true || !obj["spec"].is_object() {
        return;
    }
    let (Some(uid), Some(name)) = (
        obj["metadata"]["uid"].as_str().map(str::to_string),
        obj["metadata"]["name"].as_str().map(str::to_string),
    ) else {
        return;
    };
    obj["spec"]["selector"] = json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}});
    default(obj, &["spec", "template", "metadata", "labels"], json!({}));
    if let Some(labels) = obj["spec"]["template"]["metadata"]["labels"].as_object_mut() {
        for (k, v) in [
            ("batch.kubernetes.io/controller-uid", &uid),
            ("batch.kubernetes.io/job-name", &name),
            ("controller-uid", &uid),
            ("job-name", &name),
        ] {
            labels.insert(k.into(), json!(v));
        }
    }
}

/// A Namespace's finalizer and phase, and the label kube-apiserver keeps equal to its name
/// (`kubernetes.io/metadata.name`, which namespace selectors rely on).
fn namespace(obj: &mut Value) {
    default(obj, &["spec", "finalizers"], json!(["kubernetes"]));
    default(obj, &["status", "phase"], json!("Active"));
    if let Some(name) = obj["metadata"]["name"].as_str().map(str::to_string) {
        default(obj, &["metadata", "labels"], json!({}));
        if let Some(labels) = obj["metadata"]["labels"].as_object_mut() {
            labels.insert("kubernetes.io/metadata.name".into(), json!(name));
        }
    }
}

/// A Secret's `type` (Opaque), and `stringData` merged into `data` (base64) and dropped, as
/// kube-apiserver's conversion does: `stringData` is write-only and wins over `data`.
/// Entries that are not strings stay in `stringData`, for validation to refuse.
fn secret(obj: &mut Value) {
    use base64::Engine as _;
    default(obj, &["type"], json!("Opaque"));
    let Some(string_data) = obj.get_mut("stringData").and_then(Value::as_object_mut) else {
        return;
    };
    let mut encoded = Vec::new();
    string_data.retain(|k, v| match v.as_str() {
        Some(text) => {
            encoded.push((
                k.clone(),
                base64::engine::general_purpose::STANDARD.encode(text),
            ));
            false
        }
        None => true,
    });
    let empty = string_data.is_empty();
    if empty && let Some(o) = obj.as_object_mut() {
        o.remove("stringData");
    }
    if encoded.is_empty() {
        return;
    }
    if !obj["data"].is_object() {
        obj["data"] = json!({});
    }
    if let Some(data) = obj["data"].as_object_mut() {
        for (k, v) in encoded {
            data.insert(k, json!(v));
        }
    }
}

/// Apply defaults for `kind` (on create and update).
pub fn apply(kind: &str, obj: &mut Value) {
    if kind == crate::policies::config::POLICY_KIND || kind == crate::policies::config::BINDING_KIND
    {
        crate::policies::config::apply_defaults(kind, obj);
        return;
    }
    if let Some(phase) = crate::webhooks::config::Phase::of_kind(kind) {
        crate::webhooks::config::apply_defaults(obj, phase);
        return;
    }
    match kind {
        "Pod" => {
            if obj["spec"].is_object() {
                pod_spec(&mut obj["spec"]);
                // Clients read it without looking (kubectl debug's warnings); templates
                // keep theirs as written, so stored workloads do not roll out again.
                default(obj, &["spec", "securityContext"], json!({}));
            }
            default(obj, &["status", "phase"], json!("Pending"));
        }
        "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet" => {
            if kind != "DaemonSet" {
                default(obj, &["spec", "replicas"], json!(1));
            }
            if kind != "ReplicaSet" {
                default(obj, &["spec", "revisionHistoryLimit"], json!(10));
            }
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
                default(
                    obj,
                    &["spec", "updateStrategy", "type"],
                    json!("RollingUpdate"),
                );
                if obj["spec"]["updateStrategy"]["type"] == "RollingUpdate" {
                    default(
                        obj,
                        &["spec", "updateStrategy", "rollingUpdate", "partition"],
                        json!(0),
                    );
                }
                default(
                    obj,
                    &["spec", "persistentVolumeClaimRetentionPolicy"],
                    json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
                );
            }
            if kind == "DaemonSet" {
                default(
                    obj,
                    &["spec", "updateStrategy", "type"],
                    json!("RollingUpdate"),
                );
                if obj["spec"]["updateStrategy"]["type"] == "RollingUpdate" {
                    default(
                        obj,
                        &["spec", "updateStrategy", "rollingUpdate", "maxUnavailable"],
                        json!(1),
                    );
                    default(
                        obj,
                        &["spec", "updateStrategy", "rollingUpdate", "maxSurge"],
                        json!(0),
                    );
                }
            }
            if obj["spec"]["template"]["spec"].is_object() {
                pod_spec(&mut obj["spec"]["template"]["spec"]);
            }
        }
        "Namespace" => {
            namespace(obj);
        }
        "Secret" => {
            secret(obj);
        }
        "ReplicationController" => {
            default(obj, &["spec", "replicas"], json!(1));
            // An empty selector and labels come from the template's labels.
            let labels = obj["spec"]["template"]["metadata"]["labels"].clone();
            if labels.as_object().is_some_and(|l| !l.is_empty()) {
                if obj["spec"]["selector"]
                    .as_object()
                    .is_none_or(|s| s.is_empty())
                {
                    obj["spec"]["selector"] = labels.clone();
                }
                if obj["metadata"]["labels"]
                    .as_object()
                    .is_none_or(|l| l.is_empty())
                {
                    obj["metadata"]["labels"] = labels;
                }
            }
            template_pod_spec(&mut obj["spec"]["template"]);
        }
        "PodTemplate" => template_pod_spec(&mut obj["template"]),
        "Job" => job_spec(&mut obj["spec"]),
        "CronJob" => {
            default(obj, &["spec", "concurrencyPolicy"], json!("Allow"));
            default(obj, &["spec", "suspend"], json!(false));
            default(obj, &["spec", "successfulJobsHistoryLimit"], json!(3));
            default(obj, &["spec", "failedJobsHistoryLimit"], json!(1));
            if obj["spec"]["jobTemplate"]["spec"].is_object() {
                job_spec(&mut obj["spec"]["jobTemplate"]["spec"]);
            }
        }
        "HorizontalPodAutoscaler" => {
            default(obj, &["spec", "minReplicas"], json!(1));
            if obj["spec"]["metrics"]
                .as_array()
                .is_none_or(|m| m.is_empty())
                && obj["spec"].is_object()
            {
                obj["spec"]["metrics"] = json!([{"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 80}}}]);
            }
        }
        "NetworkPolicy" => {
            if obj["spec"]["policyTypes"]
                .as_array()
                .is_none_or(|p| p.is_empty())
                && obj["spec"].is_object()
            {
                let egress = obj["spec"]["egress"]
                    .as_array()
                    .is_some_and(|e| !e.is_empty());
                obj["spec"]["policyTypes"] = if egress {
                    json!(["Ingress", "Egress"])
                } else {
                    json!(["Ingress"])
                };
            }
            for dir in ["ingress", "egress"] {
                for rule in obj["spec"][dir].as_array_mut().into_iter().flatten() {
                    for port in rule["ports"].as_array_mut().into_iter().flatten() {
                        default(port, &["protocol"], json!("TCP"));
                    }
                }
            }
        }
        "PersistentVolume" => {
            default(
                obj,
                &["spec", "persistentVolumeReclaimPolicy"],
                json!("Retain"),
            );
            default(obj, &["spec", "volumeMode"], json!("Filesystem"));
            default(obj, &["status", "phase"], json!("Pending"));
        }
        "PersistentVolumeClaim" => {
            default(obj, &["spec", "volumeMode"], json!("Filesystem"));
            default(obj, &["status", "phase"], json!("Pending"));
        }
        "StorageClass" => {
            default(obj, &["reclaimPolicy"], json!("Delete"));
            default(obj, &["volumeBindingMode"], json!("Immediate"));
        }
        "PriorityClass" => {
            default(obj, &["preemptionPolicy"], json!("PreemptLowerPriority"));
        }
        "Service" => {
            default(obj, &["spec", "type"], json!("ClusterIP"));
            default(obj, &["spec", "sessionAffinity"], json!("None"));
            // Every Service but ExternalName gets its IP families, as kube-apiserver's
            // allocator gives them on a single-stack IPv4 cluster: a headless Service without
            // a selector may be dual-stack (its endpoints are the user's), others IPv4 only.
            if obj["spec"]["type"] != "ExternalName" {
                let headless = obj["spec"]["clusterIP"] == "None";
                let selectorless = obj["spec"]["selector"]
                    .as_object()
                    .is_none_or(|s| s.is_empty());
                if headless && selectorless {
                    default(obj, &["spec", "ipFamilyPolicy"], json!("RequireDualStack"));
                    let single = obj["spec"]["ipFamilyPolicy"] == "SingleStack";
                    default(
                        obj,
                        &["spec", "ipFamilies"],
                        if single {
                            json!(["IPv4"])
                        } else {
                            json!(["IPv4", "IPv6"])
                        },
                    );
                } else {
                    default(obj, &["spec", "ipFamilies"], json!(["IPv4"]));
                    default(obj, &["spec", "ipFamilyPolicy"], json!("SingleStack"));
                }
                default(obj, &["spec", "internalTrafficPolicy"], json!("Cluster"));
            }
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
        let mut headless = json!({"spec": {"clusterIP": "None", "selector": {"a": "b"}}});
        apply("Service", &mut headless);
        assert_eq!(headless["spec"]["ipFamilies"], json!(["IPv4"]));
        assert_eq!(headless["spec"]["ipFamilyPolicy"], "SingleStack");
        let mut selectorless = json!({"spec": {"clusterIP": "None"}});
        apply("Service", &mut selectorless);
        assert_eq!(selectorless["spec"]["ipFamilies"], json!(["IPv4", "IPv6"]));
        assert_eq!(selectorless["spec"]["ipFamilyPolicy"], "RequireDualStack");
        let mut sts = json!({"spec": {}});
        apply("StatefulSet", &mut sts);
        assert_eq!(
            sts["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
        );
        let mut ds = json!({"spec": {}});
        apply("DaemonSet", &mut ds);
        assert_eq!(
            ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"],
            1
        );
        let mut rs = json!({"spec": {}});
        apply("ReplicaSet", &mut rs);
        assert!(
            rs["spec"].get("revisionHistoryLimit").is_none(),
            "not a ReplicaSet field"
        );
        let mut external = json!({"spec": {"type": "ExternalName", "externalName": "x.example"}});
        apply("Service", &mut external);
        assert!(external["spec"].get("ipFamilies").is_none());
        let mut r = json!({"spec": {"replicas": 3}});
        apply("ReplicaSet", &mut r);
        assert_eq!(r["spec"]["replicas"], 3);
    }

    #[test]
    fn secret_string_data_is_merged_into_data() {
        let mut s =
            json!({"data": {"a": "b2xk", "b": "eA=="}, "stringData": {"a": "new", "c": "é"}});
        apply("Secret", &mut s);
        assert_eq!(s["data"], json!({"a": "bmV3", "b": "eA==", "c": "w6k="}));
        assert!(s.get("stringData").is_none());
        assert_eq!(s["type"], "Opaque");
        let mut only = json!({"stringData": {"k": "v"}});
        apply("Secret", &mut only);
        assert_eq!(only["data"], json!({"k": "dg=="}));
        let mut bad = json!({"stringData": {"k": 1}});
        apply("Secret", &mut bad);
        assert_eq!(
            bad["stringData"],
            json!({"k": 1}),
            "left for validation to refuse"
        );
    }

    #[test]
    fn namespaces_carry_their_name_label() {
        let mut ns =
            json!({"metadata": {"name": "shop", "labels": {"kubernetes.io/metadata.name": "x"}}});
        apply("Namespace", &mut ns);
        assert_eq!(
            ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
            "shop"
        );
        assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
    }

    #[test]
    fn jobs_get_their_defaults_and_a_selector_of_their_uid() {
        let mut job = json!({"metadata": {"name": "pi", "uid": "u-1"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "perl:5"}]}}}});
        apply("Job", &mut job);
        on_create("Job", &mut job);
        assert_eq!(job["spec"]["completions"], 1);
        assert_eq!(job["spec"]["parallelism"], 1);
        assert_eq!(job["spec"]["backoffLimit"], 6);
        assert_eq!(
            job["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"],
            "u-1"
        );
        assert_eq!(
            job["spec"]["template"]["metadata"]["labels"]["job-name"],
            "pi"
        );
        let mut parallel = json!({"spec": {"parallelism": 3, "template": {}}});
        apply("Job", &mut parallel);
        assert!(
            parallel["spec"]["completions"].is_null(),
            "a work queue has no completion count"
        );
        let mut cj =
            json!({"spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {}}}}});
        apply("CronJob", &mut cj);
        assert_eq!(cj["spec"]["successfulJobsHistoryLimit"], 3);
        assert_eq!(cj["spec"]["jobTemplate"]["spec"]["backoffLimit"], 6);
    }
}
