//! Why one key's reconcile failed, by what it was writing.

use sluice_api::LogicalClusterPath;

/// What a reconcile writes.
#[derive(Clone, Copy, Debug)]
pub enum Write {
    /// A namespace's state labels and placement annotations.
    Placement,
    /// A namespace's `Placed` and `Drained` conditions.
    Conditions,
    /// A split workload's replica shares.
    ReplicaShares,
    /// A workload's status summed from the clusters.
    Status,
    /// A claim of a StatefulSet's ordinal, made or deleted in the logical cluster.
    OrdinalClaim,
    /// A lost cluster's Pod mirror's finalizer.
    MirrorRelease,
    /// A lost cluster's Pod mirror.
    MirrorDelete,
    /// A Placement's status.
    PlacementStatus,
    /// A Cluster's status.
    ClusterStatus,
}

/// Why one key's reconcile failed (retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("no client for logical cluster {0}: {1}")]
    Client(LogicalClusterPath, sluice_kube::ClientError),
    #[error("writing {what:?} of {object}: {source}")]
    Write {
        what: Write,
        object: String,
        source: kube::Error,
    },
}

impl ReconcileError {
    pub(super) fn write(what: Write, object: &str, source: kube::Error) -> Self {
        Self::Write {
            what,
            object: object.to_string(),
            source,
        }
    }
}
