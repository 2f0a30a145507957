//! Informers: kube-runtime's watcher feeding a cache, and a callback after every event, so a
//! controller reconciles when something changed and never polls. The watcher
//! retries with backoff and re-lists when its resourceVersion is too old; the callback sees
//! a re-list as `Init`, `InitApply`..., `InitDone`.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, PoisonError, RwLock};

use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, watch};

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

/// Where a cached object lives: its scope (the value of the informer's scope annotation,
/// empty when the informer has none or the object lacks it), namespace (empty when
/// cluster-scoped) and name. A watch across logical clusters sees `shop/web` once per
/// logical cluster; the scope keeps them apart where kube-runtime's reflector (keyed by
/// namespace and name only) would keep one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub scope: String,
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    /// The key of `object` under the scope annotation `scope_by` (if any).
    pub fn of<K: Resource>(object: &K, scope_by: Option<&str>) -> Self {
        let meta = object.meta();
        Self {
            scope: scope_by
                .and_then(|a| meta.annotations.as_ref()?.get(a).cloned())
                .unwrap_or_default(),
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
        }
    }
}

/// Objects by (scope, namespace), then name: one namespace's objects are found without a
/// scan of the rest.
struct Objects<K> {
    by_namespace: HashMap<(String, String), HashMap<String, Arc<K>>>,
    len: usize,
}

impl<K> Default for Objects<K> {
    fn default() -> Self {
        Self {
            by_namespace: HashMap::new(),
            len: 0,
        }
    }
}

impl<K> Objects<K> {
    fn insert(&mut self, key: ObjectKey, object: Arc<K>) {
        let names = self
            .by_namespace
            .entry((key.scope, key.namespace))
            .or_default();
        if names.insert(key.name, object).is_none() {
            self.len += 1;
        }
    }

    fn remove(&mut self, key: ObjectKey) {
        let at = (key.scope, key.namespace);
        if let Some(names) = self.by_namespace.get_mut(&at) {
            if names.remove(&key.name).is_some() {
                self.len -= 1;
            }
            if names.is_empty() {
                self.by_namespace.remove(&at);
            }
        }
    }

    fn get(&self, key: &ObjectKey) -> Option<&Arc<K>> {
        self.by_namespace
            .get(&(key.scope.clone(), key.namespace.clone()))?
            .get(&key.name)
    }
}

/// The cache an informer's watch keeps: what is there, and during a re-list what the new
/// list has brought so far (swapped in whole at its end, so readers never see half a list).
struct Cache<K> {
    objects: Objects<K>,
    relist: Option<Objects<K>>,
}

/// The objects an informer's watch keeps current, shared by whoever reads them (cheap to
/// clone).
pub struct Store<K> {
    cache: Arc<RwLock<Cache<K>>>,
    scope_by: Option<&'static str>,
    synced: watch::Sender<bool>,
}

impl<K> Clone for Store<K> {
    fn clone(&self) -> Self {
        Self {
            cache: self.cache.clone(),
            scope_by: self.scope_by,
            synced: self.synced.clone(),
        }
    }
}

/// The watch feeding a store ended before its first list.
#[derive(Debug, thiserror::Error)]
#[error("the watch stopped before its first list")]
pub struct Stopped;

impl<K> Store<K> {
    /// An empty store whose objects are told apart by annotation `scope_by` (if any) as
    /// well as namespace and name.
    pub fn new(scope_by: Option<&'static str>) -> Self {
        Self {
            cache: Arc::new(RwLock::new(Cache {
                objects: Objects::default(),
                relist: None,
            })),
            scope_by,
            synced: watch::Sender::new(false),
        }
    }
}

impl<K: Resource + Clone> Store<K> {
    /// Follow one watch event, keeping the whole object.
    pub fn apply(&self, event: &watcher::Event<K>) {
        self.apply_viewed(event, K::clone);
    }
}

impl<V> Store<V> {
    /// Follow one watch event of objects `K`, keeping what `view` makes of each (a
    /// controller that reads little of a kind it watches everywhere keeps only that).
    pub fn apply_viewed<K: Resource>(&self, event: &watcher::Event<K>, view: fn(&K) -> V) {
        let mut cache = self.cache.write().unwrap_or_else(PoisonError::into_inner);
        match event {
            watcher::Event::Apply(o) => {
                cache
                    .objects
                    .insert(ObjectKey::of(o, self.scope_by), Arc::new(view(o)));
            }
            watcher::Event::Delete(o) => {
                cache.objects.remove(ObjectKey::of(o, self.scope_by));
            }
            watcher::Event::Init => cache.relist = Some(Objects::default()),
            watcher::Event::InitApply(o) => {
                cache
                    .relist
                    .get_or_insert_default()
                    .insert(ObjectKey::of(o, self.scope_by), Arc::new(view(o)));
            }
            watcher::Event::InitDone => {
                cache.objects = cache.relist.take().unwrap_or_default();
                drop(cache);
                self.synced.send_replace(true);
            }
        }
    }
}

impl<K> Store<K> {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Cache<K>> {
        self.cache.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The object `namespace/name` (`namespace` empty for a cluster-scoped one) of a store
    /// without scopes.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        self.get_in("", namespace, name)
    }

    /// The object `namespace/name` of `scope`.
    pub fn get_in(&self, scope: &str, namespace: &str, name: &str) -> Option<Arc<K>> {
        self.get_key(&ObjectKey {
            scope: scope.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }

    /// The object at `key`.
    pub fn get_key(&self, key: &ObjectKey) -> Option<Arc<K>> {
        self.read().objects.get(key).cloned()
    }

    /// Every object cached now.
    pub fn state(&self) -> Vec<Arc<K>> {
        let cache = self.read();
        let mut all = Vec::with_capacity(cache.objects.len);
        for names in cache.objects.by_namespace.values() {
            all.extend(names.values().cloned());
        }
        all
    }

    /// The objects of `namespace` (empty: cluster-scoped ones) in `scope`.
    pub fn in_namespace(&self, scope: &str, namespace: &str) -> Vec<Arc<K>> {
        self.read()
            .objects
            .by_namespace
            .get(&(scope.to_string(), namespace.to_string()))
            .map(|names| names.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Every (scope, namespace) with objects now.
    pub fn namespaces(&self) -> Vec<(String, String)> {
        self.read().objects.by_namespace.keys().cloned().collect()
    }

    /// How many objects are cached now.
    pub fn len(&self) -> usize {
        self.read().objects.len
    }

    /// Whether nothing is cached now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the first list has arrived.
    pub fn is_ready(&self) -> bool {
        *self.synced.borrow()
    }

    /// Wait for the first list.
    pub async fn wait_until_ready(&self) -> Result<(), Stopped> {
        let mut rx = self.synced.subscribe();
        rx.wait_for(|ready| *ready)
            .await
            .map(|_| ())
            .map_err(|_| Stopped)
    }
}

/// A store kept current by a watch; the watch stops when this is dropped.
pub struct Informer<K: Resource + 'static> {
    pub store: Store<K>,
    task: tokio::task::JoinHandle<()>,
}

impl<K: Resource + 'static> Drop for Informer<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<K> Informer<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default,
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
        Self::spawn(api, config, what, None, None, on_event)
    }
}

impl<K> Informer<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// [`Informer::start_with`] for a kind known only at run time (`DynamicObject` with
    /// its `ApiResource`, which `api` carries).
    pub fn start_typed(
        api: Api<K>,
        config: watcher::Config,
        what: &str,
        on_event: impl Fn(&watcher::Event<K>) + Send + 'static,
    ) -> Self {
        Self::spawn(api, config, what, None, None, on_event)
    }

    /// [`Informer::start_typed`] for a watch across scopes (every logical cluster): objects
    /// are told apart by the value of annotation `scope_by` as well as namespace and name.
    pub fn start_across(
        api: Api<K>,
        config: watcher::Config,
        what: &str,
        scope_by: &'static str,
        on_event: impl Fn(&watcher::Event<K>) + Send + 'static,
    ) -> Self {
        Self::spawn(api, config, what, Some(scope_by), None, on_event)
    }

    /// [`Informer::start_across`] keeping only what `trim` leaves of each object: a
    /// controller that watches everything but reads little of most kinds caches little.
    pub fn start_across_trimmed(
        api: Api<K>,
        config: watcher::Config,
        what: &str,
        scope_by: &'static str,
        trim: fn(&mut K),
        on_event: impl Fn(&watcher::Event<K>) + Send + 'static,
    ) -> Self {
        Self::spawn(api, config, what, Some(scope_by), Some(trim), on_event)
    }

    fn spawn(
        api: Api<K>,
        config: watcher::Config,
        what: &str,
        scope_by: Option<&'static str>,
        trim: Option<fn(&mut K)>,
        on_event: impl Fn(&watcher::Event<K>) + Send + 'static,
    ) -> Self {
        let store = Store::new(scope_by);
        let writer = store.clone();
        let what = what.to_string();
        let task = tokio::spawn(async move {
            let mut events = Box::pin(watch(api, config));
            while let Some(event) = events.next().await {
                match event {
                    Ok(mut e) => {
                        if let Some(trim) = trim {
                            match &mut e {
                                watcher::Event::Apply(o)
                                | watcher::Event::Delete(o)
                                | watcher::Event::InitApply(o) => trim(o),
                                watcher::Event::Init | watcher::Event::InitDone => {}
                            }
                        }
                        writer.apply(&e);
                        on_event(&e);
                    }
                    Err(e) => tracing::warn!(kind = %what, error = %e, "watch failed; retrying"),
                }
            }
        });
        Self { store, task }
    }
}

/// Reading, through the store.
impl<K: Resource + 'static> Informer<K> {
    /// The object `namespace/name` (`namespace` empty for a cluster-scoped one) of an
    /// informer without scopes.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        self.store.get(namespace, name)
    }

    /// The object `namespace/name` of `scope`.
    pub fn get_in(&self, scope: &str, namespace: &str, name: &str) -> Option<Arc<K>> {
        self.store.get_in(scope, namespace, name)
    }

    /// Whether the first list has arrived.
    pub fn is_ready(&self) -> bool {
        self.store.is_ready()
    }

    /// Every object cached now.
    pub fn state(&self) -> Vec<Arc<K>> {
        self.store.state()
    }
}

/// A store of views `V` of the objects `K` a watch across scopes keeps current: what a
/// controller reads of a kind, made once per event, instead of the whole object. The watch
/// stops when this is dropped.
pub struct Views<V> {
    pub store: Store<V>,
    task: tokio::task::JoinHandle<()>,
}

impl<V> Drop for Views<V> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<V: Send + Sync + 'static> Views<V> {
    /// Watch `api` across scopes (told apart by annotation `scope_by`), keeping `view` of
    /// each object and calling `on_event` after each event reached the store.
    pub fn start_across<K>(
        api: Api<K>,
        config: watcher::Config,
        what: &str,
        scope_by: &'static str,
        view: fn(&K) -> V,
        on_event: impl Fn(&watcher::Event<K>) + Send + 'static,
    ) -> Self
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let store = Store::new(Some(scope_by));
        let writer = store.clone();
        let what = what.to_string();
        let task = tokio::spawn(async move {
            let mut events = Box::pin(watch(api, config));
            while let Some(event) = events.next().await {
                match event {
                    Ok(e) => {
                        writer.apply_viewed(&e, view);
                        on_event(&e);
                    }
                    Err(e) => tracing::warn!(kind = %what, error = %e, "watch failed; retrying"),
                }
            }
        });
        Self { store, task }
    }

    /// The view of `namespace/name` of `scope`.
    pub fn get_in(&self, scope: &str, namespace: &str, name: &str) -> Option<Arc<V>> {
        self.store.get_in(scope, namespace, name)
    }

    /// Every view kept now.
    pub fn state(&self) -> Vec<Arc<V>> {
        self.store.state()
    }
}

#[cfg(test)]
mod tests;
