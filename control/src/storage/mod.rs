//! Storage: a durable, revisioned key-value backend behind [`Backend`], and the in-memory
//! [`Store`] above it that serves every read and feeds every watch from one event stream.
//!
//! A backend provides conditional writes that return a revision, a full load on start, and
//! events in revision order: the embedded [`RedbBackend`] (the default, nothing to
//! install) or [`EtcdBackend`].

mod backend;
pub mod cache;
mod etcd_backend;
mod etcd_rpc;
mod key;
mod redb_backend;

pub use backend::{Backend, CommitSink, Committed, Expect, Op, Revision, Snapshot, StorageError};
pub use cache::{Event, EventType, Store, WatchError, WatchSubscription};
pub use etcd_backend::{EtcdBackend, EtcdConfig};
pub use key::{Key, ResourcePrefix};
pub use redb_backend::RedbBackend;
