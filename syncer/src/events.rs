//! Events travel up: what a physical cluster's components record about a synced object or
//! a Pod (scheduling, container starts, probe failures, back-offs, scaling, a Job's end) is
//! copied into the logical cluster as an Event on the upstream object or the Pod's mirror,
//! so `kubectl describe` and `kubectl get events` there tell what happened, from which
//! cluster (the source's host is `<cluster>` or `<node>.<cluster>`).

use serde_json::{Value, json};
use sluice_api::ClusterName;

/// The upstream object a downstream Event is about.
pub struct Regarding<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: Option<&'a str>,
}

/// A Warning Event the syncer itself records upstream about `regarding` (created with
/// `generateName`: each is a new occurrence).
pub fn warning(regarding: &Regarding<'_>, reason: &str, message: &str) -> Value {
    let now = sluice_kube::time::now_rfc3339();
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": format!("{}.", regarding.name)},
        "involvedObject": {"apiVersion": regarding.api_version, "kind": regarding.kind,
            "name": regarding.name, "namespace": regarding.namespace, "uid": regarding.uid},
        "reason": reason,
        "type": "Warning",
        "message": message,
        "source": {"component": sluice_api::sync::FIELD_MANAGER},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    })
}

/// The longest name an Event may have (a DNS subdomain).
const MAX_NAME: usize = 253;

/// The name of the upstream copy of downstream Event `name` from `cluster`: the same in
/// every round, so a copy is updated, not made again.
pub fn upstream_name(name: &str, cluster: &ClusterName) -> Option<String> {
    let up = format!("{name}.{cluster}");
    (up.len() <= MAX_NAME).then_some(up)
}

/// The upstream copy (for server-side apply) of downstream Event `down`, from `cluster`,
/// about `regarding`; `None` when it cannot be named.
pub fn upstream_event(
    down: &Value,
    regarding: &Regarding<'_>,
    cluster: &ClusterName,
) -> Option<Value> {
    let name = upstream_name(down["metadata"]["name"].as_str()?, cluster)?;
    let host = match down["source"]["host"].as_str().filter(|h| !h.is_empty()) {
        Some(node) => format!("{node}.{cluster}"),
        None => cluster.to_string(),
    };
    let component = down["source"]["component"]
        .as_str()
        .or(down["reportingComponent"].as_str())
        .unwrap_or("");
    Some(json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": regarding.namespace},
        "involvedObject": {
            "apiVersion": regarding.api_version, "kind": regarding.kind,
            "namespace": regarding.namespace, "name": regarding.name, "uid": regarding.uid,
        },
        "type": down["type"],
        "reason": down["reason"],
        "message": down["message"],
        "count": down["count"],
        "firstTimestamp": down["firstTimestamp"],
        "lastTimestamp": down["lastTimestamp"],
        "source": {"component": component, "host": host},
        "reportingComponent": component,
        "reportingInstance": host,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_names_its_cluster_and_points_at_the_upstream_object() {
        let down = json!({
            "metadata": {"name": "web-1.abc", "namespace": "shop-xyz"},
            "involvedObject": {"kind": "Pod", "name": "web-1", "namespace": "shop-xyz", "uid": "down"},
            "type": "Warning", "reason": "BackOff", "message": "Back-off restarting",
            "count": 3, "source": {"component": "kubelet", "host": "east-node"},
        });
        let regarding = Regarding {
            api_version: "v1",
            kind: "Pod",
            namespace: "shop",
            name: "web-1",
            uid: Some("up"),
        };
        let up = upstream_event(&down, &regarding, &ClusterName::new("east")).unwrap();
        assert_eq!(up["metadata"]["name"], "web-1.abc.east");
        assert_eq!(up["metadata"]["namespace"], "shop");
        assert_eq!(up["involvedObject"]["uid"], "up");
        assert_eq!(up["involvedObject"]["namespace"], "shop");
        assert_eq!(up["source"]["host"], "east-node.east");
        assert_eq!(up["count"], 3);
        let long = json!({"metadata": {"name": "x".repeat(250)}});
        assert!(upstream_event(&long, &regarding, &ClusterName::new("east")).is_none());
    }
}
