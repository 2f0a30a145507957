//! Workload status summed back from the clusters' reports: each cluster's syncer writes
//! what its downstream copy says into `status.sluice.dev/<cluster>` on the upstream object;
//! the object's own status is the sum over the clusters it is placed on (replica counts
//! add up; a condition holds when it holds everywhere; the generation is observed when
//! every cluster has caught up with it), so `kubectl rollout status` works upstream.

use serde_json::{Map, Value, json};
use sluice_api::ClusterName;
use sluice_api::sync::{StatusReport, share_on, status_annotation};

/// Counters that add up across clusters, per kind.
fn counters(kind: &str) -> &'static [&'static str] {
    match kind {
        "Deployment" => &[
            "replicas",
            "updatedReplicas",
            "readyReplicas",
            "availableReplicas",
            "unavailableReplicas",
            "terminatingReplicas",
        ],
        "StatefulSet" => &[
            "replicas",
            "readyReplicas",
            "currentReplicas",
            "updatedReplicas",
            "availableReplicas",
        ],
        "ReplicaSet" | "ReplicationController" => &[
            "replicas",
            "fullyLabeledReplicas",
            "readyReplicas",
            "availableReplicas",
            "terminatingReplicas",
        ],
        "DaemonSet" => &[
            "currentNumberScheduled",
            "numberMisscheduled",
            "desiredNumberScheduled",
            "numberReady",
            "updatedNumberScheduled",
            "numberAvailable",
            "numberUnavailable",
        ],
        "Job" => &["active", "succeeded", "failed", "ready", "terminating"],
        _ => &[],
    }
}

/// The report of `cluster` on `obj`, if it has written one.
pub fn report(obj: &Value, cluster: &ClusterName) -> Option<StatusReport> {
    obj["metadata"]["annotations"][status_annotation(cluster)]
        .as_str()
        .and_then(|s| serde_json::from_str(s).ok())
}

/// The generation `cluster` has caught up with on `obj`: 0 while it was asked for other
/// replicas than it is to run now (a share not yet applied).
fn caught_up(obj: &Value, cluster: &ClusterName, r: &StatusReport) -> i64 {
    match r.replicas {
        Some(n) if obj["spec"]["replicas"].is_i64() && n != desired_on(obj, cluster) => 0,
        _ => r.observed_generation,
    }
}

/// How many replicas `cluster` is to run of `obj`: its share when spread, else all.
pub fn desired_on(obj: &Value, cluster: &ClusterName) -> i64 {
    share_on(obj, cluster).unwrap_or_else(|| obj["spec"]["replicas"].as_i64().unwrap_or(1))
}

/// Whether `obj` (of `kind`) is available on `cluster`: the cluster has caught up with its
/// generation and runs its share, all of it updated and available. Kinds that run to
/// completion (Jobs) do not hold a move up.
pub fn available_on(kind: &str, obj: &Value, cluster: &ClusterName) -> bool {
    // A claim is bound when its first consumer starts: the workloads that mount it hold
    // the move, not the claim.
    if kind == "Job" || kind == "PersistentVolumeClaim" {
        return true;
    }
    // A Pod runs on one cluster of a spread namespace; the others have nothing to run.
    if kind == "Pod" && share_on(obj, cluster) == Some(0) {
        return true;
    }
    let Some(r) = report(obj, cluster) else {
        return false;
    };
    if kind == "Pod" {
        return pod_rank(&r.status) >= PodRank::Ready;
    }
    let generation = obj["metadata"]["generation"].as_i64().unwrap_or(0);
    if caught_up(obj, cluster, &r) < generation {
        return false;
    }
    let n = |f: &str| r.status[f].as_i64().unwrap_or(0);
    let want = desired_on(obj, cluster);
    match kind {
        "Deployment" => n("updatedReplicas") >= want && n("availableReplicas") >= want,
        "StatefulSet" => n("updatedReplicas") >= want && n("readyReplicas") >= want,
        "ReplicaSet" | "ReplicationController" => n("availableReplicas") >= want,
        "DaemonSet" => {
            n("desiredNumberScheduled") > 0 && n("numberAvailable") >= n("desiredNumberScheduled")
        }
        _ => true,
    }
}

/// Whether the copy of Pod `obj` on `cluster` runs and is Ready: an endpoint of the
/// Services that select it.
pub fn pod_serving_on(obj: &Value, cluster: &ClusterName) -> bool {
    report(obj, cluster)
        .is_some_and(|r| r.status["phase"] == "Running" && pod_rank(&r.status) == PodRank::Ready)
}

/// How far a Pod copy has come, worst first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum PodRank {
    Pending,
    Failed,
    Running,
    /// Ready, or run to completion: it holds nothing up.
    Ready,
}

fn pod_rank(status: &Value) -> PodRank {
    let ready = status["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    });
    match status["phase"].as_str() {
        Some("Running") if ready => PodRank::Ready,
        Some("Running") => PodRank::Running,
        Some("Succeeded") => PodRank::Ready,
        Some("Failed") => PodRank::Failed,
        _ => PodRank::Pending,
    }
}

/// The status of `obj` (of `kind`) summed over the reports of `clusters`; `None` when no
/// cluster has reported yet.
pub fn summarize(kind: &str, obj: &Value, clusters: &[ClusterName]) -> Option<Value> {
    let reports: Vec<(&ClusterName, StatusReport)> = clusters
        .iter()
        .filter_map(|c| Some((c, report(obj, c)?)))
        .collect();
    if reports.is_empty() {
        return None;
    }
    // A Pod's status is one cluster's: the copy that serves best (while a move runs it
    // in two). A claim's too: the copy that is bound.
    if kind == "Pod" {
        return reports
            .into_iter()
            .max_by_key(|(_, r)| pod_rank(&r.status))
            .map(|(_, r)| r.status);
    }
    if kind == "PersistentVolumeClaim" {
        return reports
            .into_iter()
            .max_by_key(|(_, r)| r.status["phase"] == "Bound")
            .map(|(_, r)| r.status);
    }
    // Observed only when every cluster it is placed on has caught up.
    let observed = if reports.len() == clusters.len() {
        reports
            .iter()
            .map(|(c, r)| caught_up(obj, c, r))
            .min()
            .unwrap_or(0)
    } else {
        0
    };
    let reports: Vec<StatusReport> = reports.into_iter().map(|(_, r)| r).collect();
    let mut out = Map::new();
    for f in counters(kind) {
        let sum: i64 = reports.iter().filter_map(|r| r.status[*f].as_i64()).sum();
        if reports.iter().any(|r| r.status.get(*f).is_some()) {
            out.insert((*f).to_string(), json!(sum));
        }
    }
    if kind != "Job" {
        out.insert("observedGeneration".into(), json!(observed));
    }
    // Fields that are the same everywhere or taken from the first cluster.
    for f in [
        "currentRevision",
        "updateRevision",
        "collisionCount",
        "startTime",
        "completionTime",
        "selector",
    ] {
        if let Some(v) = reports.iter().find_map(|r| r.status.get(f)) {
            out.insert(f.to_string(), v.clone());
        }
    }
    let conditions = merge_conditions(&reports);
    if !conditions.is_empty() {
        out.insert("conditions".into(), Value::Array(conditions));
    }
    Some(Value::Object(out))
}

/// One condition per type: true where it is true in every report, otherwise the first
/// report's false (or unknown) one, which says why.
fn merge_conditions(reports: &[StatusReport]) -> Vec<Value> {
    let mut types: Vec<String> = Vec::new();
    for r in reports {
        for c in r.status["conditions"].as_array().into_iter().flatten() {
            if let Some(t) = c["type"].as_str()
                && !types.iter().any(|x| x == t)
            {
                types.push(t.to_string());
            }
        }
    }
    types
        .iter()
        .filter_map(|t| {
            let of_type: Vec<&Value> = reports
                .iter()
                .filter_map(|r| {
                    r.status["conditions"]
                        .as_array()
                        .and_then(|cs| cs.iter().find(|c| c["type"] == t.as_str()))
                })
                .collect();
            of_type
                .iter()
                .find(|c| c["status"] != "True")
                .or_else(|| of_type.first())
                .map(|c| (*c).clone())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_shows_its_best_copy_and_is_available_where_ready() {
        let running =
            json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]});
        let pending = json!({"phase": "Pending"});
        let mut pod = deployment(&[("a", 1, pending.clone()), ("b", 1, running.clone())]);
        pod["spec"] = json!({"containers": []});
        assert_eq!(summarize("Pod", &pod, &names(&["a", "b"])), Some(running));
        assert_eq!(summarize("Pod", &pod, &names(&["a"])), Some(pending));
        assert!(available_on("Pod", &pod, &ClusterName::new("b")));
        assert!(!available_on("Pod", &pod, &ClusterName::new("a")));
        pod["metadata"]["annotations"]["replicas.sluice.dev/a"] = json!("0");
        assert!(
            available_on("Pod", &pod, &ClusterName::new("a")),
            "nothing to run there"
        );
    }

    fn deployment(reports: &[(&str, i64, Value)]) -> Value {
        let mut annotations = Map::new();
        for (c, g, status) in reports {
            let r = StatusReport {
                observed_generation: *g,
                replicas: None,
                start: None,
                status: status.clone(),
            };
            annotations.insert(
                format!("status.sluice.dev/{c}"),
                json!(serde_json::to_string(&r).unwrap()),
            );
        }
        json!({"metadata": {"generation": 2, "annotations": annotations}, "spec": {"replicas": 2}})
    }

    fn names(cs: &[&str]) -> Vec<ClusterName> {
        cs.iter().map(|c| ClusterName::new(*c)).collect()
    }

    #[test]
    fn spread_status_adds_up_and_is_observed_when_every_cluster_caught_up() {
        let ok = json!({"replicas": 1, "updatedReplicas": 1, "availableReplicas": 1,
            "conditions": [{"type": "Available", "status": "True"}]});
        let not = json!({"replicas": 1, "updatedReplicas": 1, "availableReplicas": 0,
            "conditions": [{"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"}]});
        let d = deployment(&[("a", 2, ok.clone()), ("b", 2, not)]);
        let s = summarize("Deployment", &d, &names(&["a", "b"])).unwrap();
        assert_eq!(s["replicas"], 2);
        assert_eq!(s["availableReplicas"], 1);
        assert_eq!(s["observedGeneration"], 2);
        assert_eq!(s["conditions"][0]["status"], "False");
        let s = summarize("Deployment", &d, &names(&["a", "b", "c"])).unwrap();
        assert_eq!(s["observedGeneration"], 0, "c has not reported");
        assert!(summarize("Deployment", &d, &names(&["z"])).is_none());
    }

    #[test]
    fn available_means_caught_up_and_running_the_share() {
        let full = json!({"replicas": 2, "updatedReplicas": 2, "availableReplicas": 2});
        let d = deployment(&[("a", 2, full.clone()), ("b", 1, full)]);
        assert!(available_on("Deployment", &d, &ClusterName::new("a")));
        assert!(
            !available_on("Deployment", &d, &ClusterName::new("b")),
            "stale generation"
        );
        assert!(
            !available_on("Deployment", &d, &ClusterName::new("c")),
            "no report"
        );
        let mut half = deployment(&[(
            "a",
            2,
            json!({"updatedReplicas": 1, "availableReplicas": 1}),
        )]);
        assert!(!available_on("Deployment", &half, &ClusterName::new("a")));
        half["metadata"]["annotations"]["replicas.sluice.dev/a"] = json!("1");
        assert!(available_on("Deployment", &half, &ClusterName::new("a")));
        // A report from before the share was applied is not current.
        let stale = StatusReport {
            observed_generation: 2,
            replicas: Some(2),
            start: None,
            status: json!({"updatedReplicas": 2, "availableReplicas": 2}),
        };
        half["metadata"]["annotations"]["status.sluice.dev/a"] =
            json!(serde_json::to_string(&stale).unwrap());
        assert!(!available_on("Deployment", &half, &ClusterName::new("a")));
        let s = summarize("Deployment", &half, &[ClusterName::new("a")]).unwrap();
        assert_eq!(s["observedGeneration"], 0);
    }
}
