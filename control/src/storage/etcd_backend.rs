//! etcd as the storage backend: the distributed engine for installations that outgrow one
//! machine, and what several control replicas share.
//!
//! The contract of [`Backend`] maps onto etcd's directly: a key is the installation's
//! prefix plus the store key; the etcd revision is the resourceVersion; a conditional
//! write is one transaction comparing the key's `create_revision` (absent) or
//! `mod_revision` (at a revision); committed writes reach the cache through one prefix
//! watch, so a write made through any replica reaches every replica's watchers in etcd's
//! order. Old revisions are compacted on a schedule, as kube-apiserver does.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;

use super::backend::{
    Backend, CommitSink, Committed, Expect, Op, Revision, Snapshot, StorageError,
};
use super::etcd_rpc::pb::etcdserverpb::response_op::Response;
use super::etcd_rpc::pb::mvccpb::event::EventType;
use super::etcd_rpc::{self, ConnectOptions, EtcdClient, EtcdError};
use super::key::Key;

/// Keys read per page while loading.
const PAGE: i64 = 1_000;
/// How long a request to etcd may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause before a broken watch is opened again.
const REWATCH_PAUSE: Duration = Duration::from_millis(200);

/// Where etcd is and how to reach it.
#[derive(Clone, Debug)]
pub struct EtcdConfig {
    /// Client URLs (`http://127.0.0.1:2379`, `https://...`).
    pub endpoints: Vec<String>,
    /// Every key of this installation starts with it; replicas of one control plane share
    /// it, different installations on one etcd use different ones.
    pub prefix: String,
    /// CA bundle that signed etcd's server certificates (https endpoints).
    pub ca_file: Option<PathBuf>,
    /// Client certificate and key, when etcd asks for one.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// How often revisions older than the previous run are compacted; `None`: never.
    pub compaction_interval: Option<Duration>,
}

impl EtcdConfig {
    pub fn new(endpoints: Vec<String>) -> Self {
        Self {
            endpoints,
            prefix: "/sluice/".into(),
            ca_file: None,
            cert_file: None,
            key_file: None,
            compaction_interval: Some(Duration::from_secs(300)),
        }
    }
}

pub struct EtcdBackend {
    client: EtcdClient,
    prefix: String,
    /// What `connect` loaded, handed to the store once.
    snapshot: Mutex<Option<Snapshot>>,
    compaction_interval: Option<Duration>,
}

/// Attempts more for a write whose connection to a member could not be made.
const CONNECT_RETRIES: usize = 2;

fn etcd_err(e: EtcdError) -> StorageError {
    StorageError::Backend(format!("etcd: {e}"))
}

fn read(path: &PathBuf) -> Result<Vec<u8>, StorageError> {
    std::fs::read(path).map_err(|e| StorageError::Backend(format!("{}: {e}", path.display())))
}

/// The first key after every key that starts with `prefix`.
fn range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

fn revision(r: i64) -> Revision {
    Revision(u64::try_from(r).unwrap_or(0))
}

impl EtcdBackend {
    /// Connect and load every key under the prefix.
    pub async fn connect(config: &EtcdConfig) -> Result<Self, StorageError> {
        if config.endpoints.is_empty() {
            return Err(StorageError::Backend("no etcd endpoint given".into()));
        }
        if !config.prefix.starts_with('/') || !config.prefix.ends_with('/') {
            return Err(StorageError::Backend(format!(
                "etcd prefix {:?} must start and end with '/'",
                config.prefix
            )));
        }
        let identity_pem = match (&config.cert_file, &config.key_file) {
            (Some(c), Some(k)) => Some((read(c)?, read(k)?)),
            (None, None) => None,
            _ => {
                return Err(StorageError::Backend(
                    "an etcd client certificate needs both its certificate and its key".into(),
                ));
            }
        };
        let options = ConnectOptions {
            ca_pem: config.ca_file.as_ref().map(read).transpose()?,
            identity_pem,
            request_timeout: REQUEST_TIMEOUT,
            connect_timeout: Duration::from_secs(5),
            keep_alive: (Duration::from_secs(10), Duration::from_secs(5)),
        };
        let client = EtcdClient::connect(&config.endpoints, &options).map_err(etcd_err)?;
        let backend = Self {
            client,
            prefix: config.prefix.clone(),
            snapshot: Mutex::new(None),
            compaction_interval: config.compaction_interval,
        };
        let snapshot = backend.load_all().await?;
        *backend.snapshot.lock().unwrap_or_else(|p| p.into_inner()) = Some(snapshot);
        Ok(backend)
    }

    /// Every key under the prefix at one revision, page by page.
    async fn load_all(&self) -> Result<Snapshot, StorageError> {
        let end = range_end(self.prefix.as_bytes());
        let mut from = self.prefix.as_bytes().to_vec();
        let mut at: Option<i64> = None;
        let mut items = Vec::new();
        loop {
            let resp = self
                .client
                .range(from.clone(), end.clone(), PAGE, at.unwrap_or(0))
                .await
                .map_err(etcd_err)?;
            // Every page is read at the first page's revision: one consistent snapshot.
            at.get_or_insert(resp.header.as_ref().map_or(0, |h| h.revision));
            for kv in &resp.kvs {
                let key = std::str::from_utf8(&kv.key[self.prefix.len()..])
                    .map_err(|_| StorageError::Backend("etcd: a key that is not UTF-8".into()))?;
                items.push((
                    Key::from_raw(key),
                    revision(kv.mod_revision),
                    Bytes::copy_from_slice(&kv.value),
                ));
            }
            match (resp.more, resp.kvs.last()) {
                (true, Some(last)) => {
                    from = last.key.clone();
                    from.push(0);
                }
                _ => break,
            }
        }
        Ok(Snapshot {
            items,
            revision: revision(at.unwrap_or(0)),
        })
    }

    fn etcd_key(&self, key: &Key) -> String {
        format!("{}{}", self.prefix, key.as_str())
    }
}

/// Deliver every committed write under `prefix` after `from` to `sink`, reopening the
/// watch where it broke. A watch that fell behind a compaction cannot be resumed without
/// losing events: the process exits so that a supervisor restarts it on a fresh load.
async fn watch_loop(client: EtcdClient, prefix: String, mut from: Revision, sink: CommitSink) {
    let end = range_end(prefix.as_bytes());
    loop {
        let start = i64::try_from(from.0 + 1).unwrap_or(i64::MAX);
        let mut stream = match client
            .watch(prefix.as_bytes().to_vec(), end.clone(), start)
            .await
        {
            Ok(s) => Box::pin(s),
            Err(e) => {
                tracing::warn!(error = %e, "etcd watch could not be opened; retrying");
                tokio::time::sleep(REWATCH_PAUSE).await;
                continue;
            }
        };
        loop {
            let resp = match stream.next().await {
                Some(Ok(r)) => r,
                None => break,
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "etcd watch broke; reopening");
                    break;
                }
            };
            if resp.compact_revision > 0 {
                tracing::error!(
                    from = %from,
                    compacted = resp.compact_revision,
                    "the etcd watch fell behind the compaction: restarting to reload"
                );
                eprintln!(
                    "sluice control: etcd history before revision {} was compacted while this replica was behind it; exiting to reload",
                    resp.compact_revision
                );
                std::process::exit(75);
            }
            if resp.canceled {
                tracing::warn!(reason = resp.cancel_reason, "etcd canceled the watch");
                break;
            }
            let mut commits = Vec::with_capacity(resp.events.len());
            for ev in resp.events {
                let Some(kv) = ev.kv else { continue };
                let Ok(key) = std::str::from_utf8(&kv.key[prefix.len().min(kv.key.len())..]) else {
                    continue;
                };
                commits.push(Committed {
                    revision: revision(kv.mod_revision),
                    key: Key::from_raw(key),
                    value: match EventType::try_from(ev.r#type) {
                        Ok(EventType::Delete) => None,
                        _ => Some(Bytes::from(kv.value)),
                    },
                });
            }
            if let Some(last) = commits.last() {
                from = last.revision;
                sink(&commits);
            }
        }
        tokio::time::sleep(REWATCH_PAUSE).await;
    }
}

/// Compact history on a schedule: each run compacts up to the revision the previous run
/// saw, so watchers always have at least one interval of history.
async fn compaction_loop(client: EtcdClient, interval: Duration) {
    let mut previous: Option<i64> = None;
    loop {
        tokio::time::sleep(interval).await;
        let now = match client.range(b"/".to_vec(), Vec::new(), 1, 0).await {
            Ok(r) => r.header.map_or(0, |h| h.revision),
            Err(e) => {
                tracing::warn!(error = %e, "etcd: reading the revision for compaction");
                continue;
            }
        };
        if let Some(to) = previous.filter(|p| *p > 0) {
            match client.compact(to).await {
                Ok(()) => tracing::info!(revision = to, "etcd history compacted"),
                // Another replica compacted first.
                Err(e) if e.compacted() => {}
                Err(e) => tracing::warn!(error = %e, "etcd compaction failed"),
            }
        }
        previous = Some(now);
    }
}

impl Backend for EtcdBackend {
    fn load(&self) -> Result<Snapshot, StorageError> {
        self.snapshot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or_else(|| StorageError::Backend("etcd snapshot already taken".into()))
    }

    fn start(&self, from: Revision, sink: CommitSink) -> Result<(), StorageError> {
        tokio::spawn(watch_loop(
            self.client.clone(),
            self.prefix.clone(),
            from,
            sink,
        ));
        if let Some(interval) = self.compaction_interval {
            tokio::spawn(compaction_loop(self.client.clone(), interval));
        }
        Ok(())
    }

    fn commit(&self, op: Op) -> BoxFuture<'_, Result<Committed, StorageError>> {
        Box::pin(async move {
            let key = op.key().clone();
            let k = self.etcd_key(&key).into_bytes();
            let (then, value) = match &op {
                Op::Put { value, .. } => (
                    etcd_rpc::put(k.clone(), value.to_vec()),
                    Some(value.clone()),
                ),
                Op::Delete { .. } => (etcd_rpc::delete(k.clone()), None),
            };
            let expect = match &op {
                Op::Put { expect, .. } | Op::Delete { expect, .. } => *expect,
            };
            let compare = match expect {
                Expect::Absent => etcd_rpc::absent(k.clone()),
                Expect::At(r) => {
                    etcd_rpc::modified_at(k.clone(), i64::try_from(r.0).unwrap_or(i64::MAX))
                }
            };
            // A request that never reached etcd (its member is down) goes to another.
            let mut tries = 0;
            let resp = loop {
                match self
                    .client
                    .txn(
                        vec![compare.clone()],
                        vec![then.clone()],
                        vec![etcd_rpc::get(k.clone())],
                    )
                    .await
                {
                    Ok(r) => break r,
                    Err(e) if e.never_sent() && tries < CONNECT_RETRIES => tries += 1,
                    Err(e) => return Err(etcd_err(e)),
                }
            };
            if resp.succeeded {
                let rev = resp.header.map_or(0, |h| h.revision);
                return Ok(Committed {
                    revision: revision(rev),
                    key,
                    value,
                });
            }
            let current = resp.responses.into_iter().find_map(|r| match r.response {
                Some(Response::ResponseRange(g)) => Some(g.kvs.first().map(|kv| kv.mod_revision)),
                _ => None,
            });
            Err(match (expect, current.flatten()) {
                (Expect::Absent, _) => StorageError::AlreadyExists(key),
                (Expect::At(_), None) => StorageError::NotFound(key),
                (Expect::At(want), Some(have)) => StorageError::Conflict {
                    key,
                    expected: want,
                    actual: revision(have),
                },
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::range_end;

    #[test]
    fn range_ends_follow_their_prefixes() {
        assert_eq!(range_end(b"/sluice/"), b"/sluice0".to_vec());
        assert_eq!(range_end(b"a\xff"), b"b".to_vec());
        assert_eq!(range_end(b"\xff\xff"), vec![0]);
    }
}
