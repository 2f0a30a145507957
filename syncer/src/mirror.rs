//! Pods (and the claims a cluster makes, [`claim`]) travel the other way: each pod the cluster runs for a synced namespace is mirrored
//! into its logical cluster, so `kubectl get pods -o wide` there shows it, with the cluster
//! it runs on as its node (`<node>.<cluster>`) and the label `sluice.dev/cluster`. The
//! mirror has no owner (its owner lives downstream, and the control plane's garbage
//! collector would take an owner it cannot find for a deleted one). It is read-only upstream
//! (the API server refuses writes from anyone but the syncer); deleting it deletes the real
//! Pod — its controller there makes a new one, mirrored in turn — and only then the mirror,
//! which holds the cluster's sync finalizer until then.

use serde_json::{Map, Value};
use sluice_api::ClusterName;
use sluice_api::sync::{LABEL_CLUSTER, sync_finalizer};

use crate::transform::Origin;

/// The upstream mirror of downstream pod `pod`, whose namespace came from `origin`'s
/// namespace, running on `cluster`.
pub fn pod(pod: &Value, origin: &Origin, cluster: &ClusterName) -> Option<Value> {
    let metadata = mirror_metadata(pod, origin, cluster)?;
    let mut spec = pod["spec"].clone();
    if let Some(node) = spec["nodeName"].as_str().filter(|n| !n.is_empty()) {
        spec["nodeName"] = Value::from(format!("{node}.{cluster}"));
    }
    Some(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": spec,
        "status": pod["status"].clone(),
    }))
}

/// The upstream mirror of a claim `cluster` made itself (a StatefulSet's, from its claim
/// templates): `kubectl get pvc` in the logical cluster lists it with the class, volume
/// and status it has where it is, and the cluster's label.
pub fn claim(claim: &Value, origin: &Origin, cluster: &ClusterName) -> Option<Value> {
    let metadata = mirror_metadata(claim, origin, cluster)?;
    Some(serde_json::json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata,
        "spec": claim["spec"].clone(),
        "status": claim["status"].clone(),
    }))
}

/// A mirror's metadata: the name, the upstream namespace, the labels and annotations, the
/// cluster's label and its sync finalizer; no owner, no uid.
fn mirror_metadata(
    obj: &Value,
    origin: &Origin,
    cluster: &ClusterName,
) -> Option<Map<String, Value>> {
    let name = obj["metadata"]["name"].as_str()?;
    let mut labels: Map<String, Value> = obj["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    labels.insert(LABEL_CLUSTER.into(), Value::from(cluster.as_str()));
    let mut metadata = Map::new();
    metadata.insert("name".into(), Value::from(name));
    metadata.insert("namespace".into(), Value::from(origin.namespace.as_str()));
    metadata.insert("labels".into(), Value::Object(labels));
    // Deleting the mirror upstream waits for the syncer, which deletes the real object first.
    metadata.insert(
        "finalizers".into(),
        Value::from(vec![sync_finalizer(cluster)]),
    );
    if let Some(a) = obj["metadata"]["annotations"].as_object()
        && !a.is_empty()
    {
        metadata.insert("annotations".into(), Value::Object(a.clone()));
    }
    Some(metadata)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_claim_mirror_keeps_the_class_volume_and_status_it_has_there() {
        let down = json!({
            "metadata": {"name": "data-db-0", "namespace": "shop-abc", "uid": "u",
                "labels": {"app": "db"},
                "ownerReferences": [{"kind": "Pod", "name": "db-0", "uid": "p"}]},
            "spec": {"storageClassName": "standard", "volumeName": "pvc-u",
                "accessModes": ["ReadWriteOnce"]},
            "status": {"phase": "Bound", "capacity": {"storage": "10Mi"}},
        });
        let origin = Origin {
            logical_cluster: "root:shop".parse().unwrap(),
            namespace: "shop".into(),
            name: "data-db-0".into(),
        };
        let up = claim(&down, &origin, &ClusterName::new("east")).unwrap();
        assert_eq!(up["kind"], "PersistentVolumeClaim");
        assert_eq!(up["metadata"]["namespace"], "shop");
        assert_eq!(up["metadata"]["labels"]["sluice.dev/cluster"], "east");
        assert_eq!(up["metadata"]["labels"]["app"], "db");
        assert!(up["metadata"].get("ownerReferences").is_none());
        assert_eq!(up["spec"]["volumeName"], "pvc-u");
        assert_eq!(up["status"]["phase"], "Bound");
        assert_eq!(
            up["metadata"]["finalizers"],
            json!(["syncer.sluice.dev/east"])
        );
    }

    #[test]
    fn a_mirror_names_its_cluster_and_has_no_owner() {
        let down = json!({
            "metadata": {"name": "web-1", "namespace": "shop-abc", "uid": "u",
                "labels": {"app": "web"},
                "ownerReferences": [{"kind": "ReplicaSet", "name": "web", "uid": "r"}]},
            "spec": {"nodeName": "node-1", "containers": [{"name": "echo"}]},
            "status": {"phase": "Running", "podIP": "127.20.0.5"},
        });
        let origin = Origin {
            logical_cluster: "root:shop".parse().unwrap(),
            namespace: "shop".into(),
            name: "web-1".into(),
        };
        let up = pod(&down, &origin, &ClusterName::new("east")).unwrap();
        assert_eq!(up["metadata"]["namespace"], "shop");
        assert_eq!(up["metadata"]["labels"]["sluice.dev/cluster"], "east");
        assert_eq!(up["spec"]["nodeName"], "node-1.east");
        assert!(up["metadata"].get("ownerReferences").is_none());
        assert!(up["metadata"].get("uid").is_none());
        assert_eq!(up["status"]["podIP"], "127.20.0.5");
        assert_eq!(
            up["metadata"]["finalizers"],
            json!(["syncer.sluice.dev/east"])
        );
    }
}
