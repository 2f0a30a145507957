//! The garbage collector's inbox: what the object pipeline hands it after a write (an
//! owner deleted, a dependent created, an owner held by a propagation finalizer). The
//! collector itself (`gc`) runs apart and writes back through the pipeline.

use serde_json::Value;
use sluice_api::LogicalClusterPath;
use tokio::sync::mpsc;

use crate::storage::Key;

/// The finalizer that holds an owner until its dependents are gone.
pub const FOREGROUND: &str = "foregroundDeletion";
/// The finalizer that holds an owner until its dependents lost their reference to it.
pub const ORPHAN: &str = "orphan";

/// Work for the collector.
#[derive(Debug, Clone)]
pub enum GcTask {
    /// An owner is gone: delete what it owned.
    Deleted {
        cluster: LogicalClusterPath,
        namespace: Option<String>,
        uid: String,
    },
    /// An owner holds `foregroundDeletion` or `orphan`: act, then release it.
    Finalize { key: Key },
    /// An object was created naming owners: if none of them exists (it was deleted
    /// while a controller still acted on it), the object goes as kube's collector
    /// removes dependents with dangling references. An owner not seen is looked for again
    /// (the collector's `DANGLING_CHECKS` times) before the object goes: another
    /// replica's write may not have reached this one's cache yet.
    Created { key: Key, checks: u8 },
}

/// Where the pipeline sends the collector its work.
pub type GcQueue = mpsc::UnboundedSender<GcTask>;

/// After `obj` (stored at `key`) was deleted: collect what it owned.
pub fn collect_dependents(queue: &GcQueue, key: &Key, obj: &Value) {
    if let (Some(uid), Some((cluster, namespace))) =
        (obj["metadata"]["uid"].as_str(), key_parts(key))
    {
        let _ = queue.send(GcTask::Deleted {
            cluster,
            namespace,
            uid: uid.to_string(),
        });
    }
}

/// After `obj` was created at `key`: have its owners checked, if it names any.
pub fn verify_owners(queue: &GcQueue, key: &Key, obj: &Value) {
    if obj["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|r| !r.is_empty())
    {
        let _ = queue.send(GcTask::Created {
            key: key.clone(),
            checks: 0,
        });
    }
}

/// The logical cluster and namespace of a stored key.
pub(crate) fn key_parts(key: &Key) -> Option<(LogicalClusterPath, Option<String>)> {
    let p = key.parts()?;
    let cluster = p.cluster.parse().ok()?;
    let ns = (!p.namespace.is_empty()).then(|| p.namespace.to_string());
    Some((cluster, ns))
}
