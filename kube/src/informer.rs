//! Informers: kube-runtime's watcher feeding a reflector store, and a callback after every
//! event, so a controller reconciles when something changed and never polls. The watcher
//! retries with backoff and re-lists when its resourceVersion is too old; the callback sees
//! a re-list as `Init`, `InitApply`..., `InitDone`.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;

/// The watch every informer runs: kube-runtime's watcher with its default backoff, and
/// managedFields dropped on the way in (no controller here reads them, and they are most of
/// an object's size: memory, and the cost of every clone). For a consumer that folds events
/// into a model of its own instead of a reflector store.
pub fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl futures::Stream<Item = watcher::Result<watcher::Event<K>>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    watcher(api, config)
        .default_backoff()
        .modify(|o: &mut K| o.meta_mut().managed_fields = None)
}

/// A store kept current by a watch; the watch stops when this is dropped.
pub struct Informer<K: Resource + 'static>
where
    K::DynamicType: Hash + Eq + Clone,
{
    pub store: Store<K>,
    synced: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl<K: Resource + 'static> Drop for Informer<K>
where
    K::DynamicType: Hash + Eq + Clone,
{
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<K> Informer<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Hash + Eq + Clone,
{
    /// Watch `api` (filtered by `config`), raising `changed` after every event.
    pub fn start(api: Api<K>, config: watcher::Config, changed: Arc<Notify>, what: &str) -> Self {
        Self::start_with(api, config, what, move |_| changed.notify_one())
    }

    /// Watch `api`, calling `on_event` after each event reached the store: a controller
    /// that reconciles only what changed reads the object's key here. A re-list ends with
    /// `InitDone`; objects deleted while the watch was down get no `Delete` of their own.
    pub fn start_with(
        api: Api<K>,
        config: watcher::Config,
        what: &str,
        on_event: impl Fn(&watcher::Event<K>) + Send + 'static,
    ) -> Self {
        Self::start_typed(api, K::DynamicType::default(), config, what, on_event)
    }
}

impl<K> Informer<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Hash + Eq + Clone,
{
    /// [`Informer::start_with`] for a kind known only at run time (`DynamicObject` with
    /// its `ApiResource`).
    pub fn start_typed(
        api: Api<K>,
        dyntype: K::DynamicType,
        config: watcher::Config,
        what: &str,
        on_event: impl Fn(&watcher::Event<K>) + Send + 'static,
    ) -> Self {
        let writer = reflector::store::Writer::new(dyntype);
        let store = writer.as_reader();
        let what = what.to_string();
        let synced = Arc::new(AtomicBool::new(false));
        let flag = synced.clone();
        let task = tokio::spawn(async move {
            let mut events = Box::pin(reflector::reflector(writer, watch(api, config)));
            while let Some(event) = events.next().await {
                match event {
                    Ok(e) => {
                        if matches!(e, watcher::Event::InitDone) {
                            flag.store(true, Ordering::Release);
                        }
                        on_event(&e);
                    }
                    Err(e) => tracing::warn!(kind = %what, error = %e, "watch failed; retrying"),
                }
            }
        });
        Self {
            store,
            synced,
            task,
        }
    }
}

/// Reading: fewer bounds than watching, so code generic over stores can read.
impl<K> Informer<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Hash + Eq + Clone,
{
    /// The object `namespace/name` (`namespace` empty for a cluster-scoped one).
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        let r = ObjectRef::new(name);
        self.store.get(&if namespace.is_empty() {
            r
        } else {
            r.within(namespace)
        })
    }
}

/// Reading what needs no key: any kind, dynamic ones included.
impl<K> Informer<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Hash + Eq + Clone,
{
    /// Whether the first list has arrived.
    pub fn is_ready(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    pub fn state(&self) -> Vec<Arc<K>> {
        self.store.state()
    }
}

#[cfg(test)]
mod tests;
