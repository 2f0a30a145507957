//! The backend contract: revisions, conditional writes, what a backend loads on start
//! and how it delivers what it committed.

use super::key::Key;
use bytes::Bytes;
use futures::future::BoxFuture;
use std::fmt;

/// The single, monotonically increasing revision of the store; every write gets a new one.
/// It is the `resourceVersion` of objects and lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Revision(pub u64);

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::str::FromStr for Revision {
    type Err = std::num::ParseIntError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(Revision)
    }
}

/// What a conditional write expects to find.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// The key must not exist (create).
    Absent,
    /// The key must exist at exactly this revision (optimistic concurrency).
    At(Revision),
}

/// One write.
#[derive(Clone, Debug)]
pub enum Op {
    Put {
        key: Key,
        value: Bytes,
        expect: Expect,
    },
    Delete {
        key: Key,
        expect: Expect,
    },
}

impl Op {
    pub fn key(&self) -> &Key {
        match self {
            Op::Put { key, .. } | Op::Delete { key, .. } => key,
        }
    }
}

/// A committed write, as seen by the cache.
#[derive(Clone, Debug)]
pub struct Committed {
    pub revision: Revision,
    pub key: Key,
    /// `None` for a delete.
    pub value: Option<Bytes>,
}

/// Errors of the storage layer; mapped to API errors in one place (`errors.rs`).
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("key {0} already exists")]
    AlreadyExists(Key),
    #[error("key {0} not found")]
    NotFound(Key),
    #[error("key {key} is at revision {actual}, not {expected}")]
    Conflict {
        key: Key,
        expected: Revision,
        actual: Revision,
    },
    #[error("storage backend failure: {0}")]
    Backend(String),
    #[error("storage is shutting down")]
    Closed,
}

/// What a backend holds when it starts: every live key with its revision and value, and
/// the current revision.
pub struct Snapshot {
    pub items: Vec<(Key, Revision, Bytes)>,
    pub revision: Revision,
}

/// Receives committed writes in revision order.
pub type CommitSink = std::sync::Arc<dyn Fn(&[Committed]) + Send + Sync>;

/// A durable key-value store with one revision counter.
///
/// `commit` is acknowledged only after the write is durable. Every committed write is
/// delivered to the sink given to `start`, in revision order; the [`Store`] waits until
/// its cache has seen a write's revision before acknowledging it to the client, so a
/// backend may deliver synchronously (redb) or from a watch stream (etcd).
pub trait Backend: Send + Sync + 'static {
    /// Every live key with its value and revision, plus the current revision.
    fn load(&self) -> Result<Snapshot, StorageError>;

    /// Start delivering committed writes after `from` to `sink`.
    fn start(&self, from: Revision, sink: CommitSink) -> Result<(), StorageError>;

    /// Apply one write atomically. Writers may be batched into one durable commit.
    fn commit(&self, op: Op) -> BoxFuture<'_, Result<Committed, StorageError>>;
}
