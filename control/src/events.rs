//! Events the API server itself reports about an object (as kube-apiserver's admission
//! controllers cannot, Sluice's server re-decides things later: an Ingress losing a host
//! when its workspace's domains narrow). Written straight to storage, as `core/v1` Events
//! in the object's logical cluster and namespace, so `kubectl describe` shows them.

use bytes::Bytes;
use serde_json::{Value, json};
use sluice_api::LogicalClusterPath;

use crate::pipeline::commit::{Writer, commit};
use crate::storage::{Expect, Op, ResourcePrefix, StorageError, Store};

/// A Warning Event's reason (kube's CamelCase word).
#[derive(Clone, Copy, Debug)]
pub struct Warning(pub &'static str);

/// The component Events of the API server name as their source.
const COMPONENT: &str = "sluice-apiserver";

/// Record a Warning Event about `involved` (a stored object of logical cluster `cluster`).
pub async fn record(
    store: &Store,
    cluster: &LogicalClusterPath,
    involved: &Value,
    reason: Warning,
    message: &str,
) -> Result<(), StorageError> {
    let meta = &involved["metadata"];
    let Some(name) = meta["name"].as_str() else {
        return Ok(());
    };
    let namespace = meta["namespace"].as_str().unwrap_or("default");
    let now = crate::object::now_rfc3339();
    let event_name = format!("{name}.{}", uuid::Uuid::new_v4().simple());
    let event = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": event_name,
            "namespace": namespace,
            "uid": uuid::Uuid::new_v4().to_string(),
            "creationTimestamp": now,
            "annotations": {sluice_api::LOGICAL_CLUSTER_ANNOTATION: cluster.as_str()},
        },
        "involvedObject": {
            "apiVersion": involved["apiVersion"],
            "kind": involved["kind"],
            "name": name,
            "namespace": namespace,
            "uid": meta["uid"],
        },
        "reason": reason.0,
        "message": message,
        "type": "Warning",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    });
    let key = ResourcePrefix::new("", "events").key(cluster, Some(namespace), &event_name);
    let value =
        Bytes::from(serde_json::to_vec(&event).map_err(|e| StorageError::Backend(e.to_string()))?);
    commit(
        store,
        Writer::Events,
        Op::Put {
            key,
            value,
            expect: Expect::Absent,
        },
    )
    .await
    .map(|_| ())
}
