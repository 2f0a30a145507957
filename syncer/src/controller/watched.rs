//! What the syncer watches, on both sides: per kind that travels an informer upstream
//! (objects with the cluster's state label, read through `/clusters/*`) and one downstream
//! (objects labelled `sluice.dev/synced=true`); the syncable custom resource definitions;
//! the synced namespaces and every logical cluster's namespaces; the cluster's MCS
//! EndpointSlices; its pods and claims and their mirrors; its Events. Each event touches the key of
//! the downstream namespace it concerns (learnt through [`Sources`]), and the end of a
//! re-list touches [`Key::Resync`].

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, Namespace, PersistentVolumeClaim, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::watcher;
use sluice_api::LOGICAL_CLUSTER_ANNOTATION;
use sluice_api::sync::{LABEL_CLUSTER, LABEL_SYNCED, placed_clusters, state_label};
use sluice_api::synced_kinds::{BUILTIN, SYNCABLE_LABEL, SyncedKind};
use sluice_kube::{Informer, Queue};

use super::key::Key;
use super::state::{Config, Upstream};
use crate::sources::Sources;

/// A kind that travels: its informers on both sides.
pub struct KindSync {
    pub kind: &'static SyncedKind,
    pub resource: ApiResource,
    pub up: Informer<DynamicObject>,
    pub down: Informer<DynamicObject>,
    started: Instant,
}

/// A kind the cluster has not listed for this long is taken as one it does not serve: its
/// objects are applied anyway (once), so the cluster's refusal is reported upstream.
pub const UNSERVED_AFTER: Duration = Duration::from_secs(10);

impl KindSync {
    /// Whether the downstream view of this kind can be acted on: listed, or given up on.
    pub fn down_known(&self) -> bool {
        self.down.is_ready() || self.started.elapsed() > UNSERVED_AFTER
    }
}

/// The API resource of a kind that travels.
pub fn resource(k: &SyncedKind) -> ApiResource {
    ApiResource {
        group: k.group.into(),
        version: k.version.into(),
        api_version: k.api_version(),
        kind: k.kind.into(),
        plural: k.plural.into(),
    }
}

/// The resource of CustomResourceDefinitions.
pub fn crd_resource() -> ApiResource {
    ApiResource::erase::<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    >(&())
}

/// Every informer of the syncer.
pub struct Watched {
    pub kinds: Vec<KindSync>,
    /// Syncable custom resource definitions in any logical cluster.
    pub crds: Informer<DynamicObject>,
    /// The synced namespaces of the cluster.
    pub namespaces: Informer<Namespace>,
    /// Every namespace of every logical cluster: each one placed anywhere gets a namespace
    /// here too, holding at least the imports of its Services.
    pub logical_namespaces: Informer<Namespace>,
    /// The MCS controller's EndpointSlices here: what this cluster imports.
    pub imports: Informer<EndpointSlice>,
    /// The pods of the cluster.
    pub pods: Informer<Pod>,
    /// Their mirrors in the logical clusters.
    pub mirrors: Informer<Pod>,
    /// The cluster's claims (those it made itself are mirrored).
    pub claims: Informer<PersistentVolumeClaim>,
    /// Their mirrors in the logical clusters.
    pub claim_mirrors: Informer<PersistentVolumeClaim>,
    /// The cluster's Events.
    pub events: Informer<Event>,
    starter: Starter,
}

/// What starting a kind's informers takes (custom kinds join while the syncer runs).
struct Starter {
    wildcard: kube::Client,
    downstream: kube::Client,
    placed: String,
    queue: Arc<Queue<Key>>,
    sources: Sources,
}

impl Starter {
    fn start(&self, kind: &'static SyncedKind) -> KindSync {
        let resource = resource(kind);
        let selector = match kind.upstream_selector() {
            Some(s) => format!("{},{s}", self.placed),
            None => self.placed.clone(),
        };
        let src = self.sources.clone();
        let up = Informer::start_across(
            Api::all_with(self.wildcard.clone(), &resource),
            watcher::Config::default().labels(&selector),
            kind.plural,
            LOGICAL_CLUSTER_ANNOTATION,
            touching(&self.queue, move |o: &DynamicObject| src.learn(&o.metadata)),
        );
        let down = Informer::start_typed(
            Api::all_with(self.downstream.clone(), &resource),
            watcher::Config::default().labels(&synced()),
            kind.plural,
            touching(&self.queue, |o: &DynamicObject| {
                o.metadata.namespace.clone()
            }),
        );
        KindSync {
            kind,
            resource,
            up,
            down,
            started: Instant::now(),
        }
    }
}

fn synced() -> String {
    format!("{LABEL_SYNCED}=true")
}

/// An informer callback touching the namespace key `key_of` gives each applied or deleted
/// object, and [`Key::Resync`] at the end of a re-list.
fn touching<O: 'static>(
    queue: &Arc<Queue<Key>>,
    key_of: impl Fn(&O) -> Option<String> + Send + 'static,
) -> impl Fn(&watcher::Event<O>) + Send + 'static {
    let queue = queue.clone();
    move |e| match e {
        watcher::Event::Apply(o) | watcher::Event::Delete(o) => {
            if let Some(ns) = key_of(o) {
                queue.touch(Key::Namespace(ns));
            }
        }
        watcher::Event::InitDone => queue.touch(Key::Resync),
        watcher::Event::Init | watcher::Event::InitApply(_) => {}
    }
}

impl Watched {
    /// Start every informer; events touch keys of `queue`.
    pub fn start(
        config: &Config,
        upstream: &Upstream,
        sources: &Sources,
        queue: &Arc<Queue<Key>>,
    ) -> Self {
        let starter = Starter {
            wildcard: upstream.wildcard.clone(),
            downstream: config.downstream.clone(),
            placed: state_label(&config.cluster),
            queue: queue.clone(),
            sources: sources.clone(),
        };
        let kinds = BUILTIN.iter().map(|k| starter.start(k)).collect();
        let crds = {
            let queue = queue.clone();
            Informer::<DynamicObject>::start_across(
                Api::all_with(upstream.wildcard.clone(), &crd_resource()),
                watcher::Config::default().labels(&format!("{SYNCABLE_LABEL}=true")),
                "syncable custom resource definitions",
                LOGICAL_CLUSTER_ANNOTATION,
                move |e| match e {
                    watcher::Event::Init | watcher::Event::InitApply(_) => {}
                    // Listed: what it holds is known, and so may be the readiness of all.
                    watcher::Event::InitDone => {
                        queue.touch(Key::Definitions);
                        queue.touch(Key::Resync);
                    }
                    watcher::Event::Apply(_) | watcher::Event::Delete(_) => {
                        queue.touch(Key::Definitions)
                    }
                },
            )
        };
        let src = sources.clone();
        let namespaces = Informer::<Namespace>::start_with(
            Api::all(config.downstream.clone()),
            watcher::Config::default().labels(&synced()),
            "namespaces",
            touching(queue, move |n: &Namespace| {
                src.learn_downstream(&n.metadata)
            }),
        );
        let src = sources.clone();
        let logical_namespaces = Informer::<Namespace>::start_across(
            Api::all(upstream.wildcard.clone()),
            watcher::Config::default(),
            "logical cluster namespaces",
            LOGICAL_CLUSTER_ANNOTATION,
            touching(queue, move |n: &Namespace| src.learn_namespace(&n.metadata)),
        );
        let imports = Informer::<EndpointSlice>::start_with(
            Api::all(config.downstream.clone()),
            watcher::Config::default().labels(&format!(
                "{}={}",
                sluice_api::mcs::LABEL_MANAGED_BY,
                sluice_api::mcs::MANAGED_BY
            )),
            "imported endpoint slices",
            touching(queue, |s: &EndpointSlice| s.metadata.namespace.clone()),
        );
        let pods = Informer::start_with(
            Api::all(config.downstream.clone()),
            watcher::Config::default(),
            "pods",
            touching(queue, |p: &Pod| p.metadata.namespace.clone()),
        );
        let src = sources.clone();
        let mirrors = Informer::start_across(
            Api::all(upstream.wildcard.clone()),
            watcher::Config::default().labels(&format!("{LABEL_CLUSTER}={}", config.cluster)),
            "mirrored pods",
            LOGICAL_CLUSTER_ANNOTATION,
            touching(queue, move |p: &Pod| src.learn(&p.metadata)),
        );
        let claims = Informer::start_with(
            Api::all(config.downstream.clone()),
            watcher::Config::default(),
            "persistentvolumeclaims",
            touching(queue, |c: &PersistentVolumeClaim| {
                c.metadata.namespace.clone()
            }),
        );
        let src = sources.clone();
        let claim_mirrors = Informer::start_across(
            Api::all(upstream.wildcard.clone()),
            watcher::Config::default().labels(&format!("{LABEL_CLUSTER}={}", config.cluster)),
            "mirrored persistentvolumeclaims",
            LOGICAL_CLUSTER_ANNOTATION,
            touching(queue, move |c: &PersistentVolumeClaim| {
                src.learn(&c.metadata)
            }),
        );
        let events = Informer::start_with(
            Api::all(config.downstream.clone()),
            watcher::Config::default(),
            "events",
            touching(queue, |ev: &Event| ev.metadata.namespace.clone()),
        );
        Self {
            kinds,
            crds,
            namespaces,
            logical_namespaces,
            imports,
            pods,
            mirrors,
            claims,
            claim_mirrors,
            events,
            starter,
        }
    }

    /// Watch `kind` too, unless it is watched already; true if it is new.
    pub fn add_kind(&mut self, kind: &'static SyncedKind) -> bool {
        if self.kinds.iter().any(|k| std::ptr::eq(k.kind, kind)) {
            return false;
        }
        self.kinds.push(self.starter.start(kind));
        true
    }

    /// Every informer has listed.
    pub fn all_listed(&self) -> bool {
        self.kinds
            .iter()
            .all(|k| k.up.is_ready() && k.down.is_ready())
            && self.crds.is_ready()
            && self.namespaces.is_ready()
            && self.logical_namespaces.is_ready()
            && self.imports.is_ready()
            && self.pods.is_ready()
            && self.mirrors.is_ready()
            && self.claims.is_ready()
            && self.claim_mirrors.is_ready()
            && self.events.is_ready()
    }

    /// How many kinds can be acted on downstream.
    pub fn kinds_known(&self) -> usize {
        self.kinds.iter().filter(|k| k.down_known()).count()
    }

    /// Every downstream namespace there is anything to do for. Listed objects come
    /// without events of their own: the namespace map learns from the caches first
    /// (namespaces, which name the downstream namespaces, before the objects in them).
    pub fn every_namespace(&self, sources: &Sources) -> BTreeSet<String> {
        for n in self.logical_namespaces.state() {
            if placed_anywhere(&n) {
                sources.learn_namespace(&n.metadata);
            }
        }
        let upstream = self
            .kinds
            .iter()
            .flat_map(|k| k.up.store.namespaces())
            .chain(self.mirrors.store.namespaces())
            .chain(self.claim_mirrors.store.namespaces());
        for (scope, ns) in upstream {
            if let Ok(path) = scope.parse() {
                sources.learn_listed((path, ns));
            }
        }
        let mut all: BTreeSet<String> = sources.downstream().into_iter().collect();
        for k in &self.kinds {
            all.extend(k.down.store.namespaces().into_iter().map(|(_, ns)| ns));
        }
        all.extend(
            self.namespaces
                .state()
                .iter()
                .filter_map(|n| n.metadata.name.clone()),
        );
        all.extend(self.pods.store.namespaces().into_iter().map(|(_, ns)| ns));
        all
    }

    /// The number of upstream objects placed on this cluster.
    pub fn placed(&self) -> usize {
        self.kinds.iter().map(|k| k.up.store.len()).sum()
    }
}

/// Whether an upstream namespace is placed on some cluster and not being deleted.
pub fn placed_anywhere(ns: &Namespace) -> bool {
    ns.metadata.deletion_timestamp.is_none()
        && !placed_clusters(ns.metadata.labels.iter().flatten()).is_empty()
}
