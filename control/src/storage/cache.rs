//! The in-memory store: the current state of every object and, per resource type, a
//! bounded history of events with a broadcast channel. Every read is served from here and
//! one committed write feeds every watcher; watchers never read the backend.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use tokio::sync::broadcast;

use super::backend::{Backend, Committed, Op, Revision, StorageError};
use super::key::{Key, ResourcePrefix};

/// What happened to an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

/// One committed change as watchers see it.
#[derive(Debug)]
pub struct Event {
    pub kind: EventType,
    pub key: Key,
    pub revision: Revision,
    /// The object after the change; for a delete, its last state.
    pub value: Bytes,
    /// The object before the change, when there was one (selector transitions need it).
    pub previous: Option<Bytes>,
}

/// A stored object.
#[derive(Debug)]
pub struct Entry {
    pub revision: Revision,
    pub value: Bytes,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WatchError {
    /// The requested revision is older than the retained history.
    #[error("too old resource version: {requested} ({oldest})")]
    Expired {
        requested: Revision,
        oldest: Revision,
    },
    /// The watcher fell too far behind the event stream.
    #[error("watcher fell behind the event stream")]
    Lagged,
    #[error("store closed")]
    Closed,
}

struct ResourceLog {
    history: VecDeque<Arc<Event>>,
    /// The bytes the history holds (each event's object and previous state).
    bytes: usize,
    /// Events at or below this revision are no longer retained.
    truncated_upto: Revision,
    tx: broadcast::Sender<Arc<Event>>,
}

struct State {
    objects: BTreeMap<Key, Arc<Entry>>,
    revision: Revision,
    /// Revision at which this process loaded storage; no history exists before it.
    loaded_at: Revision,
    logs: HashMap<String, ResourceLog>,
}

/// Events kept per resource type for watches that resume from a revision.
pub const DEFAULT_HISTORY: usize = 10_000;
/// Bytes of events kept per resource type: counted events alone let one tenant's large
/// writes (objects of up to 3 MiB, each event holding the object and its previous state)
/// fill memory; beyond this, the oldest events go (a watch from before them gets 410).
pub const DEFAULT_HISTORY_BYTES: usize = 128 * 1024 * 1024;
const BROADCAST_CAPACITY: usize = 8_192;

struct Inner {
    state: RwLock<State>,
    backend: Box<dyn Backend>,
    history: usize,
    history_bytes: usize,
    revision_tx: tokio::sync::watch::Sender<Revision>,
}

/// The store every handler and controller uses. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

/// A watch: the retained events after the start revision, then the live stream.
pub struct WatchSubscription {
    backlog: VecDeque<Arc<Event>>,
    rx: broadcast::Receiver<Arc<Event>>,
}

impl WatchSubscription {
    pub async fn next(&mut self) -> Result<Arc<Event>, WatchError> {
        if let Some(e) = self.backlog.pop_front() {
            return Ok(e);
        }
        match self.rx.recv().await {
            Ok(e) => Ok(e),
            Err(broadcast::error::RecvError::Lagged(_)) => Err(WatchError::Lagged),
            Err(broadcast::error::RecvError::Closed) => Err(WatchError::Closed),
        }
    }
}

fn resource_of(key: &Key) -> &str {
    key.parts().map(|p| p.resource).unwrap_or("")
}

impl Store {
    /// Load everything from `backend` and start receiving its commits, keeping up to
    /// `history` events per resource type (and [`DEFAULT_HISTORY_BYTES`] of them).
    pub fn open(backend: impl Backend, history: usize) -> Result<Self, StorageError> {
        Self::open_with(backend, history, DEFAULT_HISTORY_BYTES)
    }

    /// [`Store::open`], keeping at most `history_bytes` of events per resource type.
    pub fn open_with(
        backend: impl Backend,
        history: usize,
        history_bytes: usize,
    ) -> Result<Self, StorageError> {
        let super::backend::Snapshot { items, revision } = backend.load()?;
        let objects = items
            .into_iter()
            .map(|(k, rev, value)| {
                let value = with_resource_version(&value, rev);
                (
                    k,
                    Arc::new(Entry {
                        revision: rev,
                        value,
                    }),
                )
            })
            .collect();
        let (revision_tx, _) = tokio::sync::watch::channel(revision);
        let inner = Arc::new(Inner {
            state: RwLock::new(State {
                objects,
                revision,
                loaded_at: revision,
                logs: HashMap::new(),
            }),
            backend: Box::new(backend),
            history: history.max(1),
            history_bytes,
            revision_tx,
        });
        let weak = Arc::downgrade(&inner);
        inner.backend.start(
            revision,
            Arc::new(move |commits: &[Committed]| {
                if let Some(inner) = weak.upgrade() {
                    apply(&inner, commits);
                }
            }),
        )?;
        Ok(Self { inner })
    }

    pub fn revision(&self) -> Revision {
        self.read().revision
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.inner.state.read().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, key: &Key) -> Option<Arc<Entry>> {
        self.read().objects.get(key).cloned()
    }

    /// The object at `key` and the store revision it was read at, under one lock: a list
    /// by name returns that revision, and a watch from it must see every later change of
    /// the object (read apart, a deletion in between was lost to `kubectl delete --wait`).
    pub fn get_at(&self, key: &Key) -> (Option<Arc<Entry>>, Revision) {
        let state = self.read();
        (state.objects.get(key).cloned(), state.revision)
    }

    /// Visit the objects whose key starts with `prefix`, in key order, starting after
    /// `after` when given; stop when `visit` returns false. Returns the store revision the
    /// visit saw.
    pub fn scan(
        &self,
        prefix: &str,
        after: Option<&str>,
        mut visit: impl FnMut(&Key, &Arc<Entry>) -> bool,
    ) -> Revision {
        let state = self.read();
        let start = match after {
            Some(a) => Bound::Excluded(Key::from_raw(a)),
            None => Bound::Included(Key::from_raw(prefix)),
        };
        for (k, e) in state.objects.range((start, Bound::Unbounded)) {
            if !k.as_str().starts_with(prefix) || !visit(k, e) {
                break;
            }
        }
        state.revision
    }

    /// Number of objects under `prefix`.
    pub fn count(&self, prefix: &str) -> usize {
        let mut n = 0;
        self.scan(prefix, None, |_, _| {
            n += 1;
            true
        });
        n
    }

    /// Write, and return once the write is durable and visible to readers and watchers.
    pub async fn write(&self, op: Op) -> Result<Committed, StorageError> {
        let committed = self.inner.backend.commit(op).await?;
        let mut rx = self.inner.revision_tx.subscribe();
        while *rx.borrow_and_update() < committed.revision {
            if rx.changed().await.is_err() {
                return Err(StorageError::Closed);
            }
        }
        Ok(committed)
    }

    /// Watch one resource type from `from` (exclusive).
    pub fn watch(
        &self,
        resource: &ResourcePrefix,
        from: Revision,
    ) -> Result<WatchSubscription, WatchError> {
        let mut state = self.inner.state.write().unwrap_or_else(|p| p.into_inner());
        let loaded_at = state.loaded_at;
        let log = state
            .logs
            .entry(resource.as_str().to_string())
            .or_insert_with(|| ResourceLog {
                history: VecDeque::new(),
                bytes: 0,
                truncated_upto: loaded_at,
                tx: broadcast::channel(BROADCAST_CAPACITY).0,
            });
        if from < log.truncated_upto {
            return Err(WatchError::Expired {
                requested: from,
                oldest: log.truncated_upto,
            });
        }
        let backlog = log
            .history
            .iter()
            .filter(|e| e.revision > from)
            .cloned()
            .collect();
        Ok(WatchSubscription {
            backlog,
            rx: log.tx.subscribe(),
        })
    }

    /// Every resource type with a live watcher, and how many watchers it has.
    pub fn watchers(&self) -> Vec<(String, usize)> {
        self.read()
            .logs
            .iter()
            .map(|(k, l)| (k.clone(), l.tx.receiver_count()))
            .collect()
    }
}

/// Set `metadata.resourceVersion` in a stored JSON object. Done once per write, so that
/// reads and watch events serve stored bytes as they are.
pub fn with_resource_version(value: &[u8], revision: Revision) -> Bytes {
    match serde_json::from_slice::<serde_json::Value>(value) {
        Ok(mut v) if v.is_object() => {
            if !v["metadata"].is_object() {
                v["metadata"] = serde_json::json!({});
            }
            v["metadata"]["resourceVersion"] = serde_json::Value::String(revision.0.to_string());
            serde_json::to_vec(&v)
                .map(Bytes::from)
                .unwrap_or_else(|_| Bytes::copy_from_slice(value))
        }
        _ => Bytes::copy_from_slice(value),
    }
}

/// The bytes an event holds in the history.
fn event_bytes(e: &Event) -> usize {
    e.value.len() + e.previous.as_ref().map_or(0, Bytes::len)
}

fn apply(inner: &Inner, commits: &[Committed]) {
    let stamped: Vec<Option<Bytes>> = commits
        .iter()
        .map(|c| {
            c.value
                .as_ref()
                .map(|v| with_resource_version(v, c.revision))
        })
        .collect();
    let mut guard = inner.state.write().unwrap_or_else(|p| p.into_inner());
    let state = &mut *guard;
    for (c, value) in commits.iter().zip(stamped) {
        let previous = match &value {
            Some(v) => state.objects.insert(
                c.key.clone(),
                Arc::new(Entry {
                    revision: c.revision,
                    value: v.clone(),
                }),
            ),
            None => state.objects.remove(&c.key),
        };
        state.revision = c.revision;
        let event = match (&value, previous) {
            (Some(v), None) => Event {
                kind: EventType::Added,
                key: c.key.clone(),
                revision: c.revision,
                value: v.clone(),
                previous: None,
            },
            (Some(v), Some(p)) => Event {
                kind: EventType::Modified,
                key: c.key.clone(),
                revision: c.revision,
                value: v.clone(),
                previous: Some(p.value.clone()),
            },
            (None, Some(p)) => Event {
                kind: EventType::Deleted,
                key: c.key.clone(),
                revision: c.revision,
                value: with_resource_version(&p.value, c.revision),
                previous: Some(p.value.clone()),
            },
            (None, None) => continue,
        };
        let resource = resource_of(&c.key);
        let loaded_at = state.loaded_at;
        let log = match state.logs.get_mut(resource) {
            Some(l) => l,
            None => state
                .logs
                .entry(resource.to_string())
                .or_insert_with(|| ResourceLog {
                    history: VecDeque::new(),
                    bytes: 0,
                    truncated_upto: loaded_at,
                    tx: broadcast::channel(BROADCAST_CAPACITY).0,
                }),
        };
        let event = Arc::new(event);
        let size = event_bytes(&event);
        // Room for it, by count and by bytes (the newest event is always kept).
        while (log.history.len() >= inner.history
            || (!log.history.is_empty() && log.bytes + size > inner.history_bytes))
            && let Some(old) = log.history.pop_front()
        {
            log.bytes -= event_bytes(&old);
            log.truncated_upto = old.revision;
        }
        log.bytes += size;
        log.history.push_back(event.clone());
        let _ = log.tx.send(event);
    }
    let revision = state.revision;
    drop(guard);
    inner.revision_tx.send_replace(revision);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{Expect, RedbBackend};

    fn key(name: &str) -> Key {
        ResourcePrefix::new("", "configmaps").key(
            &sluice_api::LogicalClusterPath::root(),
            Some("d"),
            name,
        )
    }

    #[tokio::test]
    async fn write_read_watch_and_expire() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(RedbBackend::open(&dir.path().join("db")).unwrap(), 3).unwrap();
        let res = ResourcePrefix::new("", "configmaps");
        let mut w = store.watch(&res, Revision(0)).unwrap();
        let c1 = store
            .write(Op::Put {
                key: key("a"),
                value: Bytes::from_static(b"{}"),
                expect: Expect::Absent,
            })
            .await
            .unwrap();
        assert_eq!(store.get(&key("a")).unwrap().revision, c1.revision);
        let dup = store
            .write(Op::Put {
                key: key("a"),
                value: Bytes::from_static(b"{}"),
                expect: Expect::Absent,
            })
            .await;
        assert!(matches!(dup, Err(StorageError::AlreadyExists(_))));
        let stale = store
            .write(Op::Put {
                key: key("a"),
                value: Bytes::from_static(b"{}"),
                expect: Expect::At(Revision(99)),
            })
            .await;
        assert!(matches!(stale, Err(StorageError::Conflict { .. })));
        let e = w.next().await.unwrap();
        assert_eq!(e.kind, EventType::Added);
        for n in ["b", "c", "d", "e"] {
            store
                .write(Op::Put {
                    key: key(n),
                    value: Bytes::from_static(b"{}"),
                    expect: Expect::Absent,
                })
                .await
                .unwrap();
        }
        assert!(matches!(
            store.watch(&res, c1.revision),
            Err(WatchError::Expired { .. })
        ));
        let recent = store.watch(&res, Revision(store.revision().0 - 2)).unwrap();
        assert_eq!(recent.backlog.len(), 2);
        store
            .write(Op::Delete {
                key: key("a"),
                expect: Expect::At(c1.revision),
            })
            .await
            .unwrap();
        assert!(store.get(&key("a")).is_none());
        let mut n = 0;
        store.scan(&res.scope(None, None), None, |_, _| {
            n += 1;
            true
        });
        assert_eq!(n, 4);
        drop(store);
        let reopened = Store::open(RedbBackend::open(&dir.path().join("db2")).unwrap(), 3).unwrap();
        assert_eq!(reopened.revision(), Revision(0));
    }

    #[tokio::test]
    async fn the_history_is_bounded_in_bytes_too() {
        let dir = tempfile::tempdir().unwrap();
        let backend = RedbBackend::open(&dir.path().join("db")).unwrap();
        // Room for 10,000 events by count, 100 KiB by bytes.
        let store = Store::open_with(backend, 10_000, 100 * 1024).unwrap();
        let res = ResourcePrefix::new("", "configmaps");
        let big = Bytes::from(format!("{{\"data\":\"{}\"}}", "x".repeat(30 * 1024)));
        let mut first = None;
        for i in 0..10 {
            let c = store
                .write(Op::Put {
                    key: key(&format!("k{i}")),
                    value: big.clone(),
                    expect: Expect::Absent,
                })
                .await
                .unwrap();
            first.get_or_insert(c.revision);
        }
        let held = {
            let state = store.read();
            let log = &state.logs[res.as_str()];
            assert!(log.bytes <= 100 * 1024, "{}", log.bytes);
            assert_eq!(
                log.bytes,
                log.history.iter().map(|e| event_bytes(e)).sum::<usize>()
            );
            log.history.len()
        };
        assert_eq!(held, 3, "30 KiB events in 100 KiB");
        let oldest = first.unwrap();
        assert!(matches!(
            store.watch(&res, oldest),
            Err(WatchError::Expired { .. })
        ));
        // An event larger than the whole budget is still kept (the newest always is).
        let huge = Bytes::from(format!("{{\"data\":\"{}\"}}", "y".repeat(200 * 1024)));
        store
            .write(Op::Put {
                key: key("huge"),
                value: huge,
                expect: Expect::Absent,
            })
            .await
            .unwrap();
        let recent = store.watch(&res, Revision(store.revision().0 - 1)).unwrap();
        assert_eq!(recent.backlog.len(), 1);
    }
}
