//! An index of an informer's objects by a key other than their name, kept by the
//! informer's events: e.g. EndpointSlices found by the Service they belong to (a label), so
//! a round that covers a few services does not scan every slice of the cluster to find
//! theirs.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use kube::Resource;
use kube::runtime::watcher::Event;

use crate::changes::Changes;
use crate::informer::{Informer, ObjectKey, Store};

struct State<Key> {
    by_key: HashMap<Key, HashSet<ObjectKey>>,
    of: HashMap<ObjectKey, Key>,
    /// Entries of a re-list in progress; they replace everything at its end.
    relist: Option<Vec<(ObjectKey, Key)>>,
}

/// Objects of kind `K` by the `Key` that `key_of` reads from each.
pub struct Index<K, Key> {
    key_of: fn(&K) -> Option<Key>,
    state: Mutex<State<Key>>,
}

impl<K, Key> Index<K, Key>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default,
    Key: Clone + Eq + Hash + Ord + Send + Sync + 'static,
{
    pub fn new(key_of: fn(&K) -> Option<Key>) -> Arc<Self> {
        Arc::new(Self {
            key_of,
            state: Mutex::new(State {
                by_key: HashMap::new(),
                of: HashMap::new(),
                relist: None,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<Key>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Follow one watch event (call after the store applied it).
    pub fn record(&self, event: &Event<K>) {
        let mut state = self.lock();
        match event {
            Event::Apply(o) => {
                let r = ObjectKey::of(o, None);
                state.remove(&r);
                if let Some(key) = (self.key_of)(o) {
                    state.insert(r, key);
                }
            }
            Event::Delete(o) => state.remove(&ObjectKey::of(o, None)),
            Event::Init => state.relist = Some(Vec::new()),
            Event::InitApply(o) => {
                if let Some(key) = (self.key_of)(o) {
                    let r = ObjectKey::of(o, None);
                    state.relist.get_or_insert_with(Vec::new).push((r, key));
                }
            }
            Event::InitDone => {
                let entries = state.relist.take().unwrap_or_default();
                state.by_key.clear();
                state.of.clear();
                for (r, key) in entries {
                    state.insert(r, key);
                }
            }
        }
    }

    /// An informer over `api` that keeps a new index of its objects and records the keys
    /// they belong to in `changes`.
    pub fn start(
        api: kube::Api<K>,
        what: &str,
        key_of: fn(&K) -> Option<Key>,
        changes: &Arc<Changes<Key>>,
    ) -> (Informer<K>, Arc<Self>)
    where
        K: serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync,
    {
        let index = Self::new(key_of);
        let (idx, record) = (index.clone(), changes.recorder(key_of));
        let informer = Informer::start_with(
            api,
            kube::runtime::watcher::Config::default(),
            what,
            move |e| {
                idx.record(e);
                record(e);
            },
        );
        (informer, index)
    }

    /// The objects of `key` in `store`.
    pub fn objects(&self, store: &Store<K>, key: &Key) -> Vec<Arc<K>> {
        let state = self.lock();
        state
            .by_key
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|r| store.get_key(r))
            .collect()
    }
}

impl<Key: Clone + Eq + Hash> State<Key> {
    fn insert(&mut self, r: ObjectKey, key: Key) {
        self.by_key
            .entry(key.clone())
            .or_default()
            .insert(r.clone());
        self.of.insert(r, key);
    }

    fn remove(&mut self, r: &ObjectKey) {
        if let Some(key) = self.of.remove(r)
            && let Some(refs) = self.by_key.get_mut(&key)
        {
            refs.remove(r);
            if refs.is_empty() {
                self.by_key.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use k8s_openapi::api::discovery::v1::EndpointSlice;

    fn slice(name: &str, svc: &str) -> EndpointSlice {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "shop",
                         "labels": {"kubernetes.io/service-name": svc}},
            "addressType": "IPv4", "endpoints": [],
        }))
        .unwrap()
    }

    fn service_of(s: &EndpointSlice) -> Option<(String, String)> {
        let svc = crate::meta::label(&s.metadata, "kubernetes.io/service-name")?;
        Some((s.metadata.namespace.clone()?, svc.to_string()))
    }

    fn names(v: Vec<Arc<EndpointSlice>>) -> Vec<String> {
        let mut n: Vec<String> = v.iter().filter_map(|s| s.metadata.name.clone()).collect();
        n.sort();
        n
    }

    #[test]
    fn follows_applies_deletes_relabels_and_relists() {
        let store: Store<EndpointSlice> = Store::new(None);
        let index = Index::new(service_of);
        let feed = |e: Event<EndpointSlice>| {
            store.apply(&e);
            index.record(&e);
        };
        let echo = ("shop".to_string(), "echo".to_string());
        let db = ("shop".to_string(), "db".to_string());
        feed(Event::Init);
        feed(Event::InitApply(slice("echo-1", "echo")));
        feed(Event::InitDone);
        feed(Event::Apply(slice("echo-2", "echo")));
        assert_eq!(names(index.objects(&store, &echo)), ["echo-1", "echo-2"]);
        // Relabelled to another service.
        feed(Event::Apply(slice("echo-2", "db")));
        assert_eq!(names(index.objects(&store, &echo)), ["echo-1"]);
        assert_eq!(names(index.objects(&store, &db)), ["echo-2"]);
        feed(Event::Delete(slice("echo-1", "echo")));
        assert!(index.objects(&store, &echo).is_empty());
        // A re-list replaces everything (echo-2 went while the watch was down).
        feed(Event::Init);
        feed(Event::InitApply(slice("echo-3", "echo")));
        assert_eq!(
            names(index.objects(&store, &db)),
            ["echo-2"],
            "until the re-list ends"
        );
        feed(Event::InitDone);
        assert!(index.objects(&store, &db).is_empty());
        assert_eq!(names(index.objects(&store, &echo)), ["echo-3"]);
    }
}
