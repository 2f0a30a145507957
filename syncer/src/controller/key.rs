//! What the syncer reconciles, one key at a time.

/// A key of the syncer's queue.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    /// A downstream namespace: its objects synced down, their status and finalizers up,
    /// its imports reported, its pods mirrored and its Events copied up. Every event of an
    /// object in it (either side) touches it.
    Namespace(String),
    /// The syncable custom resource definitions changed: install them, and watch the kinds
    /// that are new.
    Definitions,
    /// Refused namespace claims to report upstream.
    Conflicts,
    /// A watch re-listed (objects deleted meanwhile have no event), or a kind became known
    /// downstream: every namespace is touched once.
    Resync,
    /// Kinds the cluster has not listed yet: looked at until each is listed or given up
    /// on, and everything is touched when one is.
    Kinds,
    /// Touched after the first resync's namespaces: the syncer is ready once they are all
    /// reconciled.
    Ready,
}
