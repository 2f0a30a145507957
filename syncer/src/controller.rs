//! The sync loop: informers on both sides for every kind that travels, and a pass after
//! any event that makes downstream what upstream says — apply what is missing or drifted,
//! delete what is no longer placed, and namespaces left with nothing placed — writing
//! nothing when both agree.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::Value;
use sluice_api::ClusterName;
use sluice_api::sync::{FIELD_MANAGER, LABEL_SYNCED, downstream_namespace, state_label};
use sluice_kube::Informer;
use tokio::sync::{Notify, watch};

use crate::drift::contained;
use crate::kinds::{BUILTIN, SyncedKind};
use crate::metrics::SyncMetrics;
use crate::transform::{Origin, downstream, namespace_object};

/// After a failed write, the pass runs again this much later.
const RETRY: Duration = Duration::from_secs(1);
/// A pass runs at least this often, to repair what no event reported.
const RESYNC: Duration = Duration::from_secs(60);

/// What a syncer syncs: from the control plane (a client whose base URL is the wildcard
/// `/clusters/*`) to one physical cluster.
pub struct Config {
    pub upstream: kube::Client,
    pub downstream: kube::Client,
    pub cluster: ClusterName,
}

/// Why the syncer stopped before it was told to.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("the stop signal's sender is gone")]
    Orphaned,
}

struct KindSync {
    kind: &'static SyncedKind,
    resource: ApiResource,
    up: Informer<DynamicObject>,
    down: Informer<DynamicObject>,
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
}

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
        Arc::new(Self {
            metrics,
            registry,
            ready: AtomicBool::new(false),
        })
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
    let changed = Arc::new(Notify::new());
    let placed = state_label(&config.cluster);
    let synced = format!("{LABEL_SYNCED}=true");
    let kinds: Vec<KindSync> = BUILTIN
        .iter()
        .map(|kind| {
            let resource = resource(kind);
            let notify = changed.clone();
            let up = Informer::start_typed(
                Api::all_with(config.upstream.clone(), &resource),
                resource.clone(),
                watcher::Config::default().labels(&placed),
                kind.plural,
                move |_| notify.notify_one(),
            );
            let notify = changed.clone();
            let down = Informer::start_typed(
                Api::all_with(config.downstream.clone(), &resource),
                resource.clone(),
                watcher::Config::default().labels(&synced),
                kind.plural,
                move |_| notify.notify_one(),
            );
            KindSync {
                kind,
                resource,
                up,
                down,
            }
        })
        .collect();
    let namespaces = Informer::<Namespace>::start(
        Api::all(config.downstream.clone()),
        watcher::Config::default().labels(&synced),
        changed.clone(),
        "namespaces",
    );
    let mut retry = false;
    loop {
        let wait = if retry { RETRY } else { RESYNC };
        tokio::select! {
            r = stop.changed() => {
                if r.is_err() {
                    return Err(SyncError::Orphaned);
                }
                if *stop.borrow() {
                    return Ok(());
                }
            }
            _ = changed.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
        if !namespaces.is_ready() {
            continue;
        }
        retry = !pass(syncer, &config, &kinds, &namespaces).await;
        syncer.metrics.passes.inc();
        if !retry && kinds.iter().all(|k| k.up.is_ready() && k.down.is_ready()) {
            syncer.ready.store(true, Ordering::Release);
        }
    }
}

/// One pass over every kind whose informers have listed; false if a write failed.
async fn pass(
    syncer: &Syncer,
    config: &Config,
    kinds: &[KindSync],
    namespaces: &Informer<Namespace>,
) -> bool {
    let mut ok = true;
    let mut origins: BTreeMap<String, Origin> = BTreeMap::new();
    let mut desired: Vec<(&KindSync, Value)> = Vec::new();
    for k in kinds.iter().filter(|k| k.up.is_ready()) {
        for obj in k.up.state() {
            let Ok(json) = serde_json::to_value(&*obj) else {
                continue;
            };
            match downstream(&json, k.kind) {
                Ok((origin, d)) => {
                    let ns = downstream_namespace(&origin.logical_cluster, &origin.namespace);
                    origins.entry(ns).or_insert(origin);
                    desired.push((k, d));
                }
                Err(e) => {
                    syncer.metrics.not_synced.inc();
                    tracing::warn!(kind = k.kind.kind, name = ?obj.metadata.name, error = %e, "not synced");
                }
            }
        }
    }

    syncer.metrics.placed.set(desired.len() as i64);
    // Namespaces first: objects cannot be created in a namespace that is not there.
    let ns_api: Api<Namespace> = Api::all(config.downstream.clone());
    for (name, origin) in &origins {
        let want = namespace_object(origin);
        let have = namespaces
            .get("", name)
            .and_then(|n| serde_json::to_value(&*n).ok());
        if have.is_some_and(|h| contained(&want["metadata"], &h["metadata"])) {
            continue;
        }
        let written = ns_api
            .patch(name, &apply_params(), &Patch::Apply(&want))
            .await;
        syncer.metrics.write("Namespace", "apply", written.is_ok());
        if let Err(e) = written {
            tracing::warn!(namespace = %name, error = %e, "creating the namespace failed");
            ok = false;
        }
    }

    // What is downstream now, by kind, namespace and name: one scan per pass.
    let mut actual: BTreeMap<(&str, &str, &str), Value> = BTreeMap::new();
    let stores: Vec<(&KindSync, Vec<Arc<DynamicObject>>)> = kinds
        .iter()
        .filter(|k| k.down.is_ready())
        .map(|k| (k, k.down.state()))
        .collect();
    for (k, objects) in &stores {
        let plural = k.kind.plural;
        for o in objects {
            if let (Some(ns), Some(name), Ok(v)) = (
                o.metadata.namespace.as_deref(),
                o.metadata.name.as_deref(),
                serde_json::to_value(&**o),
            ) {
                actual.insert((plural, ns, name), v);
            }
        }
    }
    let mut wanted: BTreeSet<(&str, String, String)> = BTreeSet::new();
    for (k, d) in &desired {
        let ns = d["metadata"]["namespace"].as_str().unwrap_or_default();
        let name = d["metadata"]["name"].as_str().unwrap_or_default();
        wanted.insert((k.kind.plural, ns.to_string(), name.to_string()));
        if !k.down.is_ready() {
            continue;
        }
        let have = actual.get(&(k.kind.plural, ns, name));
        if have.is_some_and(|h| in_place(d, h)) {
            continue;
        }
        let api: Api<DynamicObject> =
            Api::namespaced_with(config.downstream.clone(), ns, &k.resource);
        let written = api.patch(name, &apply_params(), &Patch::Apply(d)).await;
        syncer.metrics.write(k.kind.kind, "apply", written.is_ok());
        match written {
            Ok(_) => tracing::info!(kind = k.kind.kind, namespace = ns, name, "applied"),
            Err(e) => {
                tracing::warn!(kind = k.kind.kind, namespace = ns, name, error = %e, "apply failed");
                ok = false;
            }
        }
    }

    // What is synced downstream but no longer placed (or gone upstream) goes.
    for (k, objects) in stores.iter().filter(|(k, _)| k.up.is_ready()) {
        for o in objects {
            let ns = o.metadata.namespace.clone().unwrap_or_default();
            let name = o.metadata.name.clone().unwrap_or_default();
            if o.metadata.deletion_timestamp.is_some()
                || wanted.contains(&(k.kind.plural, ns.clone(), name.clone()))
            {
                continue;
            }
            let api: Api<DynamicObject> =
                Api::namespaced_with(config.downstream.clone(), &ns, &k.resource);
            ok &= delete(syncer, k.kind.kind, &api, &ns, &name).await;
        }
    }

    // A synced namespace with nothing placed in it goes too, once every upstream informer
    // has listed (before that, "nothing placed" may only mean "not listed yet").
    if kinds.iter().all(|k| k.up.is_ready()) {
        for n in namespaces.state() {
            let name = n.metadata.name.clone().unwrap_or_default();
            if n.metadata.deletion_timestamp.is_some() || origins.contains_key(&name) {
                continue;
            }
            ok &= delete(syncer, "Namespace", &ns_api, "", &name).await;
        }
    }
    ok
}

/// Delete `name` downstream; false if that failed (already gone is success).
async fn delete<K>(syncer: &Syncer, kind: &'static str, api: &Api<K>, ns: &str, name: &str) -> bool
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let deleted = api.delete(name, &DeleteParams::default()).await;
    let gone = matches!(&deleted, Err(kube::Error::Api(s)) if s.code == 404);
    syncer
        .metrics
        .write(kind, "delete", deleted.is_ok() || gone);
    match deleted {
        Ok(_) => {
            tracing::info!(kind, namespace = ns, name, "deleted");
            true
        }
        Err(_) if gone => true,
        Err(e) => {
            tracing::warn!(kind, namespace = ns, name, error = %e, "delete failed");
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

fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}
