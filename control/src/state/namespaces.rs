//! Namespaces as the write path reads them, parsed once per stored revision.
//!
//! Every namespaced write reads its namespace: whether it is being terminated, where it is
//! placed, its downstream name, its labels for PodSecurity and webhook selectors. Parsing
//! its stored JSON for each of those cost a create four parses of the same bytes. This memo
//! keeps the parse of the namespaces last written to, keyed by their stored revision, so a
//! namespace that changed is parsed again and nothing stale is ever served.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::Value;
use sluice_api::LogicalClusterPath;

use crate::storage::{Key, ResourcePrefix, Revision, Store};

/// How many parsed namespaces are kept: enough for the namespaces a server writes to at
/// once, bounded so a server of many logical clusters holds no parse per namespace.
const CAPACITY: usize = 256;
/// Larger stored namespaces are parsed on each read, not kept: a tenant who fills its
/// namespaces' annotations cannot make the memo hold CAPACITY of them (a few KiB is usual).
const MAX_KEPT_BYTES: usize = 16 * 1024;

fn namespaces() -> &'static ResourcePrefix {
    static P: OnceLock<ResourcePrefix> = OnceLock::new();
    P.get_or_init(|| ResourcePrefix::new("", "namespaces"))
}

/// The storage key of namespace `namespace` of `cluster`.
fn key(cluster: &LogicalClusterPath, namespace: &str) -> Key {
    namespaces().key(cluster, None, namespace)
}

/// Parsed namespaces by key, each with the revision it was parsed at.
#[derive(Default)]
pub struct ParsedNamespaces {
    parsed: Mutex<HashMap<Key, (Revision, Arc<Value>)>>,
}

impl ParsedNamespaces {
    /// Namespace `namespace` of `cluster` as stored now; `None` when it is not stored (or
    /// its stored bytes are not JSON, which the pipeline never writes).
    pub fn get(
        &self,
        store: &Store,
        cluster: &LogicalClusterPath,
        namespace: &str,
    ) -> Option<Arc<Value>> {
        let key = key(cluster, namespace);
        let entry = store.get(&key)?;
        if let Some((revision, value)) = self.lock().get(&key)
            && *revision == entry.revision
        {
            return Some(value.clone());
        }
        let value = Arc::new(serde_json::from_slice::<Value>(&entry.value).ok()?);
        if entry.value.len() > MAX_KEPT_BYTES {
            return Some(value);
        }
        let mut parsed = self.lock();
        if parsed.len() >= CAPACITY && !parsed.contains_key(&key) {
            // Any one goes: the namespaces written to now are parsed again at once.
            if let Some(old) = parsed.keys().next().cloned() {
                parsed.remove(&old);
            }
        }
        parsed.insert(key, (entry.revision, value.clone()));
        Some(value)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, (Revision, Arc<Value>)>> {
        // A panic while holding the lock cannot leave the map inconsistent: every entry is
        // whole, so a poisoned lock is used as is.
        self.parsed.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{Op, RedbBackend};

    fn cluster() -> LogicalClusterPath {
        "root:team".parse().expect("valid path")
    }

    fn store(dir: &tempfile::TempDir) -> Store {
        Store::open(RedbBackend::open(&dir.path().join("db")).expect("db"), 10).expect("store")
    }

    async fn put(store: &Store, name: &str, labels: Value) {
        let value = serde_json::json!({"metadata": {"name": name, "labels": labels}});
        let key = key(&cluster(), name);
        let expect = match store.get(&key) {
            Some(e) => crate::storage::Expect::At(e.revision),
            None => crate::storage::Expect::Absent,
        };
        store
            .write(Op::Put {
                key,
                value: serde_json::to_vec(&value).expect("json").into(),
                expect,
            })
            .await
            .expect("write");
    }

    #[tokio::test]
    async fn a_namespace_is_parsed_again_once_it_changes() {
        let dir = tempfile::tempdir().expect("dir");
        let store = store(&dir);
        let memo = ParsedNamespaces::default();
        assert!(memo.get(&store, &cluster(), "shop").is_none());
        put(&store, "shop", serde_json::json!({"a": "1"})).await;
        let first = memo.get(&store, &cluster(), "shop").expect("stored");
        assert_eq!(first["metadata"]["labels"]["a"], "1");
        let again = memo.get(&store, &cluster(), "shop").expect("stored");
        assert!(Arc::ptr_eq(&first, &again), "same revision, same parse");
        put(&store, "shop", serde_json::json!({"a": "2"})).await;
        let changed = memo.get(&store, &cluster(), "shop").expect("stored");
        assert_eq!(changed["metadata"]["labels"]["a"], "2");
    }

    #[tokio::test]
    async fn keeps_at_most_its_capacity() {
        let dir = tempfile::tempdir().expect("dir");
        let store = store(&dir);
        let memo = ParsedNamespaces::default();
        for i in 0..CAPACITY + 10 {
            let name = format!("ns-{i}");
            put(&store, &name, Value::Null).await;
            assert!(memo.get(&store, &cluster(), &name).is_some());
        }
        assert_eq!(memo.lock().len(), CAPACITY);
    }

    #[tokio::test]
    async fn a_large_namespace_is_read_but_not_kept() {
        let dir = tempfile::tempdir().expect("dir");
        let store = store(&dir);
        let memo = ParsedNamespaces::default();
        let big = "x".repeat(MAX_KEPT_BYTES);
        put(&store, "big", serde_json::json!({ "big": big })).await;
        let read = memo.get(&store, &cluster(), "big").expect("stored");
        assert_eq!(read["metadata"]["labels"]["big"], big.as_str());
        assert!(memo.lock().is_empty());
    }
}
