//! The placement controllers on the controller runtime ([`sluice_kube::controller`]):
//! informers over every logical cluster (namespaces, Placements, Workspaces, the root's
//! Clusters and syncer Leases, the workloads and Services placement decides on, the Pod
//! mirrors) touch keys; one key at a time is reconciled.
//!
//! - [`Key::Namespace`] ([`namespace`]): where one namespace runs, stepped toward its
//!   target; its replica shares, summed status and conditions.
//! - [`Key::Cluster`]: one Cluster's status ([`report`]); when what placement reads of it
//!   changed (labels, spec, readiness, MCS membership), the namespaces it can affect are
//!   touched: those on it, those not at rest, and those of logical clusters whose Spread
//!   Placements select it.
//! - [`Key::Placement`]: one Placement's status; when its spec changed, its logical
//!   cluster's namespaces are touched.
//! - [`Key::Workspace`]: a Workspace's policy changed: the namespaces under it are touched.
//! - [`Key::Heartbeats`]: which syncers' leases are current; a cluster whose readiness
//!   changed is touched, and the key is looked at again when the next lease could run out.
//! - [`Key::Resync`]: a watch re-listed; every namespace is looked at once.
//!
//! What each cluster's namespaces request is kept in a [`ledger::Ledger`], updated as each
//! namespace is reconciled, so no reconcile reads every namespace. The state labels of a
//! namespace's objects follow its own in the API server, which owns them.

mod error;
mod ledger;
mod namespace;
mod report;
mod views;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::watcher;
use serde_json::Value;
use sluice_api::liveness::{SYNCER_LEASE_NAMESPACE, syncer_lease_name};
use sluice_api::sync::LABEL_CLUSTER;
use sluice_api::synced_kinds::{BUILTIN, SyncedKind};
use sluice_api::{ClusterName, LOGICAL_CLUSTER_ANNOTATION, LogicalClusterPath};
use sluice_kube::controller::{Action, Controller, ControllerMetrics, Queue, Reconciler};
use sluice_kube::informer::Views;
use sluice_kube::resources::{Limits, Resources};
use sluice_kube::{Informer, Roots};
use tokio::sync::watch;

pub use self::error::{ReconcileError, Write};
use self::ledger::{Ledger, NsKey};
use self::views::{
    NamespaceView, PLACEABLE_NAMESPACES, WorkspaceView, decided_on, labels_of, metadata_only,
    parse_selector, path_of, without_last_applied,
};
use crate::imports;
use crate::schedule::{ClusterView, Mode, PolicyView};

pub use report::{CONDITION_DRAINED, CONDITION_PLACED};
pub(crate) use views::dynamic;

/// How long a touched key waits for the changes that come with it (an apply of many
/// objects of one namespace makes one reconcile).
const DEBOUNCE: Duration = Duration::from_millis(50);
/// How long a Cluster's or Placement's report waits for the namespaces changing with it
/// (a drain moves many): one status write for a burst.
const REPORT_DELAY: Duration = Duration::from_millis(500);
/// While traffic shifts, the namespace is looked at this often, so each step comes on time.
const SHIFT_TICK: Duration = Duration::from_millis(250);
/// The soonest a heartbeat's expiry is looked at again (a lease due to run out now is not
/// looked at in a tight loop).
const EXPIRY_CHECK_MIN: Duration = Duration::from_millis(100);
/// Namespaces that move off draining clusters at once.
const MAX_DRAIN_MOVES: usize = 2;
/// The `Cluster` condition by which the MCS controller says it admitted the cluster.
const MCS_MEMBER: &str = "MCSMember";

/// Why the controllers stopped before they were told to.
#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    #[error("the stop signal's sender is gone")]
    Orphaned,
    #[error("the control plane's client: {0}")]
    Client(#[from] sluice_kube::ClientError),
}

/// What placement reconciles.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    /// Which syncers' heartbeats are current.
    Heartbeats,
    /// A watch re-listed: objects deleted meanwhile got no event of their own.
    Resync,
    Cluster(ClusterName),
    Placement(LogicalClusterPath, String),
    /// The logical cluster a Workspace makes (its policy bounds it and those below it).
    Workspace(LogicalClusterPath),
    Namespace(NsKey),
}

struct Watched {
    namespaces: Views<NamespaceView>,
    placements: Informer<DynamicObject>,
    clusters: Informer<DynamicObject>,
    leases: Informer<Lease>,
    /// The kinds placement decides on ([`decided_on`]).
    kinds: Vec<(&'static SyncedKind, ApiResource, Informer<DynamicObject>)>,
    /// The Pods and claims the syncers mirrored up, by kind.
    mirrors: Vec<(ApiResource, Informer<DynamicObject>)>,
    /// Workspaces: their policies bound where their namespaces run and how much they use.
    workspaces: Views<WorkspaceView>,
}

type Objects<'a> = Vec<(&'static SyncedKind, &'a ApiResource, Arc<DynamicObject>)>;

impl Watched {
    async fn ready(&self) -> bool {
        if self.namespaces.store.wait_until_ready().await.is_err()
            || self.workspaces.store.wait_until_ready().await.is_err()
        {
            return false;
        }
        let mut stores = vec![
            self.placements.store.wait_until_ready(),
            self.clusters.store.wait_until_ready(),
        ];
        stores.extend(self.mirrors.iter().map(|(_, i)| i.store.wait_until_ready()));
        stores.extend(
            self.kinds
                .iter()
                .map(|(_, _, i)| i.store.wait_until_ready()),
        );
        for s in stores {
            if s.await.is_err() {
                return false;
            }
        }
        self.leases.store.wait_until_ready().await.is_ok()
    }

    /// The objects placement decides on in namespace `key`.
    fn objects_of(&self, key: &NsKey) -> Objects<'_> {
        let (path, ns) = key;
        let mut objs = Vec::new();
        for (k, ar, inf) in &self.kinds {
            let mut of_kind = inf.store.in_namespace(path.as_str(), ns);
            of_kind.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
            objs.extend(of_kind.into_iter().map(|o| (*k, ar, o)));
        }
        objs
    }

    /// The Placements of logical cluster `path`, oldest first.
    fn policies_of(&self, path: &LogicalClusterPath) -> Vec<(Arc<DynamicObject>, PolicyView)> {
        let mut ps: Vec<_> = self
            .placements
            .store
            .in_namespace(path.as_str(), "")
            .into_iter()
            .map(|p| {
                let v = policy_view(&p);
                (p, v)
            })
            .collect();
        ps.sort_by(|(a, _), (b, _)| {
            a.metadata
                .creation_timestamp
                .cmp(&b.metadata.creation_timestamp)
                .then(a.metadata.name.cmp(&b.metadata.name))
        });
        ps
    }

    /// The namespaces of logical cluster `path`.
    fn namespaces_of(&self, path: &LogicalClusterPath) -> Vec<NsKey> {
        self.namespaces
            .store
            .in_namespace(path.as_str(), "")
            .iter()
            .map(|n| (path.clone(), n.name.clone()))
            .collect()
    }

    /// The heartbeat of `cluster`'s syncer is current.
    fn heartbeat_current(&self, cluster: &ClusterName) -> bool {
        self.leases
            .get(SYNCER_LEASE_NAMESPACE, &syncer_lease_name(cluster))
            .is_some_and(|l| {
                !sluice_kube::lease::is_expired(&l, k8s_openapi::jiff::Timestamp::now())
            })
    }

    /// The root's Clusters.
    fn cluster_objects(&self) -> Vec<Arc<DynamicObject>> {
        let mut cs: Vec<_> = self
            .clusters
            .state()
            .into_iter()
            .filter(|c| path_of(c).is_none_or(|p| p == LogicalClusterPath::root()))
            .collect();
        cs.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        cs
    }
}

/// A Placement as the decisions read it.
fn policy_view(p: &DynamicObject) -> PolicyView {
    let spec = &p.data["spec"];
    PolicyView {
        name: p.metadata.name.clone().unwrap_or_default(),
        namespaces: parse_selector(&spec["namespaceSelector"]),
        clusters: parse_selector(&spec["locationSelector"]),
        // Admission refuses any value but these two (control/src/admission/sluice_kinds.rs).
        mode: if spec["mode"] == "Spread" {
            Mode::Spread
        } else {
            Mode::Single
        },
        traffic_shift: serde_json::from_value(spec["trafficShift"].clone()).unwrap_or_default(),
    }
}

/// The clusters as every decision of one reconcile reads them.
struct Snapshot {
    objects: Vec<Arc<DynamicObject>>,
    views: Vec<ClusterView>,
    /// The clusters that import Services: a move waits until each of them sees the new
    /// cluster's endpoints.
    members: Vec<imports::Member>,
}

impl Snapshot {
    fn read(w: &Watched, ledger: &Ledger) -> Self {
        let objects = w.cluster_objects();
        let views = objects
            .iter()
            .filter_map(|c| cluster_view(w, ledger, c))
            .collect();
        let members = objects
            .iter()
            .filter_map(|c| {
                let name = ClusterName::new(c.metadata.name.clone()?);
                (is_member(c) && w.heartbeat_current(&name)).then(|| imports::Member {
                    id: cluster_id(c, &name),
                    name,
                })
            })
            .collect();
        Self {
            objects,
            views,
            members,
        }
    }

    fn ready(&self, cluster: &ClusterName) -> bool {
        self.views.iter().any(|c| &c.name == cluster && c.ready)
    }
}

fn cluster_view(w: &Watched, ledger: &Ledger, c: &DynamicObject) -> Option<ClusterView> {
    let name = ClusterName::new(c.metadata.name.clone()?);
    let spec = &c.data["spec"];
    Some(ClusterView {
        ready: w.heartbeat_current(&name),
        unschedulable: spec["unschedulable"].as_bool().unwrap_or(false),
        draining: spec["drain"].as_bool().unwrap_or(false),
        load: ledger.load(&name),
        capacity: Limits::from_json(&spec["capacity"]),
        used: Resources::default(),
        allowed: true,
        quotas: Vec::new(),
        labels: labels_of(c),
        name,
    })
}

/// The MCS controller admitted the cluster.
fn is_member(c: &DynamicObject) -> bool {
    c.data["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == MCS_MEMBER && c["status"] == "True")
    })
}

fn cluster_id(c: &DynamicObject, name: &ClusterName) -> String {
    c.data["spec"]["clusterId"]
        .as_str()
        .filter(|id| !id.is_empty())
        .unwrap_or(name.as_str())
        .to_string()
}

/// What placement's decisions read of a Cluster: a change to any of it touches the
/// namespaces the cluster can affect.
#[derive(PartialEq)]
struct ClusterFacts {
    labels: BTreeMap<String, String>,
    spec: Value,
    ready: bool,
    member: bool,
}

/// The placement controllers' state between reconciles.
struct Placer {
    roots: Roots,
    root: kube::Client,
    w: Watched,
    ledger: Ledger,
    queue: Arc<Queue<Key>>,
    /// Each Cluster's facts as last reconciled.
    seen_clusters: BTreeMap<ClusterName, ClusterFacts>,
    /// Each Placement's spec as last reconciled.
    seen_placements: BTreeMap<(LogicalClusterPath, String), Value>,
    /// Each cluster's readiness as last seen.
    beating: BTreeMap<ClusterName, bool>,
}

impl Reconciler for Placer {
    type Key = Key;
    type Error = ReconcileError;

    async fn reconcile(&mut self, key: &Key) -> Result<Action, ReconcileError> {
        match key {
            Key::Namespace(k) => {
                let action = self.reconcile_namespace(k).await;
                self.release_drain_queue();
                action
            }
            Key::Cluster(c) => self.reconcile_cluster(c).await,
            Key::Placement(path, name) => self.reconcile_placement(path, name).await,
            Key::Workspace(path) => {
                self.touch_under(path);
                Ok(Action::AwaitChange)
            }
            Key::Heartbeats => Ok(self.reconcile_heartbeats()),
            Key::Resync => {
                let mut keys: BTreeSet<NsKey> = self.ledger.keys().cloned().collect();
                for n in self.w.namespaces.state() {
                    keys.insert((n.path.clone(), n.name.clone()));
                }
                for k in keys {
                    self.queue.touch(Key::Namespace(k));
                }
                Ok(Action::AwaitChange)
            }
        }
    }
}

impl Placer {
    /// The clusters whose totals changed report them after a while.
    fn report_clusters_later(&self, changed: BTreeSet<ClusterName>) {
        for c in changed {
            self.queue.touch_after(Key::Cluster(c), REPORT_DELAY);
        }
    }

    /// When a drain slot is free, the namespaces waiting for one look again (each that
    /// still finds none queues again; a slot taken ends the release, so this never loops).
    fn release_drain_queue(&mut self) {
        let draining: BTreeSet<ClusterName> = self
            .w
            .cluster_objects()
            .iter()
            .filter(|c| c.data["spec"]["drain"].as_bool().unwrap_or(false))
            .filter_map(|c| c.metadata.name.clone().map(ClusterName::new))
            .collect();
        if self.ledger.moving_off(&draining) >= MAX_DRAIN_MOVES {
            return;
        }
        for k in self.ledger.take_drain_queue() {
            self.queue.touch(Key::Namespace(k));
        }
    }

    /// Touch the namespaces of logical cluster `path` and of every one below it.
    fn touch_under(&self, path: &LogicalClusterPath) {
        let mut todo = vec![path.clone()];
        while let Some(p) = todo.pop() {
            for k in self.w.namespaces_of(&p) {
                self.queue.touch(Key::Namespace(k));
            }
            for ws in self.w.workspaces.store.in_namespace(p.as_str(), "") {
                if let Ok(child) = p.child(&ws.name) {
                    todo.push(child);
                }
            }
        }
    }

    async fn reconcile_cluster(&mut self, name: &ClusterName) -> Result<Action, ReconcileError> {
        let snapshot = Snapshot::read(&self.w, &self.ledger);
        let found = snapshot
            .objects
            .iter()
            .zip(&snapshot.views)
            .find(|(_, v)| &v.name == name);
        let facts = found.map(|(o, v)| ClusterFacts {
            labels: v.labels.clone(),
            spec: o.data["spec"].clone(),
            ready: v.ready,
            member: is_member(o),
        });
        let before = self.seen_clusters.get(name);
        if before != facts.as_ref() {
            let lost = before.is_some_and(|b| b.ready) && !facts.as_ref().is_some_and(|f| f.ready);
            self.touch_affected(name, facts.as_ref(), lost);
            match facts {
                Some(f) => self.seen_clusters.insert(name.clone(), f),
                None => self.seen_clusters.remove(name),
            };
        }
        let Some((o, v)) = found else {
            return Ok(Action::AwaitChange);
        };
        let left: Vec<String> = self
            .ledger
            .on(name)
            .map(|(p, n)| format!("{p}/{n}"))
            .collect();
        if let Some(patch) = report::cluster_status(o, v, &left, self.ledger.allocated(name)) {
            report::write_cluster_status(&self.root, name, patch).await?;
        }
        Ok(Action::AwaitChange)
    }

    /// Touch what a change to cluster `name` (now `facts`) can change: the namespaces on
    /// it, those not at rest, those of logical clusters whose Spread Placements select it,
    /// those holding its Pod and claim mirrors when it was `lost`, and every Placement's status.
    fn touch_affected(&self, name: &ClusterName, facts: Option<&ClusterFacts>, lost: bool) {
        let mut keys: BTreeSet<NsKey> = self.ledger.on(name).cloned().collect();
        keys.extend(self.ledger.unsettled().cloned());
        let mut paths = BTreeSet::new();
        for p in self.w.placements.state() {
            let Some(path) = path_of(&p) else { continue };
            let view = policy_view(&p);
            if let (Some(f), Mode::Spread, Ok(s)) = (facts, view.mode, &view.clusters)
                && s.matches(&f.labels)
            {
                paths.insert(path.clone());
            }
            self.queue
                .touch_after(Key::Placement(path, view.name.clone()), REPORT_DELAY);
        }
        for path in paths {
            keys.extend(self.w.namespaces_of(&path));
        }
        if lost {
            for m in self.w.mirrors.iter().flat_map(|(_, i)| i.state()) {
                if labels_of(&m).get(LABEL_CLUSTER).map(String::as_str) == Some(name.as_str())
                    && let (Some(p), Some(ns)) = (path_of(&m), m.metadata.namespace.clone())
                {
                    keys.insert((p, ns));
                }
            }
        }
        tracing::debug!(cluster = %name, namespaces = keys.len(), "cluster changed");
        for k in keys {
            self.queue.touch(Key::Namespace(k));
        }
    }

    async fn reconcile_placement(
        &mut self,
        path: &LogicalClusterPath,
        name: &str,
    ) -> Result<Action, ReconcileError> {
        let id = (path.clone(), name.to_string());
        let Some(p) = self.w.placements.get_in(path.as_str(), "", name) else {
            if self.seen_placements.remove(&id).is_some() {
                self.touch_under_only(path);
            }
            return Ok(Action::AwaitChange);
        };
        if self.seen_placements.get(&id) != Some(&p.data["spec"]) {
            self.touch_under_only(path);
            self.seen_placements.insert(id, p.data["spec"].clone());
        }
        let snapshot = Snapshot::read(&self.w, &self.ledger);
        if let Some(want) =
            report::placement_status(&p.data["status"], &policy_view(&p), &snapshot.views)
        {
            let client = self
                .roots
                .at(&format!("/clusters/{path}"))
                .map_err(|e| ReconcileError::Client(path.clone(), e))?;
            report::write_placement_status(client, name, want).await?;
        }
        Ok(Action::AwaitChange)
    }

    /// Touch the namespaces of logical cluster `path` (a Placement binds only its own).
    fn touch_under_only(&self, path: &LogicalClusterPath) {
        for k in self.w.namespaces_of(path) {
            self.queue.touch(Key::Namespace(k));
        }
    }

    /// Touch each cluster whose readiness changed; look again when the next current
    /// heartbeat could run out.
    fn reconcile_heartbeats(&mut self) -> Action {
        for c in self.w.cluster_objects() {
            let Some(name) = c.metadata.name.clone().map(ClusterName::new) else {
                continue;
            };
            let ready = self.w.heartbeat_current(&name);
            if self.beating.insert(name.clone(), ready) != Some(ready) {
                self.queue.touch(Key::Cluster(name));
            }
        }
        match next_expiry(&self.w.leases) {
            Some(d) => Action::Requeue(d),
            None => Action::AwaitChange,
        }
    }
}

/// How long until the next current heartbeat could run out (`None`: none is current).
fn next_expiry(leases: &Informer<Lease>) -> Option<Duration> {
    let now = k8s_openapi::jiff::Timestamp::now();
    leases
        .state()
        .iter()
        .filter_map(|l| sluice_kube::lease::expires_at(l))
        .filter(|t| *t > now)
        .min()
        .map(|t| t.duration_since(now).unsigned_abs().max(EXPIRY_CHECK_MIN))
}

/// An informer callback touching the key of each object an event carries (and `relisted`
/// at the end of a re-list).
fn touching(
    queue: &Arc<Queue<Key>>,
    key_of: fn(&DynamicObject) -> Option<Key>,
    relisted: Option<Key>,
) -> impl Fn(&watcher::Event<DynamicObject>) + Send + 'static {
    let queue = queue.clone();
    move |e| match e {
        watcher::Event::Apply(o) | watcher::Event::Delete(o) | watcher::Event::InitApply(o) => {
            if let Some(k) = key_of(o) {
                queue.touch(k);
            }
        }
        watcher::Event::InitDone => {
            if let Some(k) = &relisted {
                queue.touch(k.clone());
            }
        }
        watcher::Event::Init => {}
    }
}

fn namespace_key(o: &DynamicObject) -> Option<Key> {
    Some(Key::Namespace((path_of(o)?, o.metadata.name.clone()?)))
}

fn owning_namespace_key(o: &DynamicObject) -> Option<Key> {
    Some(Key::Namespace((path_of(o)?, o.metadata.namespace.clone()?)))
}

fn placement_key(o: &DynamicObject) -> Option<Key> {
    Some(Key::Placement(path_of(o)?, o.metadata.name.clone()?))
}

fn workspace_key(o: &DynamicObject) -> Option<Key> {
    let parent = path_of(o)?;
    Some(Key::Workspace(
        parent.child(o.metadata.name.as_deref()?).ok()?,
    ))
}

fn cluster_key(o: &DynamicObject) -> Option<Key> {
    if path_of(o).is_some_and(|p| p != LogicalClusterPath::root()) {
        return None;
    }
    Some(Key::Cluster(ClusterName::new(o.metadata.name.clone()?)))
}

/// Run the placement controllers against the control plane `config` points at (any URL of
/// it) until `stop` turns true.
pub async fn run(
    config: kube::Config,
    mut stop: watch::Receiver<bool>,
    metrics: ControllerMetrics,
) -> Result<(), PlacementError> {
    let roots = Roots::new(config, "/clusters/");
    let wildcard = roots.at("/clusters/*")?;
    let root = roots.at(&format!("/clusters/{}", LogicalClusterPath::root()))?;
    let queue: Arc<Queue<Key>> = Arc::new(Queue::new(DEBOUNCE));
    let start = |ar: ApiResource,
                 what: &str,
                 selector: Option<&str>,
                 trim: fn(&mut DynamicObject),
                 key_of: fn(&DynamicObject) -> Option<Key>,
                 relisted: Option<Key>| {
        let mut watch = watcher::Config::default();
        if let Some(s) = selector {
            watch = watch.labels(s);
        }
        Informer::start_across_trimmed(
            Api::all_with(wildcard.clone(), &ar),
            watch,
            what,
            LOGICAL_CLUSTER_ANNOTATION,
            trim,
            touching(&queue, key_of, relisted),
        )
    };
    let w = Watched {
        mirrors: [
            ("Pod", "pods", "mirrored pods"),
            (
                "PersistentVolumeClaim",
                "persistentvolumeclaims",
                "mirrored persistentvolumeclaims",
            ),
        ]
        .into_iter()
        .map(|(kind, plural, what)| {
            let ar = dynamic("", "v1", kind, plural);
            let informer = start(
                ar.clone(),
                what,
                Some(LABEL_CLUSTER),
                metadata_only,
                owning_namespace_key,
                None,
            );
            (ar, informer)
        })
        .collect(),
        namespaces: Views::start_across(
            Api::all_with(
                wildcard.clone(),
                &dynamic("", "v1", "Namespace", "namespaces"),
            ),
            watcher::Config::default().labels(&PLACEABLE_NAMESPACES),
            "namespaces",
            LOGICAL_CLUSTER_ANNOTATION,
            NamespaceView::of,
            touching(&queue, namespace_key, Some(Key::Resync)),
        ),
        workspaces: Views::start_across(
            Api::all_with(
                wildcard.clone(),
                &dynamic("sluice.dev", "v1alpha1", "Workspace", "workspaces"),
            ),
            watcher::Config::default(),
            "workspaces",
            LOGICAL_CLUSTER_ANNOTATION,
            WorkspaceView::of,
            touching(&queue, workspace_key, None),
        ),
        placements: start(
            dynamic("sluice.dev", "v1alpha1", "Placement", "placements"),
            "placements",
            None,
            without_last_applied,
            placement_key,
            None,
        ),
        clusters: Informer::start_typed(
            Api::all_with(
                root.clone(),
                &dynamic("sluice.dev", "v1alpha1", "Cluster", "clusters"),
            ),
            watcher::Config::default(),
            "clusters",
            touching(&queue, cluster_key, None),
        ),
        leases: {
            let queue = queue.clone();
            Informer::start_with(
                Api::namespaced(root.clone(), SYNCER_LEASE_NAMESPACE),
                watcher::Config::default(),
                "leases",
                move |_| queue.touch(Key::Heartbeats),
            )
        },
        kinds: BUILTIN
            .iter()
            .filter(|k| decided_on(k))
            .map(|k| {
                let ar = dynamic(k.group, k.version, k.kind, k.plural);
                let informer = start(
                    ar.clone(),
                    k.plural,
                    k.upstream_selector(),
                    without_last_applied,
                    owning_namespace_key,
                    Some(Key::Resync),
                );
                (k, ar, informer)
            })
            .collect(),
    };
    // Nothing is decided on half a picture: every store has its first list first.
    tokio::select! {
        ready = w.ready() => {
            if !ready {
                return Ok(());
            }
        }
        r = stop.wait_for(|s| *s) => {
            return r.map(|_| ()).map_err(|_| PlacementError::Orphaned);
        }
    }
    let mut ledger = Ledger::default();
    for ns in w.namespaces.state() {
        let key = (ns.path.clone(), ns.name.clone());
        let objs = w.objects_of(&key);
        let values: Vec<(&str, Value)> = objs
            .iter()
            .filter(|(k, _, _)| crate::demand::runs_pods(k.kind))
            .map(|(k, _, o)| (k.kind, serde_json::to_value(&**o).unwrap_or(Value::Null)))
            .collect();
        let placed = ns
            .placed()
            .into_iter()
            .map(|c| {
                let d = crate::demand::demand(values.iter().map(|(k, v)| (*k, v)), Some(&c));
                (c, d)
            })
            .collect();
        ledger.set(&key, placed);
    }
    queue.touch(Key::Heartbeats);
    let mut placer = Placer {
        roots,
        root,
        w,
        ledger,
        queue: queue.clone(),
        seen_clusters: BTreeMap::new(),
        seen_placements: BTreeMap::new(),
        beating: BTreeMap::new(),
    };
    Controller::new("placement", queue, metrics)
        .run(&mut placer, stop)
        .await
        .map_err(|_| PlacementError::Orphaned)
}
