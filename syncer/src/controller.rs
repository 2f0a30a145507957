//! The sync loop: informers on both sides for every kind that travels, and after events a
//! round over the downstream namespaces they touched that makes downstream what upstream
//! says — apply what is missing or drifted, delete what is no longer placed, and
//! namespaces left with nothing placed — writing nothing when both agree.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Namespace, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::Value;
use sluice_api::liveness::{
    SYNCER_LEASE_NAMESPACE, SYNCER_LEASE_TTL, SYNCER_RENEW_EVERY, syncer_lease_name,
};
use sluice_api::sync::{
    ANNOTATION_UPSTREAM_GENERATION, FIELD_MANAGER, LABEL_CLUSTER, LABEL_SYNCED, StatusReport,
    finalizers_patch, imports_annotation, placed_clusters, state_label, status_annotation,
    sync_finalizer,
};
use sluice_api::{ClusterName, LOGICAL_CLUSTER_ANNOTATION, LogicalClusterPath};
use sluice_kube::lease::{LeaseHolder, renew_forever};
use sluice_kube::{Changes, Informer, Roots, Scope};
use tokio::sync::watch;
use tracing::Instrument;

use crate::drift::contained;
use crate::metrics::SyncMetrics;
use crate::sources::Sources;
use crate::transform::{Origin, downstream, namespace_object};
use sluice_api::sync::share_on;
use sluice_api::synced_kinds::{BUILTIN, SYNCABLE_LABEL, SyncedKind, syncable_kind};

/// After a failed write, the pass runs again this much later.
const RETRY: Duration = Duration::from_secs(1);
/// A round over everything runs this often, to repair what no event reported (the caches
/// are kept by watches: nothing is re-listed).
const RESYNC: Duration = Duration::from_secs(600);

/// What a syncer syncs: from the control plane (its configuration, with any URL of the
/// server: the syncer reads through `/clusters/*` and reports status to each logical
/// cluster) to one physical cluster.
pub struct Config {
    pub upstream: kube::Config,
    pub downstream: kube::Client,
    pub cluster: ClusterName,
    /// The URL of this syncer's log endpoint ([`crate::logs`]), published on its heartbeat
    /// Lease; `None`: `kubectl logs` upstream cannot reach this cluster's pods.
    pub logs_url: Option<String>,
}

/// Why the syncer stopped before it was told to.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("the stop signal's sender is gone")]
    Orphaned,
    #[error("the control plane's client: {0}")]
    Client(#[from] sluice_kube::ClientError),
}

/// Put the log endpoint's URL on the heartbeat Lease (retrying until it is there).
async fn publish_logs_url(
    leases: Api<k8s_openapi::api::coordination::v1::Lease>,
    name: String,
    url: String,
) {
    let body = serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "annotations": {crate::logs::ANNOTATION_LOGS_URL: url}},
    });
    loop {
        match leases
            .patch(&name, &apply_params(), &Patch::Apply(&body))
            .await
        {
            Ok(_) => return,
            Err(e) => tracing::warn!(error = %e, "publishing the log endpoint failed; retrying"),
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// A task that ends with its owner.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The control plane: every logical cluster through the wildcard, and each one to write to.
struct Upstream {
    roots: Roots,
    wildcard: kube::Client,
}

impl Upstream {
    fn new(config: kube::Config) -> Result<Self, SyncError> {
        let roots = Roots::new(config, "/clusters/");
        let wildcard = roots.at("/clusters/*")?;
        Ok(Self { roots, wildcard })
    }

    fn at(&self, path: &LogicalClusterPath) -> Result<kube::Client, SyncError> {
        Ok(self.roots.at(&format!("/clusters/{path}"))?)
    }
}

struct KindSync {
    kind: &'static SyncedKind,
    resource: ApiResource,
    up: Informer<DynamicObject>,
    down: Informer<DynamicObject>,
    started: std::time::Instant,
}

/// A kind the cluster has not listed for this long is taken as one it does not serve: its
/// objects are applied anyway (once), so the cluster's refusal is reported upstream.
const UNSERVED_AFTER: Duration = Duration::from_secs(10);

impl KindSync {
    /// Whether the downstream view of this kind can be acted on: listed, or given up on.
    fn down_known(&self) -> bool {
        self.down.is_ready() || self.started.elapsed() > UNSERVED_AFTER
    }
}

fn resource(k: &SyncedKind) -> ApiResource {
    ApiResource {
        group: k.group.into(),
        version: k.version.into(),
        api_version: k.api_version(),
        kind: k.kind.into(),
        plural: k.plural.into(),
    }
}

/// A syncer's state apart from its loop: metrics and readiness, for the admin endpoint.
pub struct Syncer {
    metrics: SyncMetrics,
    registry: prometheus_client::registry::Registry,
    /// Every informer listed and one pass completed.
    ready: AtomicBool,
    /// Objects the cluster refused, with what it said (reported once per message).
    refusals: std::sync::Mutex<BTreeMap<Refusal, String>>,
    /// Which upstream namespace each downstream namespace holds.
    sources: Sources,
}

/// A refused object: kind, downstream namespace, name.
type Refusal = (&'static str, String, String);

impl sluice_observe::AdminSource for Syncer {
    fn registry(&self) -> &prometheus_client::registry::Registry {
        &self.registry
    }

    fn ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
}

impl Syncer {
    pub fn new() -> Arc<Self> {
        let metrics = SyncMetrics::default();
        let mut registry = prometheus_client::registry::Registry::with_prefix("sluice_syncer");
        metrics.register(&mut registry);
        let sources = Sources::new(metrics.namespace_conflicts.clone());
        Arc::new(Self {
            sources,
            metrics,
            registry,
            ready: AtomicBool::new(false),
            refusals: Default::default(),
        })
    }

    fn refusals(&self) -> std::sync::MutexGuard<'_, BTreeMap<Refusal, String>> {
        self.refusals.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run until `stop` turns true.
    pub async fn run(
        self: Arc<Self>,
        config: Config,
        stop: watch::Receiver<bool>,
    ) -> Result<(), SyncError> {
        run_loop(&self, config, stop).await
    }
}

/// Run a syncer without an admin endpoint until `stop` turns true.
pub async fn run(config: Config, stop: watch::Receiver<bool>) -> Result<(), SyncError> {
    Syncer::new().run(config, stop).await
}

async fn run_loop(
    syncer: &Syncer,
    config: Config,
    mut stop: watch::Receiver<bool>,
) -> Result<(), SyncError> {
    let upstream = Upstream::new(config.upstream.clone())?;
    // The heartbeat by which the control plane knows this cluster is served.
    let _heartbeat = {
        let leases = Api::namespaced(
            upstream.at(&LogicalClusterPath::root())?,
            SYNCER_LEASE_NAMESPACE,
        );
        let holder = LeaseHolder {
            name: syncer_lease_name(&config.cluster),
            holder: format!("sluice-syncer-{}", config.cluster),
            ttl: SYNCER_LEASE_TTL,
            renew_every: SYNCER_RENEW_EVERY,
        };
        AbortOnDrop(tokio::spawn(renew_forever(
            leases,
            SYNCER_LEASE_NAMESPACE.to_string(),
            holder,
        )))
    };
    let _published = config
        .logs_url
        .clone()
        .map(|url| {
            let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(
                upstream.at(&LogicalClusterPath::root())?,
                SYNCER_LEASE_NAMESPACE,
            );
            let name = syncer_lease_name(&config.cluster);
            Ok::<_, SyncError>(AbortOnDrop(tokio::spawn(publish_logs_url(
                leases, name, url,
            ))))
        })
        .transpose()?;
    // What changed, by downstream namespace: a round covers those namespaces only (all of
    // them after a re-list), so its cost follows the change, not the cluster.
    let changes: Arc<Changes<String>> = Arc::default();
    let sources = syncer.sources.clone();
    let placed = state_label(&config.cluster);
    let synced = format!("{LABEL_SYNCED}=true");
    let start_kind = |kind: &'static SyncedKind| {
        let resource = resource(kind);
        let (c, src) = (changes.clone(), sources.clone());
        let selector = match kind.upstream_selector() {
            Some(s) => format!("{placed},{s}"),
            None => placed.clone(),
        };
        let up = Informer::start_across(
            Api::all_with(upstream.wildcard.clone(), &resource),
            watcher::Config::default().labels(&selector),
            kind.plural,
            LOGICAL_CLUSTER_ANNOTATION,
            move |e| c.record(e, |o: &DynamicObject| src.learn(&o.metadata)),
        );
        let c = changes.clone();
        let down = Informer::start_typed(
            Api::all_with(config.downstream.clone(), &resource),
            watcher::Config::default().labels(&synced),
            kind.plural,
            move |e| c.record(e, |o: &DynamicObject| o.metadata.namespace.clone()),
        );
        KindSync {
            kind,
            resource,
            up,
            down,
            started: std::time::Instant::now(),
        }
    };
    let mut kinds: Vec<KindSync> = BUILTIN.iter().map(start_kind).collect();
    // Custom resource definitions marked syncable in any logical cluster: their kinds join,
    // and the cluster gets each definition as it is now (applied again when it changes).
    let crds_changed = Arc::new(AtomicBool::new(true));
    let crds = {
        let (c, changed) = (changes.clone(), crds_changed.clone());
        Informer::<DynamicObject>::start_across(
            Api::all_with(upstream.wildcard.clone(), &crd_resource()),
            watcher::Config::default().labels(&format!("{SYNCABLE_LABEL}=true")),
            "syncable custom resource definitions",
            LOGICAL_CLUSTER_ANNOTATION,
            move |_| {
                changed.store(true, Ordering::Release);
                c.wake();
            },
        )
    };
    // The resourceVersion of each definition last applied to the cluster, by logical cluster
    // and name.
    let mut installed: HashMap<(String, String), String> = HashMap::new();
    let namespaces = {
        let (c, src) = (changes.clone(), sources.clone());
        Informer::<Namespace>::start_with(
            Api::all(config.downstream.clone()),
            watcher::Config::default().labels(&synced),
            "namespaces",
            move |e| c.record(e, |n: &Namespace| src.learn_downstream(&n.metadata)),
        )
    };
    // Every namespace of every logical cluster: each one placed anywhere gets a namespace
    // here too, holding at least the imports of its Services.
    let logical_namespaces = {
        let (c, src) = (changes.clone(), sources.clone());
        Informer::<Namespace>::start_across(
            Api::all(upstream.wildcard.clone()),
            watcher::Config::default(),
            "logical cluster namespaces",
            LOGICAL_CLUSTER_ANNOTATION,
            move |e| c.record(e, |n: &Namespace| src.learn_namespace(&n.metadata)),
        )
    };
    // The MCS controller's EndpointSlices here: what this cluster imports.
    let imports = {
        let c = changes.clone();
        Informer::<EndpointSlice>::start_with(
            Api::all(config.downstream.clone()),
            watcher::Config::default().labels(&format!(
                "{}={}",
                sluice_api::mcs::LABEL_MANAGED_BY,
                sluice_api::mcs::MANAGED_BY
            )),
            "imported endpoint slices",
            move |e| c.record(e, |s: &EndpointSlice| s.metadata.namespace.clone()),
        )
    };
    let mirrors = Mirrors {
        down: {
            let c = changes.clone();
            Informer::start_with(
                Api::all(config.downstream.clone()),
                watcher::Config::default(),
                "pods",
                move |e| c.record(e, |p: &Pod| p.metadata.namespace.clone()),
            )
        },
        up: {
            let (c, src) = (changes.clone(), sources.clone());
            Informer::start_across(
                Api::all(upstream.wildcard.clone()),
                watcher::Config::default().labels(&format!("{LABEL_CLUSTER}={}", config.cluster)),
                "mirrored pods",
                LOGICAL_CLUSTER_ANNOTATION,
                move |e| c.record(e, |p: &Pod| src.learn(&p.metadata)),
            )
        },
    };
    let events = EventCopies {
        down: {
            let c = changes.clone();
            Informer::start_with(
                Api::all(config.downstream.clone()),
                watcher::Config::default(),
                "events",
                move |e| c.record(e, |ev: &Event| ev.metadata.namespace.clone()),
            )
        },
        copied: Default::default(),
    };
    let mut retry = false;
    let mut known = 0;
    let mut resync = tokio::time::Instant::now() + RESYNC;
    loop {
        let all_known = kinds.iter().all(KindSync::down_known);
        let wait = if retry || !all_known {
            RETRY
        } else {
            resync.saturating_duration_since(tokio::time::Instant::now())
        };
        tokio::select! {
            r = stop.changed() => {
                if r.is_err() {
                    return Err(SyncError::Orphaned);
                }
                if *stop.borrow() {
                    return Ok(());
                }
            }
            _ = changes.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
        if !namespaces.is_ready() {
            continue;
        }
        if crds.is_ready() && crds_changed.swap(false, Ordering::AcqRel) {
            for crd in crds.store.state() {
                let key = (
                    crd.metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(LOGICAL_CLUSTER_ANNOTATION))
                        .cloned()
                        .unwrap_or_default(),
                    crd.metadata.name.clone().unwrap_or_default(),
                );
                let rv = crd.metadata.resource_version.clone().unwrap_or_default();
                if installed.get(&key) == Some(&rv) {
                    continue;
                }
                let Ok(v) = serde_json::to_value(&*crd) else {
                    continue;
                };
                let Some(kind) = syncable_kind(&v) else {
                    continue;
                };
                // The cluster serves the kind before its objects are applied there.
                if !install_crd(syncer, &config, &v).await {
                    crds_changed.store(true, Ordering::Release);
                    retry = true;
                    continue;
                }
                installed.insert(key, rv);
                if !kinds.iter().any(|k| std::ptr::eq(k.kind, kind)) {
                    tracing::info!(kind = kind.kind, group = kind.group, "custom kind syncable");
                    kinds.push(start_kind(kind));
                    changes.touch_all();
                }
            }
        }
        // A kind given up on downstream (not served there) is acted on from now: everything.
        let now_known = kinds.iter().filter(|k| k.down_known()).count();
        if now_known > known || tokio::time::Instant::now() >= resync {
            known = now_known;
            resync = tokio::time::Instant::now() + RESYNC;
            changes.touch_all();
        }
        let scope = changes.take();
        if scope.is_empty() {
            continue;
        }
        let targets = targets(
            &sources,
            &scope,
            &kinds,
            &namespaces,
            &logical_namespaces,
            &mirrors,
        );
        let span = tracing::debug_span!("round", namespaces = targets.len(), all = scope.is_all());
        let ok = async {
            pass(
                syncer,
                &config,
                &upstream,
                &kinds,
                &namespaces,
                &logical_namespaces,
                &targets,
            )
            .await
                & report_imports(
                    syncer,
                    &config,
                    &upstream,
                    &namespaces,
                    &logical_namespaces,
                    &imports,
                    &targets,
                )
                .await
                & mirror_pods(syncer, &config, &upstream, &mirrors, &targets).await
                & report_conflicts(&config, &upstream, &sources).await
                & copy_events(
                    syncer, &config, &upstream, &kinds, &mirrors, &events, &targets,
                )
                .await
        }
        .instrument(span)
        .await;
        syncer.metrics.passes.inc();
        syncer
            .metrics
            .placed
            .set(kinds.iter().map(|k| k.up.store.len() as i64).sum());
        retry = !ok;
        if retry {
            changes.restore(scope);
        } else if kinds.iter().all(|k| k.up.is_ready() && k.down.is_ready()) {
            syncer.ready.store(true, Ordering::Release);
        }
    }
}

/// The downstream namespaces a round over `scope` covers, each with the upstream namespace
/// it holds when known (a downstream namespace of unknown origin holds nothing placed:
/// what it has goes).
fn targets(
    sources: &Sources,
    scope: &Scope<String>,
    kinds: &[KindSync],
    namespaces: &Informer<Namespace>,
    logical_namespaces: &Informer<Namespace>,
    mirrors: &Mirrors,
) -> BTreeMap<String, Option<(LogicalClusterPath, String)>> {
    let names: BTreeSet<String> = match scope {
        Scope::Keys(keys) => keys.clone(),
        Scope::All => {
            // Listed objects come without events of their own: learn from the caches,
            // namespaces (which name the downstream namespaces) first.
            for n in logical_namespaces.state() {
                if placed_anywhere(&n) {
                    sources.learn_namespace(&n.metadata);
                }
            }
            let upstream = kinds
                .iter()
                .flat_map(|k| k.up.store.namespaces())
                .chain(mirrors.up.store.namespaces());
            for (scope, ns) in upstream {
                if let Ok(path) = scope.parse::<LogicalClusterPath>() {
                    sources.learn_listed((path, ns));
                }
            }
            let mut all: BTreeSet<String> = sources.downstream().into_iter().collect();
            for k in kinds {
                all.extend(k.down.store.namespaces().into_iter().map(|(_, ns)| ns));
            }
            all.extend(
                namespaces
                    .state()
                    .iter()
                    .filter_map(|n| n.metadata.name.clone()),
            );
            all.extend(
                mirrors
                    .down
                    .store
                    .namespaces()
                    .into_iter()
                    .map(|(_, ns)| ns),
            );
            all
        }
    };
    names
        .into_iter()
        .map(|n| {
            let source = sources.holder(&n);
            (n, source)
        })
        .collect()
}

/// One round over the downstream namespaces `targets`, for every kind whose informers have
/// listed; false if a write failed.
async fn pass(
    syncer: &Syncer,
    config: &Config,
    upstream: &Upstream,
    kinds: &[KindSync],
    namespaces: &Informer<Namespace>,
    logical_namespaces: &Informer<Namespace>,
    targets: &BTreeMap<String, Option<(LogicalClusterPath, String)>>,
) -> bool {
    let mut ok = true;
    let ns_api: Api<Namespace> = Api::all(config.downstream.clone());
    let finalizer = sync_finalizer(&config.cluster);
    for (down_ns, source) in targets {
        let mut origin: Option<Origin> = None;
        let mut desired: Vec<(&KindSync, Value)> = Vec::new();
        // Upstream objects whose status this cluster reports, with what they say now.
        let mut reporting: Vec<(&KindSync, Origin, Value)> = Vec::new();
        // Upstream objects to put this cluster's finalizer on once synced, and those being
        // deleted upstream that wait for their downstream copy to go.
        let mut to_hold: Vec<(&KindSync, Origin, Arc<DynamicObject>)> = Vec::new();
        let mut deleting: Vec<(&KindSync, Origin, Arc<DynamicObject>)> = Vec::new();
        if let Some((path, up_ns)) = source {
            for k in kinds.iter().filter(|k| k.up.is_ready()) {
                for obj in k.up.store.in_namespace(&path.to_string(), up_ns) {
                    let Ok(json) = serde_json::to_value(&*obj) else {
                        continue;
                    };
                    match downstream(&json, k.kind, &config.cluster, down_ns) {
                        Ok((o, _)) if obj.metadata.deletion_timestamp.is_some() => {
                            if holds(&obj, &finalizer) {
                                deleting.push((k, o, obj.clone()));
                            }
                        }
                        // A Pod runs on one cluster of a spread namespace: not here.
                        Ok(_)
                            if share_on(&json, &config.cluster) == Some(0)
                                && k.kind.kind == "Pod" => {}
                        Ok((o, mut d)) => {
                            if k.kind.kind == "Service" {
                                let ns = logical_namespaces.get_in(path.as_str(), "", up_ns);
                                let annotations =
                                    ns.as_ref().and_then(|n| n.metadata.annotations.as_ref());
                                crate::transform::with_traffic(
                                    &mut d,
                                    annotations,
                                    &config.cluster,
                                );
                            }
                            if !holds(&obj, &finalizer) {
                                to_hold.push((k, o.clone(), obj.clone()));
                            }
                            if k.kind.reports_status() {
                                reporting.push((k, o.clone(), json));
                            }
                            origin.get_or_insert(o);
                            desired.push((k, d));
                        }
                        Err(e) => {
                            syncer.metrics.not_synced.inc();
                            tracing::warn!(kind = k.kind.kind, name = ?obj.metadata.name, error = %e, "not synced");
                        }
                    }
                }
            }
        }

        // The namespace first: objects cannot be created in a namespace that is not there.
        // A namespace placed anywhere is here too, for its imports.
        let imported = source.as_ref().is_some_and(|(path, up_ns)| {
            logical_namespaces
                .get_in(path.as_str(), "", up_ns)
                .is_some_and(|n| placed_anywhere(&n))
        });
        let have_ns = namespaces.get("", down_ns);
        // The namespace here holds another upstream namespace (names that collide): not
        // ours to write, nor to empty.
        if let (Some(have), Some(up)) = (&have_ns, source)
            && let Some(holder) = crate::sources::owner_of(&have.metadata)
            && holder != *up
        {
            syncer.sources.refuse(crate::sources::Conflict {
                downstream: down_ns.clone(),
                holder,
                claimant: up.clone(),
            });
            continue;
        }
        let wanted_ns = match (&origin, source) {
            (Some(o), _) => Some((&o.logical_cluster, o.namespace.as_str())),
            (None, Some((path, up_ns))) if imported => Some((path, up_ns.as_str())),
            _ => None,
        };
        if let Some((path, up_ns)) = wanted_ns {
            let level = logical_namespaces
                .get_in(path.as_str(), "", up_ns)
                .and_then(|n| crate::transform::pod_security_of(n.metadata.annotations.as_ref()));
            let want = namespace_object(down_ns, path, up_ns, level);
            let in_place_ns = have_ns
                .as_ref()
                .and_then(|n| serde_json::to_value(&**n).ok())
                .is_some_and(|h| contained(&want["metadata"], &h["metadata"]));
            if !in_place_ns {
                let written = ns_api
                    .patch(down_ns, &apply_params(), &Patch::Apply(&want))
                    .await;
                syncer.metrics.write("Namespace", "apply", written.is_ok());
                if let Err(e) = written {
                    tracing::warn!(namespace = %down_ns, error = %e, "creating the namespace failed");
                    ok = false;
                    continue;
                }
            }
        }

        // What is downstream now, by kind and name.
        let mut actual: BTreeMap<(&str, String), Value> = BTreeMap::new();
        let stores: Vec<(&KindSync, Vec<Arc<DynamicObject>>)> = kinds
            .iter()
            .filter(|k| k.down.is_ready())
            .map(|k| (k, k.down.store.in_namespace("", down_ns)))
            .collect();
        for (k, objects) in &stores {
            for o in objects {
                if let (Some(name), Ok(v)) = (o.metadata.name.clone(), serde_json::to_value(&**o)) {
                    actual.insert((k.kind.plural, name), v);
                }
            }
        }
        let mut wanted: BTreeSet<(&str, String)> = BTreeSet::new();
        for (k, d) in &desired {
            let name = d["metadata"]["name"].as_str().unwrap_or_default();
            wanted.insert((k.kind.plural, name.to_string()));
            if !k.down_known() {
                continue;
            }
            let key = (k.kind.kind, down_ns.clone(), name.to_string());
            if !k.down.is_ready() && syncer.refusals().contains_key(&key) {
                continue;
            }
            let have = actual.get(&(k.kind.plural, name.to_string()));
            if have.is_some_and(|h| in_place(d, h)) {
                continue;
            }
            let api: Api<DynamicObject> =
                Api::namespaced_with(config.downstream.clone(), down_ns, &k.resource);
            let written = api.patch(name, &apply_params(), &Patch::Apply(d)).await;
            syncer.metrics.write(k.kind.kind, "apply", written.is_ok());
            match written {
                Ok(_) => {
                    tracing::info!(kind = k.kind.kind, namespace = %down_ns, name, "applied");
                    syncer.refusals().remove(&key);
                }
                // The cluster refuses it (invalid there, a kind it does not serve): said
                // once, upstream, as an Event on the object; retried when it changes, not
                // every second.
                Err(kube::Error::Api(s)) if [400, 403, 404, 422].contains(&s.code) => {
                    tracing::warn!(kind = k.kind.kind, namespace = %down_ns, name, error = %s.message, "the cluster refuses it");
                    let said = syncer.refusals().get(&key) == Some(&s.message);
                    if !said && let Some(origin) = &origin {
                        refused(config, upstream, k.kind, origin, name, &s.message).await;
                        syncer.refusals().insert(key, s.message.clone());
                    }
                }
                Err(e) => {
                    tracing::warn!(kind = k.kind.kind, namespace = %down_ns, name, error = %e, "apply failed");
                    ok = false;
                }
            }
        }

        // Status back up: what each downstream workload reports, where it changed.
        for (k, o, up) in &reporting {
            let Some(have) = actual.get(&(k.kind.plural, o.name.clone())) else {
                continue;
            };
            ok &= report_status(syncer, config, upstream, k, o, up, have).await;
        }

        // Synced objects carry this cluster's finalizer, so that their upstream deletion
        // waits for the downstream one.
        for (k, o, obj) in &to_hold {
            if actual.contains_key(&(k.kind.plural, o.name.clone())) {
                ok &= set_finalizer(syncer, upstream, k, o, obj, &finalizer, true).await;
            }
        }

        // What is synced downstream but no longer placed (or gone upstream) goes.
        for (k, objects) in stores.iter().filter(|(k, _)| k.up.is_ready()) {
            for o in objects {
                let name = o.metadata.name.clone().unwrap_or_default();
                if o.metadata.deletion_timestamp.is_some()
                    || wanted.contains(&(k.kind.plural, name.clone()))
                {
                    continue;
                }
                let api: Api<DynamicObject> =
                    Api::namespaced_with(config.downstream.clone(), down_ns, &k.resource);
                ok &= delete(syncer, k.kind.kind, &api, down_ns, &name).await;
            }
        }

        // Deleted upstream and gone downstream: the upstream deletion may finish.
        for (k, o, obj) in &deleting {
            if k.down.is_ready() && !actual.contains_key(&(k.kind.plural, o.name.clone())) {
                ok &= set_finalizer(syncer, upstream, k, o, obj, &finalizer, false).await;
            }
        }

        // A synced namespace with nothing placed in it, of a namespace placed nowhere, goes
        // too, once every upstream informer has listed (before that, "nothing placed" may
        // only mean "not listed yet").
        if wanted_ns.is_none()
            && kinds.iter().all(|k| k.up.is_ready())
            && logical_namespaces.is_ready()
            && have_ns.is_some_and(|n| n.metadata.deletion_timestamp.is_none())
        {
            ok &= delete(syncer, "Namespace", &ns_api, "", down_ns).await;
        }
    }
    ok
}

/// Whether an upstream namespace is placed on some cluster and not being deleted.
fn placed_anywhere(ns: &Namespace) -> bool {
    ns.metadata.deletion_timestamp.is_none()
        && !placed_clusters(ns.metadata.labels.iter().flatten()).is_empty()
}

/// Report on each upstream namespace of `targets` what this cluster's MCS imports hold for
/// it ([`crate::imports`]) and its dataplane's traffic to draining sources, where that
/// changed; false if a write failed.
async fn report_imports(
    syncer: &Syncer,
    config: &Config,
    upstream: &Upstream,
    namespaces: &Informer<Namespace>,
    logical_namespaces: &Informer<Namespace>,
    imports: &Informer<EndpointSlice>,
    targets: &BTreeMap<String, Option<(LogicalClusterPath, String)>>,
) -> bool {
    if !imports.is_ready() || !logical_namespaces.is_ready() {
        return true;
    }
    let key = imports_annotation(&config.cluster);
    let mut ok = true;
    for (down_ns, source) in targets {
        let Some((path, up_ns)) = source else {
            continue;
        };
        let Some(ns) = logical_namespaces.get_in(path.as_str(), "", up_ns) else {
            continue;
        };
        if !placed_anywhere(&ns) {
            continue;
        }
        let dataplane = namespaces
            .get("", down_ns)
            .map(|n| crate::imports::Dataplane::of(&n))
            .unwrap_or_default();
        let want = crate::imports::annotation_value(&crate::imports::report(
            &imports.store.in_namespace("", down_ns),
            &dataplane,
        ));
        let have = ns.metadata.annotations.as_ref().and_then(|a| a.get(&key));
        if have == want.as_ref() {
            continue;
        }
        let Ok(client) = upstream.at(path) else {
            continue;
        };
        let api: Api<Namespace> = Api::all(client);
        let patch = serde_json::json!({"metadata": {"annotations": {&key: want}}});
        let written = api
            .patch(up_ns, &PatchParams::default(), &Patch::Merge(&patch))
            .await;
        syncer.metrics.write("Namespace", "report", written.is_ok());
        match written {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                tracing::warn!(namespace = %up_ns, error = %e, "reporting imports failed");
                ok = false;
            }
        }
    }
    ok
}

/// Tell each upstream namespace refused for naming a downstream namespace another holds:
/// a Warning Event `NamespaceConflict` on it, once. False if one could not be written.
async fn report_conflicts(config: &Config, upstream: &Upstream, sources: &Sources) -> bool {
    let mut ok = true;
    for c in sources.unreported() {
        let (path, ns) = &c.claimant;
        let Ok(client) = upstream.at(path) else {
            continue;
        };
        let message = format!(
            "namespace {ns} is not synced to cluster {}: its namespace there, {}, holds namespace {} of logical cluster {}",
            config.cluster, c.downstream, c.holder.1, c.holder.0
        );
        let regarding = crate::events::Regarding {
            api_version: "v1",
            kind: "Namespace",
            namespace: ns,
            name: ns,
            uid: None,
        };
        let event = crate::events::warning(&regarding, "NamespaceConflict", &message);
        let api: Api<DynamicObject> = Api::namespaced_with(
            client,
            ns,
            &ApiResource::erase::<k8s_openapi::api::core::v1::Event>(&()),
        );
        let written = match serde_json::from_value::<DynamicObject>(event) {
            Ok(obj) => api.create(&Default::default(), &obj).await.map(|_| ()),
            Err(_) => Ok(()),
        };
        match written {
            Ok(()) => sources.reported(c),
            Err(e) => {
                tracing::warn!(error = %e, namespace = %ns, "the namespace conflict was not recorded upstream");
                ok = false;
            }
        }
    }
    ok
}

/// Tell the logical cluster that this cluster refused `name` (of `kind`, from `origin`'s
/// namespace): a Warning Event `SyncFailed` on the object (best effort).
async fn refused(
    config: &Config,
    upstream: &Upstream,
    kind: &SyncedKind,
    origin: &Origin,
    name: &str,
    message: &str,
) {
    let Ok(client) = upstream.at(&origin.logical_cluster) else {
        return;
    };
    let api_version = kind.api_version();
    let regarding = crate::events::Regarding {
        api_version: &api_version,
        kind: kind.kind,
        namespace: &origin.namespace,
        name,
        uid: None,
    };
    let message = format!(
        "cluster {} refused the {}: {message}",
        config.cluster, kind.kind
    );
    let event = crate::events::warning(&regarding, "SyncFailed", &message);
    let api: Api<DynamicObject> = Api::namespaced_with(
        client,
        &origin.namespace,
        &ApiResource::erase::<k8s_openapi::api::core::v1::Event>(&()),
    );
    if let Ok(obj) = serde_json::from_value::<DynamicObject>(event)
        && let Err(e) = api.create(&Default::default(), &obj).await
    {
        tracing::debug!(error = %e, "the refusal was not recorded upstream");
    }
}

fn crd_resource() -> ApiResource {
    ApiResource::erase::<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    >(&())
}

/// Apply the syncable CustomResourceDefinition `crd` (from a logical cluster) to the
/// cluster, without taking fields over from another manager (a definition the cluster's
/// admin installed differently is left as it is, and the objects it refuses are reported);
/// false if that failed for another reason.
async fn install_crd(syncer: &Syncer, config: &Config, crd: &Value) -> bool {
    let Some(name) = crd["metadata"]["name"].as_str() else {
        return true;
    };
    let mut spec = crd["spec"].clone();
    if let Some(s) = spec.as_object_mut() {
        s.remove("conversion");
    }
    let want = serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name, "labels": {LABEL_SYNCED: "true"}},
        "spec": spec,
    });
    let api: Api<DynamicObject> = Api::all_with(config.downstream.clone(), &crd_resource());
    let written = api
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(&want),
        )
        .await;
    match written {
        Ok(_) => {
            syncer
                .metrics
                .write("CustomResourceDefinition", "apply", true);
            true
        }
        Err(kube::Error::Api(s)) if s.code == 409 => {
            tracing::warn!(crd = name, message = %s.message, "the cluster has its own definition of a syncable kind");
            true
        }
        Err(e) => {
            syncer
                .metrics
                .write("CustomResourceDefinition", "apply", false);
            tracing::warn!(crd = name, error = %e, "installing a syncable kind's definition failed");
            false
        }
    }
}

/// Count write `r` as `kind`/`verb`: `Ok` when it took effect or the object was gone
/// already (404).
fn counted<T>(
    syncer: &Syncer,
    kind: &'static str,
    verb: &'static str,
    r: kube::Result<T>,
) -> kube::Result<()> {
    let r = match r {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        r => r.map(|_| ()),
    };
    syncer.metrics.write(kind, verb, r.is_ok());
    r
}

/// Delete `name` downstream; false if that failed (already gone is success).
async fn delete<K>(syncer: &Syncer, kind: &'static str, api: &Api<K>, ns: &str, name: &str) -> bool
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let deleted = api.delete(name, &DeleteParams::default()).await;
    match counted(syncer, kind, "delete", deleted) {
        Ok(()) => {
            tracing::info!(kind, namespace = ns, name, "deleted");
            true
        }
        Err(e) => {
            tracing::warn!(kind, namespace = ns, name, error = %e, "delete failed");
            false
        }
    }
}

/// The pods of the cluster and their mirrors in the logical clusters.
struct Mirrors {
    down: Informer<Pod>,
    up: Informer<Pod>,
}

/// Downstream Events, and the resourceVersion of each one copied up (by namespace and
/// name), so an Event is written up once per change.
struct EventCopies {
    down: Informer<Event>,
    copied: std::sync::Mutex<HashMap<(String, String), String>>,
}

/// Copy up the Events of the synced namespaces `targets` that are about an object there is
/// upstream (a synced object, or a Pod's mirror); false if a write failed.
async fn copy_events(
    syncer: &Syncer,
    config: &Config,
    upstream: &Upstream,
    kinds: &[KindSync],
    mirrors: &Mirrors,
    events: &EventCopies,
    targets: &BTreeMap<String, Option<(LogicalClusterPath, String)>>,
) -> bool {
    if !events.down.is_ready() {
        return true;
    }
    let mut ok = true;
    let resource = ApiResource::erase::<Event>(&());
    for (down_ns, source) in targets {
        let in_ns = events.down.store.in_namespace("", down_ns);
        // Forget what is gone downstream (its upstream copy stays, as Events do).
        events
            .copied
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(ns, name), _| {
                ns != down_ns
                    || in_ns
                        .iter()
                        .any(|e| e.metadata.name.as_deref() == Some(name))
            });
        let Some((path, up_ns)) = source else {
            continue;
        };
        for ev in in_ns {
            let (Some(name), Some(rv)) = (
                ev.metadata.name.clone(),
                ev.metadata.resource_version.clone(),
            ) else {
                continue;
            };
            let key = (down_ns.clone(), name);
            if events
                .copied
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&key)
                == Some(&rv)
            {
                continue;
            }
            let about = &ev.involved_object;
            let (Some(kind), Some(obj_name)) = (about.kind.as_deref(), about.name.as_deref())
            else {
                continue;
            };
            let scope = path.to_string();
            // A Pod is a mirror, or one made upstream (a synced object like the others).
            let mirror = (kind == "Pod")
                .then(|| mirrors.up.store.get_in(&scope, up_ns, obj_name))
                .flatten()
                .map(|m| ("v1".to_string(), m.metadata.uid.clone()));
            let found: Option<(String, Option<String>)> = mirror.or_else(|| {
                kinds.iter().filter(|k| k.kind.kind == kind).find_map(|k| {
                    let o = k.up.store.get_in(&scope, up_ns, obj_name)?;
                    Some((k.kind.api_version(), o.metadata.uid.clone()))
                })
            });
            let Some((api_version, uid)) = found else {
                continue;
            };
            let regarding = crate::events::Regarding {
                api_version: &api_version,
                kind,
                namespace: up_ns,
                name: obj_name,
                uid: uid.as_deref(),
            };
            let Some(up) = serde_json::to_value(&*ev)
                .ok()
                .and_then(|v| crate::events::upstream_event(&v, &regarding, &config.cluster))
            else {
                continue;
            };
            let Ok(client) = upstream.at(path) else {
                continue;
            };
            let up_name = up["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let api: Api<DynamicObject> = Api::namespaced_with(client, up_ns, &resource);
            let written = api
                .patch(&up_name, &apply_params(), &Patch::Apply(&up))
                .await;
            syncer.metrics.write("Event", "copy", written.is_ok());
            match written {
                Ok(_) => {
                    events
                        .copied
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(key, rv);
                }
                // Refused (the logical cluster or namespace is gone, or it is invalid
                // there): not retried until it changes.
                Err(kube::Error::Api(e)) if e.code < 500 => {
                    tracing::debug!(namespace = %up_ns, event = %up_name, error = %e.message, "an event was refused upstream");
                    events
                        .copied
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(key, rv);
                }
                Err(e) => {
                    tracing::debug!(namespace = %up_ns, event = %up_name, error = %e, "copying an event up failed");
                    ok = false;
                }
            }
        }
    }
    ok
}

/// Mirror every pod of the synced namespaces `targets` upstream, update mirrors whose pod
/// changed and delete those whose pod is gone; false if a write failed.
async fn mirror_pods(
    syncer: &Syncer,
    config: &Config,
    upstream: &Upstream,
    mirrors: &Mirrors,
    targets: &BTreeMap<String, Option<(LogicalClusterPath, String)>>,
) -> bool {
    if !mirrors.down.is_ready() || !mirrors.up.is_ready() {
        return true;
    }
    let mut ok = true;
    let origins: BTreeMap<&str, &(LogicalClusterPath, String)> = targets
        .iter()
        .filter_map(|(down, source)| Some((down.as_str(), source.as_ref()?)))
        .collect();
    // The mirrors there are, by logical cluster, namespace and name.
    let mirrored: BTreeMap<(String, String, String), Value> = origins
        .values()
        .flat_map(|(path, ns)| mirrors.up.store.in_namespace(&path.to_string(), ns))
        .filter_map(|m| {
            let key = (
                m.metadata
                    .annotations
                    .as_ref()?
                    .get(LOGICAL_CLUSTER_ANNOTATION)?
                    .clone(),
                m.metadata.namespace.clone()?,
                m.metadata.name.clone()?,
            );
            Some((key, serde_json::to_value(&*m).ok()?))
        })
        .collect();
    let mut wanted: BTreeSet<(String, String, String)> = BTreeSet::new();
    let pods = origins
        .keys()
        .flat_map(|down| mirrors.down.store.in_namespace("", down));
    for p in pods {
        let (Some(ns), Some(name)) = (p.metadata.namespace.as_deref(), p.metadata.name.as_deref())
        else {
            continue;
        };
        // A copy of a Pod made upstream reports to that Pod; it has no mirror.
        if p.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(LABEL_SYNCED))
        {
            continue;
        }
        let Some((path, up_ns)) = origins.get(ns) else {
            continue;
        };
        let origin = Origin {
            logical_cluster: path.clone(),
            namespace: up_ns.clone(),
            name: name.to_string(),
        };
        let Ok(down) = serde_json::to_value(&*p) else {
            continue;
        };
        let Some(want) = crate::mirror::pod(&down, &origin, &config.cluster) else {
            continue;
        };
        wanted.insert((path.to_string(), up_ns.clone(), name.to_string()));
        let have = mirrored.get(&(path.to_string(), up_ns.clone(), name.to_string()));
        // The mirror was deleted upstream: the real Pod goes first (its controller makes a
        // new one); the mirror follows once it is gone.
        if have.is_some_and(|h| !h["metadata"]["deletionTimestamp"].is_null()) {
            if p.metadata.deletion_timestamp.is_none() {
                let api: Api<Pod> = Api::namespaced(config.downstream.clone(), ns);
                ok &= delete(syncer, "Pod", &api, ns, name).await;
            }
            continue;
        }
        let client = match upstream.at(path) {
            Ok(c) => c,
            Err(_) => {
                ok = false;
                continue;
            }
        };
        let api: Api<Pod> = Api::namespaced(client, up_ns);
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let mut meta_spec = want.clone();
        if let Some(o) = meta_spec.as_object_mut() {
            o.remove("status");
        }
        if have.is_none_or(|h| !in_place(&meta_spec, h)) {
            let written = api.patch(name, &params, &Patch::Apply(&meta_spec)).await;
            syncer.metrics.write("Pod", "mirror", written.is_ok());
            if let Err(e) = written {
                tracing::warn!(namespace = %up_ns, pod = name, error = %e, "mirroring the pod failed");
                ok = false;
                continue;
            }
        }
        if have.is_none_or(|h| h["status"] != want["status"]) {
            let patch = serde_json::json!({"status": want["status"]});
            let written = api
                .patch_status(name, &manager_params(), &Patch::Merge(&patch))
                .await;
            syncer.metrics.write("Pod", "mirror", written.is_ok());
            if let Err(e) = written {
                tracing::warn!(namespace = %up_ns, pod = name, error = %e, "mirroring the pod's status failed");
                ok = false;
            }
        }
    }
    let finalizer = sync_finalizer(&config.cluster);
    for ((path, ns, name), mirror) in &mirrored {
        let Ok(path) = path.parse::<LogicalClusterPath>() else {
            continue;
        };
        if wanted.contains(&(path.to_string(), ns.clone(), name.clone())) {
            continue;
        }
        let Ok(client) = upstream.at(&path) else {
            ok = false;
            continue;
        };
        let api: Api<Pod> = Api::namespaced(client, ns);
        // The real Pod is gone: release the mirror, then delete it (a mirror deleted
        // upstream is only waiting for the release).
        let mut finalizers: Vec<String> =
            serde_json::from_value(mirror["metadata"]["finalizers"].clone()).unwrap_or_default();
        if finalizers.contains(&finalizer)
            && let Some(rv) = mirror["metadata"]["resourceVersion"].as_str()
        {
            finalizers.retain(|f| f != &finalizer);
            let Ok(patch) =
                serde_json::from_value::<json_patch::Patch>(finalizers_patch(rv, &finalizers))
            else {
                continue;
            };
            let released = api
                .patch(name, &manager_params(), &Patch::Json::<()>(patch))
                .await;
            if let Err(e) = counted(syncer, "Pod", "release", released) {
                tracing::debug!(namespace = %ns, pod = %name, error = %e, "releasing the mirror failed");
                ok = false;
                continue;
            }
        }
        if !mirror["metadata"]["deletionTimestamp"].is_null() {
            continue;
        }
        let deleted = api
            .delete(name, &DeleteParams::default().grace_period(0))
            .await;
        if let Err(e) = counted(syncer, "Pod", "unmirror", deleted) {
            tracing::warn!(namespace = %ns, pod = %name, error = %e, "removing the pod's mirror failed");
            ok = false;
        }
    }
    ok
}

/// What the downstream object `have` tells upstream: its status, and the upstream
/// generation that status reflects (0 while the downstream controller has not caught up
/// with what was last applied).
pub fn status_report(have: &Value) -> StatusReport {
    let status = have.get("status").cloned().unwrap_or(Value::Null);
    let applied_from = have["metadata"]["annotations"][ANNOTATION_UPSTREAM_GENERATION]
        .as_str()
        .and_then(|g| g.parse::<i64>().ok())
        .unwrap_or(0);
    let caught_up = match status.get("observedGeneration").and_then(Value::as_i64) {
        Some(seen) => seen >= have["metadata"]["generation"].as_i64().unwrap_or(0),
        // Kinds without observedGeneration (Jobs) report what they have.
        None => !status.is_null(),
    };
    StatusReport {
        observed_generation: if caught_up { applied_from } else { 0 },
        replicas: have["spec"]["replicas"].as_i64(),
        status,
    }
}

/// Write `have`'s status report into the upstream object's status annotation for this
/// cluster, unless it already says that; false if the write failed.
async fn report_status(
    syncer: &Syncer,
    config: &Config,
    upstream: &Upstream,
    k: &KindSync,
    origin: &Origin,
    up: &Value,
    have: &Value,
) -> bool {
    let key = status_annotation(&config.cluster);
    let report = status_report(have);
    let current: Option<StatusReport> = up["metadata"]["annotations"][&key]
        .as_str()
        .and_then(|s| serde_json::from_str(s).ok());
    if current.as_ref() == Some(&report) {
        return true;
    }
    let Ok(text) = serde_json::to_string(&report) else {
        return true;
    };
    let Some(api) = upstream_api(upstream, k, origin) else {
        return false;
    };
    let patch = serde_json::json!({"metadata": {"annotations": {key: text}}});
    let written = api
        .patch(&origin.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await;
    syncer.metrics.write(k.kind.kind, "report", written.is_ok());
    match written {
        Ok(_) => true,
        // Deleted upstream meanwhile: the next pass deletes it downstream.
        Err(kube::Error::Api(s)) if s.code == 404 => true,
        Err(e) => {
            tracing::warn!(kind = k.kind.kind, logical_cluster = %origin.logical_cluster,
                namespace = %origin.namespace, name = %origin.name, error = %e, "status report failed");
            false
        }
    }
}

/// The API of `k`'s objects in `origin`'s namespace of its logical cluster.
fn upstream_api(upstream: &Upstream, k: &KindSync, origin: &Origin) -> Option<Api<DynamicObject>> {
    match upstream.at(&origin.logical_cluster) {
        Ok(client) => Some(Api::namespaced_with(client, &origin.namespace, &k.resource)),
        Err(e) => {
            tracing::warn!(error = %e, "no client for the logical cluster");
            None
        }
    }
}

/// Whether `obj` carries `finalizer`.
fn holds(obj: &DynamicObject, finalizer: &str) -> bool {
    obj.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == finalizer))
}

/// Add (`hold`) or remove this cluster's finalizer on the upstream object `obj`, on
/// condition that it has not changed since it was read; false if the write failed (a
/// conflict included: the next round reads it again).
async fn set_finalizer(
    syncer: &Syncer,
    upstream: &Upstream,
    k: &KindSync,
    origin: &Origin,
    obj: &DynamicObject,
    finalizer: &str,
    hold: bool,
) -> bool {
    let mut want: Vec<String> = obj.metadata.finalizers.clone().unwrap_or_default();
    want.retain(|f| f != finalizer);
    if hold {
        want.push(finalizer.to_string());
    }
    let Some(rv) = obj.metadata.resource_version.as_deref() else {
        return true;
    };
    let Some(api) = upstream_api(upstream, k, origin) else {
        return false;
    };
    let patch: json_patch::Patch = match serde_json::from_value(finalizers_patch(rv, &want)) {
        Ok(p) => p,
        Err(_) => return false,
    };
    let written = api
        .patch(
            &origin.name,
            &PatchParams::default(),
            &Patch::Json::<()>(patch),
        )
        .await;
    let verb = if hold { "hold" } else { "release" };
    syncer.metrics.write(k.kind.kind, verb, written.is_ok());
    match written {
        Ok(_) => {
            tracing::debug!(kind = k.kind.kind, logical_cluster = %origin.logical_cluster,
                namespace = %origin.namespace, name = %origin.name, verb, "finalizer");
            true
        }
        Err(kube::Error::Api(s)) if s.code == 404 => true,
        Err(e) => {
            tracing::debug!(kind = k.kind.kind, logical_cluster = %origin.logical_cluster,
                namespace = %origin.namespace, name = %origin.name, verb, error = %e, "finalizer write failed");
            false
        }
    }
}

/// Whether `have` already says everything `want` says (see [`crate::drift`]).
fn in_place(want: &Value, have: &Value) -> bool {
    let mut want = want.clone();
    // The downstream server names the object's identity itself; compare the rest.
    if let Some(m) = want.as_object_mut() {
        m.remove("apiVersion");
        m.remove("kind");
    }
    contained(&want, have)
}

/// Parameters of the syncer's writes that are not server-side applies: named for the
/// syncer, the one writer of Pod mirrors.
fn manager_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}

fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}
