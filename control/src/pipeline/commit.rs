//! The one door to storage. Requests reach it through the pipeline's admission; the
//! server's own writers — the garbage collector, namespace termination, bootstrap, the
//! leader lease, Events and the restamping of derived fields — call it directly, so every
//! write is traced with who made it and nothing else in the server writes storage
//! (`tests/layers.rs` checks the sources).

use serde_json::Value;

use crate::storage::{Committed, Expect, Key, Op, Revision, StorageError, Store};

/// Who asks for a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Writer {
    /// A client's request, after admission.
    Request,
    /// The garbage collector: finalizers released, ownerReferences dropped.
    GarbageCollector,
    /// Namespace and CRD termination removing what it emptied.
    Termination,
    /// The objects every logical cluster starts with.
    Bootstrap,
    /// The replicas' leader lease.
    LeaderLease,
    /// Events the server records.
    Events,
    /// A field derived from another object, written again when that object changed
    /// (PodSecurity levels, downstream names, Ingress host claims).
    Restamp,
}

impl Writer {
    /// The name in traces.
    pub fn as_str(self) -> &'static str {
        match self {
            Writer::Request => "request",
            Writer::GarbageCollector => "garbage-collector",
            Writer::Termination => "termination",
            Writer::Bootstrap => "bootstrap",
            Writer::LeaderLease => "leader-lease",
            Writer::Events => "events",
            Writer::Restamp => "restamp",
        }
    }
}

/// Apply one conditional write; acknowledged once durable and seen by the cache.
pub async fn commit(store: &Store, writer: Writer, op: Op) -> Result<Committed, StorageError> {
    let delete = matches!(op, Op::Delete { .. });
    let key = op.key().clone();
    let result = store.write(op).await;
    match &result {
        Ok(c) => {
            tracing::trace!(writer = writer.as_str(), %key, delete, revision = c.revision.0, "committed")
        }
        Err(e) => {
            tracing::debug!(writer = writer.as_str(), %key, delete, error = %e, "write refused")
        }
    }
    result
}

/// The write that replaces the object at `key`, read at `revision`, with `obj` — or, as
/// kube's registry does on an update, removes it when it is being deleted and its last
/// finalizer is gone (the caller then collects its dependents).
pub fn replace_or_remove(key: &Key, obj: &Value, revision: Revision) -> Result<Op, StorageError> {
    let expect = Expect::At(revision);
    if crate::object::is_deleting(obj) && crate::object::finalizers(obj) == 0 {
        return Ok(Op::Delete {
            key: key.clone(),
            expect,
        });
    }
    let value = serde_json::to_vec(obj).map_err(|e| StorageError::Backend(e.to_string()))?;
    Ok(Op::Put {
        key: key.clone(),
        value: value.into(),
        expect,
    })
}
