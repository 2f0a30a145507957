//! The embedded backend: redb (ACID, copy-on-write B-trees, fsync on commit).
//!
//! One writer thread owns the database. Writes queue on a channel; the thread drains
//! everything queued into one transaction ("group commit"), so concurrent writers share one
//! fsync while each still gets its own revision and its own success or failure.

use std::path::Path;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::future::BoxFuture;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use tokio::sync::oneshot;

use super::backend::{
    Backend, CommitSink, Committed, Expect, Op, Revision, Snapshot, StorageError,
};
use super::key::Key;

const OBJECTS: TableDefinition<&str, &[u8]> = TableDefinition::new("objects");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const REVISION: &str = "revision";
const REDB_CACHE_BYTES: usize = 32 * 1024 * 1024;
/// Upper bound of writes in one transaction.
const MAX_BATCH: usize = 512;

type Reply = oneshot::Sender<Result<Committed, StorageError>>;

pub struct RedbBackend {
    db: Arc<Database>,
    queue: Mutex<Option<std::sync::mpsc::Sender<(Op, Reply)>>>,
    receiver: Mutex<Option<std::sync::mpsc::Receiver<(Op, Reply)>>>,
}

fn backend_err(e: impl std::fmt::Display) -> StorageError {
    StorageError::Backend(e.to_string())
}

impl RedbBackend {
    pub fn open(path: &Path) -> Result<Self, StorageError> {
        // Reads are served from the in-memory store; redb's own cache only needs to hold
        // the pages a write transaction touches.
        let db = redb::Builder::new()
            .set_cache_size(REDB_CACHE_BYTES)
            .create(path)
            .map_err(backend_err)?;
        {
            let txn = db.begin_write().map_err(backend_err)?;
            txn.open_table(OBJECTS).map_err(backend_err)?;
            txn.open_table(META).map_err(backend_err)?;
            txn.commit().map_err(backend_err)?;
        }
        let (tx, rx) = std::sync::mpsc::channel();
        Ok(Self {
            db: Arc::new(db),
            queue: Mutex::new(Some(tx)),
            receiver: Mutex::new(Some(rx)),
        })
    }
}

fn encode(revision: Revision, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + value.len());
    out.extend_from_slice(&revision.0.to_be_bytes());
    out.extend_from_slice(value);
    out
}

fn decode(raw: &[u8]) -> Result<(Revision, &[u8]), StorageError> {
    if raw.len() < 8 {
        return Err(StorageError::Backend(
            "corrupt record: shorter than its revision".into(),
        ));
    }
    let (rev, value) = raw.split_at(8);
    let mut b = [0u8; 8];
    b.copy_from_slice(rev);
    Ok((Revision(u64::from_be_bytes(b)), value))
}

/// Check `expect` against what is stored under `key` (inside the write transaction).
fn check(table: &redb::Table<&str, &[u8]>, key: &Key, expect: Expect) -> Result<(), StorageError> {
    let current = match table.get(key.as_str()).map_err(backend_err)? {
        Some(raw) => Some(decode(raw.value())?.0),
        None => None,
    };
    match (expect, current) {
        (Expect::Absent, None) => Ok(()),
        (Expect::Absent, Some(_)) => Err(StorageError::AlreadyExists(key.clone())),
        (Expect::At(_), None) => Err(StorageError::NotFound(key.clone())),
        (Expect::At(want), Some(have)) if want == have => Ok(()),
        (Expect::At(want), Some(have)) => Err(StorageError::Conflict {
            key: key.clone(),
            expected: want,
            actual: have,
        }),
    }
}

fn write_loop(db: Arc<Database>, rx: std::sync::mpsc::Receiver<(Op, Reply)>, sink: CommitSink) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let outcome = commit_batch(&db, &batch);
        match outcome {
            Ok(results) => {
                let committed: Vec<Committed> = results
                    .iter()
                    .filter_map(|r| r.as_ref().ok().cloned())
                    .collect();
                if !committed.is_empty() {
                    sink(&committed);
                }
                for ((_, reply), result) in batch.into_iter().zip(results) {
                    let _ = reply.send(result);
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "storage commit failed");
                for (_, reply) in batch {
                    let _ = reply.send(Err(StorageError::Backend(e.to_string())));
                }
            }
        }
    }
}

/// One transaction for the whole batch; per-op precondition failures do not abort it.
fn commit_batch(
    db: &Database,
    batch: &[(Op, Reply)],
) -> Result<Vec<Result<Committed, StorageError>>, StorageError> {
    let txn = db.begin_write().map_err(backend_err)?;
    let mut results = Vec::with_capacity(batch.len());
    {
        let mut meta = txn.open_table(META).map_err(backend_err)?;
        let mut revision = meta
            .get(REVISION)
            .map_err(backend_err)?
            .map(|v| v.value())
            .unwrap_or(0);
        let mut objects = txn.open_table(OBJECTS).map_err(backend_err)?;
        for (op, _) in batch {
            let result = match op {
                Op::Put { key, value, expect } => check(&objects, key, *expect).and_then(|()| {
                    revision += 1;
                    objects
                        .insert(key.as_str(), encode(Revision(revision), value).as_slice())
                        .map_err(backend_err)?;
                    Ok(Committed {
                        revision: Revision(revision),
                        key: key.clone(),
                        value: Some(value.clone()),
                    })
                }),
                Op::Delete { key, expect } => check(&objects, key, *expect).and_then(|()| {
                    revision += 1;
                    objects.remove(key.as_str()).map_err(backend_err)?;
                    Ok(Committed {
                        revision: Revision(revision),
                        key: key.clone(),
                        value: None,
                    })
                }),
            };
            results.push(result);
        }
        meta.insert(REVISION, revision).map_err(backend_err)?;
    }
    txn.commit().map_err(backend_err)?;
    Ok(results)
}

impl Backend for RedbBackend {
    fn load(&self) -> Result<Snapshot, StorageError> {
        let txn = self.db.begin_read().map_err(backend_err)?;
        let meta = txn.open_table(META).map_err(backend_err)?;
        let revision = meta
            .get(REVISION)
            .map_err(backend_err)?
            .map(|v| v.value())
            .unwrap_or(0);
        let objects = txn.open_table(OBJECTS).map_err(backend_err)?;
        let mut out = Vec::new();
        for entry in objects.iter().map_err(backend_err)? {
            let (k, v) = entry.map_err(backend_err)?;
            let (rev, value) = decode(v.value())?;
            out.push((Key::from_raw(k.value()), rev, Bytes::copy_from_slice(value)));
        }
        Ok(Snapshot {
            items: out,
            revision: Revision(revision),
        })
    }

    fn start(&self, _from: Revision, sink: CommitSink) -> Result<(), StorageError> {
        let rx = self
            .receiver
            .lock()
            .map_err(backend_err)?
            .take()
            .ok_or_else(|| StorageError::Backend("backend already started".into()))?;
        let db = self.db.clone();
        std::thread::Builder::new()
            .name("sluice-redb-writer".into())
            .spawn(move || write_loop(db, rx, sink))
            .map_err(backend_err)?;
        Ok(())
    }

    fn commit(&self, op: Op) -> BoxFuture<'_, Result<Committed, StorageError>> {
        let (tx, rx) = oneshot::channel();
        let queued = self.queue.lock().map_err(backend_err).and_then(|q| {
            q.as_ref()
                .ok_or(StorageError::Closed)?
                .send((op, tx))
                .map_err(|_| StorageError::Closed)
        });
        Box::pin(async move {
            queued?;
            rx.await.map_err(|_| StorageError::Closed)?
        })
    }
}
