//! What a namespace asks of a cluster: its workloads' pods and what they request, counted
//! against `Cluster.spec.capacity`.

use serde_json::Value;
use sluice_api::ClusterName;
use sluice_api::sync::share_on;
use sluice_kube::resources::{Resources, pod_requests};

/// Whether objects of `kind` run pods, so count against a cluster's capacity.
pub fn runs_pods(kind: &str) -> bool {
    matches!(
        kind,
        "Deployment"
            | "StatefulSet"
            | "ReplicaSet"
            | "ReplicationController"
            | "Job"
            | "DaemonSet"
            | "Pod"
    )
}

/// How many pods a workload of `kind` runs (all of it: `spec.replicas`, a Job's
/// parallelism, one per node of a local cluster for a DaemonSet) and what one requests;
/// `None` for kinds that run no pods.
pub fn workload(kind: &str, obj: &Value) -> Option<(i64, Resources)> {
    let spec = &obj["spec"];
    let (count, template) = match kind {
        "Deployment" | "StatefulSet" | "ReplicaSet" | "ReplicationController" => {
            (spec["replicas"].as_i64().unwrap_or(1), &spec["template"])
        }
        "Job" => (spec["parallelism"].as_i64().unwrap_or(1), &spec["template"]),
        "DaemonSet" => (1, &spec["template"]),
        "Pod" => return Some((1, pod_requests(spec))),
        _ => return None,
    };
    Some((count.max(0), pod_requests(&template["spec"])))
}

/// Whether a spread splits a workload's pods between its clusters: those with
/// `spec.replicas`, and a Pod (it runs on one of them); every cluster runs all of the
/// others (a Job's, a DaemonSet's).
pub fn splits(kind: &str, obj: &Value) -> bool {
    kind == "Pod" || obj["spec"]["replicas"].as_i64().is_some()
}

/// One workload as placement weighs it: all its pods, what one requests, and whether a
/// spread splits it ([`splits`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Workload {
    pub pods: i64,
    pub each: Resources,
    pub splits: bool,
}

/// The workloads among `objects` (kind, object).
pub fn workloads<'a>(objects: impl IntoIterator<Item = (&'a str, &'a Value)>) -> Vec<Workload> {
    objects
        .into_iter()
        .filter_map(|(kind, o)| {
            let (pods, each) = workload(kind, o)?;
            Some(Workload {
                pods,
                each,
                splits: splits(kind, o),
            })
        })
        .collect()
}

/// How many of a workload's pods `cluster` runs: its share when split, else all.
pub fn count_on(obj: &Value, all: i64, cluster: &ClusterName) -> i64 {
    share_on(obj, cluster).unwrap_or(all)
}

/// What `objects` (kind, object) request in all, or on `cluster` (by their shares there).
pub fn demand<'a>(
    objects: impl IntoIterator<Item = (&'a str, &'a Value)>,
    cluster: Option<&ClusterName>,
) -> Resources {
    objects
        .into_iter()
        .filter_map(|(kind, o)| {
            let (all, each) = workload(kind, o)?;
            let n = cluster.map_or(all, |c| count_on(o, all, c));
            Some(each * n as f64)
        })
        .fold(Resources::default(), |a, b| a + b)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn workloads_count_their_pods_and_requests_and_shares_per_cluster() {
        let d = json!({"metadata": {"annotations": {"replicas.sluice.dev/east": "1"}},
            "spec": {"replicas": 3, "template": {"spec": {"containers": [
                {"resources": {"requests": {"cpu": "100m"}}}]}}}});
        let cm = json!({"data": {}});
        let all = demand([("Deployment", &d), ("ConfigMap", &cm)], None);
        assert_eq!(all.pods, 3.0);
        assert!((all.cpu - 0.3).abs() < 1e-9);
        let east = demand([("Deployment", &d)], Some(&ClusterName::new("east")));
        assert_eq!(east.pods, 1.0);
        let west = demand([("Deployment", &d)], Some(&ClusterName::new("west")));
        assert_eq!(west.pods, 3.0, "no share: all of it");
    }
}
