//! The placement loop: informers over every logical cluster (namespaces, Placements, the
//! root's Clusters and syncer Leases, the workloads and Services it decides on) and a pass
//! after any event that steps each namespace toward its target ([`crate::schedule`]),
//! splits workloads' replicas over a spread namespace's clusters, sums workload status
//! from the clusters' reports ([`crate::status`]), and reports on namespaces (a `Placed`
//! condition and Events), Placements and Clusters. It writes only what differs. The state
//! labels of a namespace's objects follow its own in the API server, which owns them: this
//! loop never reads the objects it does not decide on.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use sluice_api::liveness::{SYNCER_LEASE_NAMESPACE, syncer_lease_name};
use sluice_api::sluice::TrafficShift;
use sluice_api::sync::{
    LABEL_CLUSTER, REPLICAS_ANNOTATION_PREFIX, SOFT_FINALIZER_PREFIX, STATE_SYNC,
    SYNC_FINALIZER_PREFIX, draining_annotation, placed_clusters, replicas_annotation,
    shift_annotation, state_label, weight_annotation,
};
use sluice_api::synced_kinds::{BUILTIN, SyncedKind};
use sluice_api::{ClusterName, LOGICAL_CLUSTER_ANNOTATION, LogicalClusterPath};
use sluice_kube::resources::{Limits, Resources};
use sluice_kube::roots::LazyClient;
use sluice_kube::selector::Selector;
use sluice_kube::{Informer, Roots};
use tokio::sync::{Notify, watch};

use crate::imports;
use crate::metrics::{PlacementMetrics, Trigger};
use crate::rollback;
use crate::schedule::{self, ClusterView, Mode, Phase, PolicyView, Target};
use crate::shift;
use crate::status;
use crate::tenancy;

/// After a failed write, the pass runs again this much later.
const RETRY: Duration = Duration::from_secs(1);
/// The soonest a heartbeat's expiry is looked at again (a lease due to run out now is
/// not looked at in a tight loop).
const EXPIRY_CHECK_MIN: Duration = Duration::from_millis(100);
/// How long a pass waits after a change for the changes that come with it.
const COALESCE: Duration = Duration::from_millis(50);
/// While traffic shifts, a pass runs this often, so each step of a shift comes on time.
const SHIFT_TICK: Duration = Duration::from_millis(250);
/// The `Cluster` condition by which the MCS controller says it admitted the cluster.
const MCS_MEMBER: &str = "MCSMember";
/// The namespace condition placement owns.
pub const CONDITION_PLACED: &str = "Placed";
/// Namespace condition: how the traffic to the clusters a namespace last left ended.
pub const CONDITION_DRAINED: &str = "Drained";
/// Namespace annotation recording that condition (written with the placement itself, so it
/// survives a status write from a stale snapshot).
const DRAINED_ANNOTATION: &str = "drained.sluice.dev/last";
/// Namespace annotation: a pass placed the namespace with its workloads counted (some pods
/// of demand) and they fitted. Only such a namespace is established where it is: one that
/// was placed while empty and then grew beyond every cluster's room is taken off again,
/// whatever its syncer has already reported on it (a report comes within milliseconds of
/// the placement, so it cannot tell "running" from "just placed").
const ADMITTED_ANNOTATION: &str = "capacity.sluice.dev/admitted";
/// Namespaces that are never placed: each cluster has its own.
const SYSTEM_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];
/// The label selector of the namespaces placement watches: not the system ones, which
/// every logical cluster has (by the label kube keeps equal to a namespace's name).
static PLACEABLE_NAMESPACES: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "kubernetes.io/metadata.name notin ({})",
        SYSTEM_NAMESPACES.join(",")
    )
});
/// Namespaces that move off draining clusters at once.
const MAX_DRAIN_MOVES: usize = 2;
/// The field manager of placement's writes.
const MANAGER: &str = sluice_api::sync::PLACEMENT_MANAGER;

/// Why the controllers stopped before they were told to.
#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    #[error("the stop signal's sender is gone")]
    Orphaned,
    #[error("the control plane's client: {0}")]
    Client(#[from] sluice_kube::ClientError),
}

/// The `ApiResource` of a kind known by name.
pub(crate) fn dynamic(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: if group.is_empty() {
            version.into()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.into(),
        plural: plural.into(),
    }
}

struct Watched {
    namespaces: Informer<DynamicObject>,
    placements: Informer<DynamicObject>,
    clusters: Informer<DynamicObject>,
    leases: Informer<Lease>,
    /// The kinds placement decides on ([`decided_on`]).
    kinds: Vec<(&'static SyncedKind, ApiResource, Informer<DynamicObject>)>,
    /// The Pods the syncers mirrored up.
    mirrors: Informer<DynamicObject>,
    /// Workspaces: their policies bound where their namespaces run and how much they use.
    workspaces: Informer<DynamicObject>,
}

impl Watched {
    fn ready(&self) -> bool {
        self.namespaces.is_ready()
            && self.placements.is_ready()
            && self.clusters.is_ready()
            && self.leases.is_ready()
            && self.kinds.iter().all(|(_, _, i)| i.is_ready())
            && self.mirrors.is_ready()
            && self.workspaces.is_ready()
    }
}

/// Run the placement controllers against the control plane `config` points at (any URL of
/// it) until `stop` turns true.
pub async fn run(
    config: kube::Config,
    mut stop: watch::Receiver<bool>,
    metrics: PlacementMetrics,
) -> Result<(), PlacementError> {
    let roots = Roots::new(config, "/clusters/");
    let wildcard = roots.at("/clusters/*")?;
    let root = roots.at(&format!("/clusters/{}", LogicalClusterPath::root()))?;
    let changed = Arc::new(Notify::new());
    // Syncers renew their leases every few seconds: a renewal alone changes nothing placed,
    // so lease events only wake the loop to see whether a cluster's readiness changed.
    let heartbeat = Arc::new(Notify::new());
    let start_trimmed =
        |ar: ApiResource, what: &str, selector: Option<&str>, trim: fn(&mut DynamicObject)| {
            let notify = changed.clone();
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
                move |_| notify.notify_one(),
            )
        };
    let start_selected = |ar: ApiResource, what: &str, selector: Option<&str>| {
        start_trimmed(ar, what, selector, without_last_applied)
    };
    let start = |ar: ApiResource, what: &str| start_selected(ar, what, None);
    let w = Watched {
        mirrors: start_trimmed(
            dynamic("", "v1", "Pod", "pods"),
            "mirrored pods",
            Some(LABEL_CLUSTER),
            metadata_only,
        ),
        namespaces: start_trimmed(
            dynamic("", "v1", "Namespace", "namespaces"),
            "namespaces",
            Some(&PLACEABLE_NAMESPACES),
            namespace_view,
        ),
        workspaces: start_trimmed(
            dynamic("sluice.dev", "v1alpha1", "Workspace", "workspaces"),
            "workspaces",
            None,
            workspace_view,
        ),
        placements: start(
            dynamic("sluice.dev", "v1alpha1", "Placement", "placements"),
            "placements",
        ),
        clusters: {
            let notify = changed.clone();
            let ar = dynamic("sluice.dev", "v1alpha1", "Cluster", "clusters");
            Informer::start_typed(
                Api::all_with(root.clone(), &ar),
                watcher::Config::default(),
                "clusters",
                move |_| notify.notify_one(),
            )
        },
        leases: Informer::start(
            Api::namespaced(root.clone(), SYNCER_LEASE_NAMESPACE),
            watcher::Config::default(),
            heartbeat.clone(),
            "leases",
        ),
        kinds: BUILTIN
            .iter()
            .filter(|k| decided_on(k))
            .map(|k| {
                let ar = dynamic(k.group, k.version, k.kind, k.plural);
                (
                    k,
                    ar.clone(),
                    start_selected(ar.clone(), k.plural, k.upstream_selector()),
                )
            })
            .collect(),
    };
    let (mut retry, mut shifting) = (false, false);
    // The clusters whose heartbeat was current at the last pass.
    let mut beating: Option<BTreeSet<String>> = None;
    loop {
        // With nothing failed and nothing shifting, the loop sleeps until an event or the
        // next heartbeat that could run out: an idle fleet costs no pass.
        let (wait, timed) = if retry {
            (Some(RETRY), Trigger::Retry)
        } else if shifting {
            (Some(SHIFT_TICK), Trigger::Shift)
        } else {
            (next_expiry(&w.leases), Trigger::Heartbeat)
        };
        let timer = async {
            match wait {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        let trigger = tokio::select! {
            r = stop.changed() => {
                if r.is_err() {
                    return Err(PlacementError::Orphaned);
                }
                if *stop.borrow() {
                    return Ok(());
                }
                continue;
            }
            _ = changed.notified() => {
                // A burst of changes (an apply of many objects) makes one pass, not one
                // pass per event: each pass reads every watched object.
                tokio::time::sleep(COALESCE).await;
                Trigger::Change
            }
            _ = heartbeat.notified() => Trigger::Heartbeat,
            _ = timer => timed,
        };
        if trigger == Trigger::Heartbeat
            && w.leases.is_ready()
            && beating.as_ref() == Some(&current_heartbeats(&w.leases))
        {
            metrics.quiet_wakes.inc();
            continue;
        }
        if !w.ready() {
            continue;
        }
        let seen = current_heartbeats(&w.leases);
        let span = tracing::debug_span!(
            "placement pass",
            ?trigger,
            namespaces = tracing::field::Empty
        );
        let started = std::time::Instant::now();
        let (ok, shifts, decided) =
            tracing::Instrument::instrument(pass(&roots, &root, &w), span).await;
        metrics.pass(trigger);
        metrics
            .pass_seconds
            .observe(started.elapsed().as_secs_f64());
        metrics.namespaces.inc_by(decided as u64);
        beating = Some(seen);
        retry = !ok;
        shifting = shifts;
    }
}

/// The clusters (by lease name) whose syncer heartbeat is current now.
fn current_heartbeats(leases: &Informer<Lease>) -> BTreeSet<String> {
    let now = k8s_openapi::jiff::Timestamp::now();
    leases
        .state()
        .iter()
        .filter(|l| !sluice_kube::lease::is_expired(l, now))
        .filter_map(|l| l.metadata.name.clone())
        .collect()
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
        .map(|t| {
            let left = t.duration_since(now).unsigned_abs();
            left.max(EXPIRY_CHECK_MIN)
        })
}

/// The kinds placement reads: workloads (their demand, readiness and status) and Services
/// (the endpoints a move waits for). The other kinds that travel follow their namespace in
/// the API server; a Secret never reaches placement's memory.
fn decided_on(kind: &SyncedKind) -> bool {
    crate::demand::runs_pods(kind.kind) || (kind.group.is_empty() && kind.kind == "Service")
}

/// What placement never reads and costs the most to keep: kubectl's copy of what was
/// applied (as large as the object) and the field managers' sets (`managedFields`, a JSON
/// tree per manager; most of a small object's metadata).
fn without_last_applied(o: &mut DynamicObject) {
    if let Some(a) = o.metadata.annotations.as_mut() {
        a.remove(sluice_api::sync::LAST_APPLIED_ANNOTATION);
    }
    o.metadata.managed_fields = None;
}

/// What placement reads of a namespace: its metadata and conditions, not its spec (the
/// `kubernetes` finalizer) nor its phase.
fn namespace_view(o: &mut DynamicObject) {
    without_last_applied(o);
    if let Some(data) = o.data.as_object_mut() {
        data.remove("spec");
        if let Some(status) = data.get_mut("status").and_then(Value::as_object_mut) {
            status.remove("phase");
        }
    }
}

/// What placement reads of a Workspace: its policy (`spec`), under its logical cluster.
fn workspace_view(o: &mut DynamicObject) {
    without_last_applied(o);
    if let Some(data) = o.data.as_object_mut() {
        data.retain(|k, _| k == "spec");
    }
    if let Some(a) = o.metadata.annotations.as_mut() {
        a.retain(|k, _| k == LOGICAL_CLUSTER_ANNOTATION);
    }
}

fn metadata_only(o: &mut DynamicObject) {
    without_last_applied(o);
    o.data = Value::Object(serde_json::Map::new());
}

fn path_of(o: &DynamicObject) -> Option<LogicalClusterPath> {
    o.metadata
        .annotations
        .as_ref()?
        .get(LOGICAL_CLUSTER_ANNOTATION)?
        .parse()
        .ok()
}

fn labels_of(o: &DynamicObject) -> BTreeMap<String, String> {
    o.metadata.labels.clone().unwrap_or_default()
}

fn parse_selector(v: &Value) -> Result<Selector, sluice_kube::selector::SelectorError> {
    if v.is_null() {
        return Ok(Selector::default());
    }
    match serde_json::from_value(v.clone()) {
        Ok(s) => Selector::parse(&s),
        Err(e) => Err(sluice_kube::selector::SelectorError::Operator(
            0,
            format!("unreadable selector: {e}"),
        )),
    }
}

/// The heartbeat of `cluster`'s syncer is current.
fn heartbeat_current(leases: &Informer<Lease>, cluster: &ClusterName) -> bool {
    leases
        .get(SYNCER_LEASE_NAMESPACE, &syncer_lease_name(cluster))
        .is_some_and(|l| !sluice_kube::lease::is_expired(&l, k8s_openapi::jiff::Timestamp::now()))
}

/// One pass: false if a write failed; true if traffic is shifting somewhere; how many
/// namespaces it decided.
async fn pass(roots: &Roots, root: &kube::Client, w: &Watched) -> (bool, bool, usize) {
    let mut ok = true;
    let mut shifting = false;
    let namespaces = w.namespaces.state();
    // The clusters, with how many namespaces each runs.
    let mut load: BTreeMap<ClusterName, usize> = BTreeMap::new();
    for ns in &namespaces {
        for c in placed_clusters(ns.metadata.labels.iter().flatten()) {
            *load.entry(c).or_default() += 1;
        }
    }
    let cluster_objects: Vec<Arc<DynamicObject>> = w
        .clusters
        .state()
        .into_iter()
        .filter(|c| path_of(c).is_none_or(|p| p == LogicalClusterPath::root()))
        .collect();
    let clusters: Vec<ClusterView> = cluster_objects
        .iter()
        .filter_map(|c| {
            let name = ClusterName::new(c.metadata.name.clone()?);
            let spec = &c.data["spec"];
            Some(ClusterView {
                ready: heartbeat_current(&w.leases, &name),
                unschedulable: spec["unschedulable"].as_bool().unwrap_or(false),
                draining: spec["drain"].as_bool().unwrap_or(false),
                load: load.get(&name).copied().unwrap_or(0),
                capacity: Limits::from_json(&spec["capacity"]),
                used: Resources::default(),
                allowed: true,
                quotas: Vec::new(),
                labels: labels_of(c),
                name,
            })
        })
        .collect();
    // The clusters that import Services: a move waits until each of them sees the new
    // cluster's endpoints.
    let members: Vec<imports::Member> = cluster_objects
        .iter()
        .filter_map(|c| {
            let name = ClusterName::new(c.metadata.name.clone()?);
            let admitted = c.data["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == MCS_MEMBER && c["status"] == "True")
            });
            if !admitted || !heartbeat_current(&w.leases, &name) {
                return None;
            }
            let id = c.data["spec"]["clusterId"]
                .as_str()
                .filter(|id| !id.is_empty())
                .unwrap_or(name.as_str())
                .to_string();
            Some(imports::Member { name, id })
        })
        .collect();

    // Placements by logical cluster, oldest first.
    let mut placements: BTreeMap<LogicalClusterPath, Vec<(Arc<DynamicObject>, PolicyView)>> =
        BTreeMap::new();
    for p in w.placements.state() {
        let Some(path) = path_of(&p) else { continue };
        let spec = &p.data["spec"];
        let view = PolicyView {
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
        };
        placements.entry(path).or_default().push((p, view));
    }
    for ps in placements.values_mut() {
        ps.sort_by(|(a, _), (b, _)| {
            a.metadata
                .creation_timestamp
                .cmp(&b.metadata.creation_timestamp)
                .then(a.metadata.name.cmp(&b.metadata.name))
        });
    }

    // Every object that travels, by (logical cluster, namespace).
    type Objects<'a> = Vec<(&'static SyncedKind, &'a ApiResource, Arc<DynamicObject>)>;
    let mut objects: BTreeMap<(LogicalClusterPath, String), Objects<'_>> = BTreeMap::new();
    for (k, ar, inf) in &w.kinds {
        for o in inf.state() {
            if let (Some(path), Some(ns)) = (path_of(&o), o.metadata.namespace.clone()) {
                objects.entry((path, ns)).or_default().push((*k, ar, o));
            }
        }
    }

    // Draining clusters give up a bounded number of namespaces at a time.
    let draining: BTreeSet<ClusterName> = clusters
        .iter()
        .filter(|c| c.draining)
        .map(|c| c.name.clone())
        .collect();
    let moving_off = namespaces
        .iter()
        .filter(|ns| {
            let on = placed_clusters(ns.metadata.labels.iter().flatten());
            on.len() > 1 && on.iter().any(|c| draining.contains(c))
        })
        .count();
    let mut drain_slots = MAX_DRAIN_MOVES.saturating_sub(moving_off);
    let mut placed_on: BTreeMap<ClusterName, Vec<String>> = BTreeMap::new();

    // What each cluster's namespaces request. Only the workloads are read as JSON for the
    // whole pass; a namespace's other objects are read when its turn comes, so a pass never
    // holds a second copy of every object.
    let workloads: BTreeMap<(LogicalClusterPath, String), Vec<(&'static str, Value)>> = objects
        .iter()
        .map(|(key, objs)| {
            let vs = objs
                .iter()
                .filter(|(k, _, _)| crate::demand::runs_pods(k.kind))
                .map(|(k, _, o)| (k.kind, serde_json::to_value(&**o).unwrap_or(Value::Null)))
                .collect();
            (key.clone(), vs)
        })
        .collect();
    let demand_of = |key: &(LogicalClusterPath, String), on: Option<&ClusterName>| {
        let vs = workloads.get(key).map(Vec::as_slice).unwrap_or(&[]);
        crate::demand::demand(vs.iter().map(|(k, v)| (*k, v)), on)
    };
    let mut allocated: BTreeMap<ClusterName, Resources> = BTreeMap::new();
    let mut usage = tenancy::WorkspaceUsage::default();
    for ns in &namespaces {
        let (Some(path), Some(name)) = (path_of(ns), ns.metadata.name.clone()) else {
            continue;
        };
        for c in placed_clusters(ns.metadata.labels.iter().flatten()) {
            let d = demand_of(&(path.clone(), name.clone()), Some(&c));
            usage.add(&path, &c, d);
            let a = allocated.entry(c).or_default();
            *a = *a + d;
        }
    }
    // Each logical cluster's policy, read once a pass.
    let own_policy = |parent: &LogicalClusterPath, name: &str| {
        w.workspaces
            .get_in(parent.as_str(), "", name)
            .and_then(|o| tenancy::policy_of(&o.data))
    };
    let mut policy_of: BTreeMap<LogicalClusterPath, sluice_api::tenancy::EffectivePolicy> =
        BTreeMap::new();

    for ns in &namespaces {
        let (Some(path), Some(name)) = (path_of(ns), ns.metadata.name.clone()) else {
            continue;
        };
        if SYSTEM_NAMESPACES.contains(&name.as_str()) {
            continue;
        }
        // Made when this namespace is written to; most passes write to few.
        let client = match roots.lazy(&format!("/clusters/{path}")) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "no client for the logical cluster");
                ok = false;
                continue;
            }
        };
        let labels = labels_of(ns);
        let current = placed_clusters(labels.iter());
        let policies: Vec<PolicyView> = placements
            .get(&path)
            .map(|ps| ps.iter().map(|(_, v)| v.clone()).collect())
            .unwrap_or_default();
        let key = (path.clone(), name.clone());
        let full = demand_of(&key, None);
        let policy = policy_of
            .entry(path.clone())
            .or_insert_with(|| tenancy::effective(&path, &own_policy))
            .clone();
        // The clusters as this namespace sees them: what the others use, and what its
        // workspace may use.
        let views: Vec<ClusterView> = clusters
            .iter()
            .map(|c| {
                let mut v = c.clone();
                let mine = if current.contains(&c.name) {
                    demand_of(&key, Some(&c.name))
                } else {
                    Resources::default()
                };
                v.used = allocated.get(&c.name).copied().unwrap_or_default() - mine;
                v.allowed = tenancy::cluster_allowed(&policy, &c.labels);
                v.quotas = usage.quotas(&policy, &c.name, mine);
                v
            })
            .collect();
        // Its workloads run where it is: it was admitted with them counted.
        let admitted = ns
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(ADMITTED_ANNOTATION));
        // Also established: what asks for no pod (nothing to start), and what already runs
        // on several clusters (spread or spilled, as placed before admission was recorded).
        let established =
            !current.is_empty() && (admitted || full.pods == 0.0 || current.len() > 1);
        let terminating = ns.metadata.deletion_timestamp.is_some();
        let target = if terminating {
            // A namespace being deleted stays where it is while its contents go.
            Target::On {
                clusters: current.clone(),
                mode: Mode::Single,
            }
        } else {
            let vs = workloads.get(&key).map(Vec::as_slice).unwrap_or(&[]);
            let mine = crate::demand::workloads(vs.iter().map(|(k, v)| (*k, v)));
            match schedule::target(
                &labels,
                &current,
                &views,
                &policies,
                &full,
                &mine,
                established,
            ) {
                Target::On { clusters: to, .. }
                    if current.len() == 1 && draining.contains(&current[0]) && to != current =>
                {
                    if drain_slots == 0 {
                        Target::Pending(schedule::Pending::DrainQueued(current[0].clone()))
                    } else {
                        drain_slots -= 1;
                        Target::On {
                            clusters: to,
                            mode: Mode::Single,
                        }
                    }
                }
                t => t,
            }
        };
        let empty = Vec::new();
        let objs = objects.get(&(path.clone(), name.clone())).unwrap_or(&empty);
        let values: Vec<Value> = objs
            .iter()
            .map(|(_, _, o)| serde_json::to_value(&**o).unwrap_or(Value::Null))
            .collect();
        let vs = values.as_slice();
        let no_annotations = BTreeMap::new();
        let ns_annotations = ns.metadata.annotations.as_ref().unwrap_or(&no_annotations);
        // A move that failed stays rolled back while the target is the one it failed for;
        // a new target clears it.
        let verdict = rollback::Verdict::of(ns_annotations);
        let mut clear_verdict = false;
        let (target, rolled_back) = match (verdict, target) {
            (Some(v), Target::On { clusters, mode }) if same_clusters(&clusters, &v.to()) => (
                Target::On {
                    clusters: v.from(),
                    mode,
                },
                Some(v),
            ),
            (Some(_), t) => {
                clear_verdict = true;
                (t, None)
            }
            (None, t) => (t, None),
        };
        let available = |c: &ClusterName| {
            let workloads = objs
                .iter()
                .zip(vs)
                .filter(|((k, _, _), _)| k.reports_status())
                .all(|((k, _, _), v)| status::available_on(k.kind, v, c));
            if !workloads {
                return Err(schedule::NotYet::Workloads);
            }
            let kinds = objs.iter().zip(vs).map(|((k, _, _), v)| (k.kind, v));
            let expected = imports::expected(kinds, c);
            let unseen = imports::unseen_in(&expected, c, &members, ns_annotations);
            if unseen.is_empty() {
                Ok(())
            } else {
                Err(schedule::NotYet::Endpoints(unseen))
            }
        };
        let held: BTreeSet<ClusterName> = ns
            .metadata
            .annotations
            .iter()
            .flatten()
            .filter_map(|(k, _)| k.strip_prefix(SOFT_FINALIZER_PREFIX))
            .map(ClusterName::new)
            .collect();
        let (mut next, mut phase) = schedule::step(&current, &target, available, &held);
        // Traffic leaves a cluster before the cluster goes.
        let wanted: Vec<ClusterName> = match &target {
            Target::On { clusters, .. } => clusters.clone(),
            _ => Vec::new(),
        };
        // A cluster whose syncer is gone cannot be told its weight: it goes at once, as
        // before (its endpoints leave the imports with its lease).
        let leaving: Vec<ClusterName> = current
            .iter()
            .filter(|c| !next.contains(c) && !wanted.contains(c))
            .filter(|c| heartbeat_current(&w.leases, c))
            .cloned()
            .collect();
        let shift_policy = policies
            .iter()
            .find(|p| p.namespaces.as_ref().is_ok_and(|s| s.matches(&labels)))
            .map(|p| p.traffic_shift)
            .unwrap_or_default();
        // A rolled-back move's new clusters answered badly: their traffic goes at once.
        let gate_policy = match rolled_back {
            Some(_) => TrafficShift {
                duration_seconds: Some(0),
                ..shift_policy
            },
            None => shift_policy,
        };
        let gate = shift::gate(
            &current,
            &wanted,
            &leaving,
            ns_annotations,
            &gate_policy,
            k8s_openapi::jiff::Timestamp::now(),
            |c| {
                let r = imports::drain_of(c, &members, ns_annotations);
                tracing::debug!(logical_cluster = %path, namespace = %name, cluster = %c,
                    unconfirmed = ?r.unconfirmed, unreported = ?r.unreported, active = r.active,
                    members = ?members,
                    "drain report");
                r
            },
        );
        let mut gate = gate;
        if !gate.kept.is_empty() {
            for (c, _) in &gate.kept {
                next.push(c.clone());
            }
            next.sort();
            phase = Phase::Shifting(gate.kept.clone());
            shifting = true;
        }
        // While traffic still shifts, the new clusters are judged against the old ones: if
        // they answer worse, the move fails and its traffic shifts back.
        let old: Vec<ClusterName> = gate
            .kept
            .iter()
            .filter(|(_, w)| *w > 0)
            .map(|(c, _)| c.clone())
            .collect();
        let new: Vec<ClusterName> = current
            .iter()
            .filter(|c| wanted.contains(c))
            .cloned()
            .collect();
        let policy = shift_policy.rollback.unwrap_or_default();
        if rolled_back.is_none()
            && let Some(v) = rollback::judge(&new, &old, &members, ns_annotations, &policy)
        {
            tracing::warn!(logical_cluster = %path, namespace = %name, verdict = %v.message,
                "move rolled back");
            gate.annotations.insert(
                rollback::FAILED_ANNOTATION.to_string(),
                Value::from(serde_json::to_string(&v).unwrap_or_default()),
            );
            for c in &old {
                for k in [
                    shift_annotation(c),
                    weight_annotation(c),
                    draining_annotation(c),
                ] {
                    gate.annotations.insert(k, Value::Null);
                }
            }
            next = current.clone();
            phase = Phase::RolledBack(v.message.clone());
        } else if clear_verdict {
            gate.annotations
                .insert(rollback::FAILED_ANNOTATION.to_string(), Value::Null);
        }
        // The failure stays said while the namespace is held back, whatever else goes on.
        if let Some(v) = &rolled_back {
            phase = Phase::RolledBack(v.message.clone());
        }
        // What fits nowhere and runs nowhere yet is not started where it does not fit.
        if !established
            && matches!(
                phase,
                Phase::Pending(schedule::Pending::InsufficientCapacity(_))
            )
        {
            next.clear();
        }
        let admit = !next.is_empty() && full.pods > 0.0 && !matches!(phase, Phase::Pending(_));
        if admit && !admitted {
            gate.annotations
                .insert(ADMITTED_ANNOTATION.to_string(), Value::from("true"));
        } else if next.is_empty() && admitted {
            gate.annotations
                .insert(ADMITTED_ANNOTATION.to_string(), Value::Null);
        }
        if let Some((c, _)) = drained_condition(&gate.drained) {
            gate.annotations
                .insert(DRAINED_ANNOTATION.to_string(), Value::from(c.to_string()));
        }
        if next != current || !gate.annotations.is_empty() {
            let ns_api: Api<DynamicObject> = Api::all_with(
                client.get().clone(),
                &dynamic("", "v1", "Namespace", "namespaces"),
            );
            let patch = json!({"metadata": {
                "labels": state_labels_patch(&current, &next),
                "annotations": gate.annotations,
            }});
            let r = ns_api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
            match r {
                Ok(_) => tracing::info!(logical_cluster = %path, namespace = %name,
                    from = ?current, to = ?next, "placement changed"),
                Err(e) => {
                    tracing::warn!(logical_cluster = %path, namespace = %name, error = %e, "placing failed");
                    ok = false;
                    continue;
                }
            }
        }
        for c in &next {
            placed_on
                .entry(c.clone())
                .or_default()
                .push(format!("{path}/{name}"));
            if !current.contains(c) {
                // Counted whole until its share is known: a newcomer never overcommits.
                let a = allocated.entry(c.clone()).or_default();
                *a = *a + full;
                usage.add(&path, c, full);
            }
        }
        ok &= report_phase(&client, ns, &name, &phase, &gate.drained).await;
        ok &= drop_stale_mirrors(&client, &w.mirrors, &path, &name, &next, &clusters).await;

        // A split workload carries its share of each cluster's replicas.
        let mut split = Split::new(&target, &views);
        for ((k, ar, o), v) in objs.iter().zip(vs) {
            let obj_name = o.metadata.name.clone().unwrap_or_default();
            let api = || Api::<DynamicObject>::namespaced_with(client.get().clone(), &name, *ar);
            let shares = split.shares(k.kind, v);
            let patch = if o.metadata.deletion_timestamp.is_none() {
                shares_patch(v, &next, shares.as_deref(), &target)
            } else {
                None
            };
            if let Some(patch) = patch {
                let r = api()
                    .patch(&obj_name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
                if let Err(e) = r {
                    tracing::warn!(kind = k.kind, namespace = %name, name = %obj_name, error = %e, "writing replica shares failed");
                    ok = false;
                }
            }
            if k.reports_status()
                && let Some(sum) = status::summarize(k.kind, v, &next)
                && !same_status(&v["status"], &sum)
            {
                let patch = json!({"status": sum});
                let r = api()
                    .patch_status(&obj_name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
                if let Err(e) = r {
                    tracing::warn!(kind = k.kind, namespace = %name, name = %obj_name, error = %e, "status failed");
                    ok = false;
                }
            }
        }
    }

    ok &= report_placements(roots, &placements, &clusters).await;
    ok &= report_clusters(root, &cluster_objects, &clusters, &placed_on, &allocated).await;
    tracing::Span::current().record("namespaces", namespaces.len());
    (ok, shifting, namespaces.len())
}

/// Delete the Pod mirrors in namespace `ns` of `path` that a cluster it is no longer placed
/// on left behind because its syncer is gone (a live syncer removes its own once the Pods
/// are gone); false if a write failed.
async fn drop_stale_mirrors(
    client: &LazyClient,
    mirrors: &Informer<DynamicObject>,
    path: &LogicalClusterPath,
    ns: &str,
    next: &[ClusterName],
    clusters: &[ClusterView],
) -> bool {
    let mut ok = true;
    let api = || {
        Api::<DynamicObject>::namespaced_with(
            client.get().clone(),
            ns,
            &dynamic("", "v1", "Pod", "pods"),
        )
    };
    for m in mirrors.store.in_namespace(&path.to_string(), ns) {
        let Some(cluster) = labels_of(&m).get(LABEL_CLUSTER).map(ClusterName::new) else {
            continue;
        };
        let alive = clusters.iter().any(|c| c.name == cluster && c.ready);
        if next.contains(&cluster) || alive {
            continue;
        }
        let name = m.metadata.name.clone().unwrap_or_default();
        let params = PatchParams {
            field_manager: Some(MANAGER.to_string()),
            ..PatchParams::default()
        };
        let v = serde_json::to_value(&*m).unwrap_or(Value::Null);
        if let Some(patch) = released_finalizers(&v, next)
            && let Err(e) = api().patch(&name, &params, &Patch::Merge(&patch)).await
        {
            tracing::debug!(logical_cluster = %path, namespace = ns, pod = %name, error = %e, "releasing a stale mirror failed");
            ok = false;
            continue;
        }
        if m.metadata.deletion_timestamp.is_none() {
            let deleted = api()
                .delete(&name, &kube::api::DeleteParams::default().grace_period(0))
                .await;
            match deleted {
                Ok(_) => tracing::info!(logical_cluster = %path, namespace = ns, pod = %name,
                    %cluster, "removed the mirror a lost cluster left"),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => {
                    tracing::debug!(logical_cluster = %path, namespace = ns, pod = %name, error = %e, "deleting a stale mirror failed");
                    ok = false;
                }
            }
        }
    }
    ok
}

/// How a namespace's workloads split over its clusters: by capacity when spread, filling
/// the first cluster's room first when spilled; nothing to split otherwise.
struct Split {
    mode: Mode,
    clusters: Vec<ClusterView>,
    /// What the shares given so far take on each cluster (spill).
    spent: BTreeMap<ClusterName, Resources>,
}

impl Split {
    fn new(target: &Target, views: &[ClusterView]) -> Self {
        let (mode, names) = match target {
            Target::On { clusters, mode } if clusters.len() > 1 => (*mode, clusters.clone()),
            _ => (Mode::Single, Vec::new()),
        };
        let clusters = names
            .iter()
            .filter_map(|n| views.iter().find(|v| &v.name == n).cloned())
            .collect();
        Self {
            mode,
            clusters,
            spent: BTreeMap::new(),
        }
    }

    /// The shares of workload `v` (of `kind`) that has `spec.replicas`; `None` when it is
    /// not split.
    fn shares(&mut self, kind: &str, v: &Value) -> Option<Vec<(ClusterName, i64)>> {
        // A Pod is one replica: it runs on one of the clusters.
        if self.mode == Mode::Single || !crate::demand::splits(kind, v) {
            return None;
        }
        let (replicas, each) = crate::demand::workload(kind, v)?;
        Some(match self.mode {
            Mode::Spread => schedule::weighted_shares(
                replicas,
                &self
                    .clusters
                    .iter()
                    .map(|c| (c.name.clone(), schedule::spread_weight(c)))
                    .collect::<Vec<_>>(),
            ),
            _ => {
                let room: Vec<(ClusterName, Option<i64>)> = self
                    .clusters
                    .iter()
                    .map(|c| {
                        let spent = self.spent.get(&c.name).copied().unwrap_or_default();
                        (c.name.clone(), c.room(&spent, &each))
                    })
                    .collect();
                let shares = schedule::fill_shares(replicas, &room);
                for (c, n) in &shares {
                    let s = self.spent.entry(c.clone()).or_default();
                    *s = *s + each * *n as f64;
                }
                shares
            }
        })
    }
}

/// The merge patch of labels that turns state labels `from` into `to`.
fn state_labels_patch(from: &[ClusterName], to: &[ClusterName]) -> Value {
    let mut m = serde_json::Map::new();
    for c in from.iter().filter(|c| !to.contains(c)) {
        m.insert(state_label(c), Value::Null);
    }
    for c in to.iter().filter(|c| !from.contains(c)) {
        m.insert(state_label(c), Value::from(STATE_SYNC));
    }
    Value::Object(m)
}

/// The merge patch that sets workload `v`'s replica shares (or drops them when it is not
/// split, or from clusters it left); `None` when it is right already.
fn shares_patch(
    v: &Value,
    placed: &[ClusterName],
    shares: Option<&[(ClusterName, i64)]>,
    target: &Target,
) -> Option<Value> {
    let spread = shares.is_some();
    let meta = &v["metadata"];
    let mut annotations = serde_json::Map::new();
    for (k, _) in meta["annotations"].as_object().into_iter().flatten() {
        if let Some(c) = k.strip_prefix(REPLICAS_ANNOTATION_PREFIX)
            && (!spread || !placed.iter().any(|p| p.as_str() == c))
            && !matches!(target, Target::Pending(_))
        {
            annotations.insert(k.clone(), Value::Null);
        }
    }
    if let Some(shares) = shares {
        for (c, n) in shares {
            let key = replicas_annotation(c);
            let want = n.to_string();
            if meta["annotations"][&key].as_str() != Some(want.as_str()) {
                annotations.insert(key, Value::from(want));
            } else {
                annotations.remove(&key);
            }
        }
    }
    if annotations.is_empty() {
        return None;
    }
    Some(json!({"metadata": {"annotations": annotations}}))
}

/// The patch that drops mirror `v`'s sync finalizers of clusters other than `placed`, on
/// condition that it is unchanged since it was read; `None` when it holds none. (The API
/// server releases those of the objects that travel; a mirror is placement's to remove.)
fn released_finalizers(v: &Value, placed: &[ClusterName]) -> Option<Value> {
    let have: Vec<String> =
        serde_json::from_value(v["metadata"]["finalizers"].clone()).unwrap_or_default();
    let keep: Vec<&String> = have
        .iter()
        .filter(|f| {
            f.strip_prefix(SYNC_FINALIZER_PREFIX)
                .is_none_or(|c| placed.iter().any(|p| p.as_str() == c))
        })
        .collect();
    (keep.len() != have.len()).then(|| {
        json!({"metadata": {
            "finalizers": keep,
            "resourceVersion": v["metadata"]["resourceVersion"],
        }})
    })
}

/// Whether `have` already holds every field of `want`.
fn same_status(have: &Value, want: &Value) -> bool {
    want.as_object()
        .is_some_and(|w| w.iter().all(|(k, v)| &have[k] == v))
}

/// The `Drained` condition for clusters that just left: how their traffic ended (status
/// True when nothing was cut), as a condition value and the Event's type.
fn drained_condition(drained: &[shift::Drained]) -> Option<(Value, &'static str)> {
    if drained.is_empty() {
        return None;
    }
    let clean = drained.iter().all(|d| d.cut == 0 && d.unknown.is_empty());
    let message = drained
        .iter()
        .map(|d| {
            let mut m = match d.waited {
                None => format!(
                    "{} left with no live connection or request to it in any cluster",
                    d.cluster
                ),
                Some(w) => format!(
                    "{} left after {} s with {} live connections or requests to it cut",
                    d.cluster,
                    w.as_secs(),
                    d.cut
                ),
            };
            if !d.unknown.is_empty() {
                m.push_str(&format!(" (unknown in {}: not reported)", join(&d.unknown)));
            }
            m
        })
        .collect::<Vec<_>>()
        .join("; ");
    let (status, reason, kind) = if clean {
        ("True", "Drained", "Normal")
    } else {
        ("False", "ConnectionsCut", "Warning")
    };
    Some((
        json!({
            "type": CONDITION_DRAINED,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": sluice_kube::time::now_rfc3339(),
        }),
        kind,
    ))
}

/// The namespace conditions (and an Event for each change) for `phase`, and for the
/// clusters that just left, how their traffic ended.
async fn report_phase(
    client: &LazyClient,
    ns: &DynamicObject,
    name: &str,
    phase: &Phase,
    drained: &[shift::Drained],
) -> bool {
    // How the last drain ended: fresh from this pass (with its Event), else as recorded on
    // the namespace, so that a status write from a stale snapshot is put right.
    let fresh = drained_condition(drained);
    let want_drained: Option<Value> = fresh.as_ref().map(|(c, _)| c.clone()).or_else(|| {
        ns.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(DRAINED_ANNOTATION))
            .and_then(|v| serde_json::from_str(v).ok())
    });
    let have_drained = ns.data["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == CONDITION_DRAINED));
    let drained = want_drained.filter(|w| {
        have_drained.is_none_or(|h| {
            ["status", "reason", "message"]
                .iter()
                .any(|k| h[*k] != w[*k])
        })
    });
    let (status, reason, message) = match phase {
        Phase::Placed => {
            let on = placed_clusters(ns.metadata.labels.iter().flatten());
            ("True", "Placed", format!("running on {}", join(&on)))
        }
        Phase::Unplaced => (
            "False",
            "Unplaced",
            "no placement selects this namespace".to_string(),
        ),
        Phase::Moving { from, to, waiting } => (
            "False",
            "Moving",
            format!(
                "moving from {} to {}: waiting until {}",
                join(from),
                join(to),
                waiting
                    .iter()
                    .map(|(c, w)| match w {
                        schedule::NotYet::Workloads =>
                            format!("the workloads are available on {c}"),
                        schedule::NotYet::Endpoints(unseen) => format!(
                            "the endpoints on {c} are Ready in the imports of {}",
                            join(unseen)
                        ),
                    })
                    .collect::<Vec<_>>()
                    .join(", and ")
            ),
        ),
        Phase::Shifting(cs) => (
            "False",
            "Shifting",
            format!(
                "traffic shifts off {}",
                cs.iter()
                    .map(|(c, w)| if *w == 0 {
                        format!("{c} (weight 0, draining)")
                    } else {
                        format!("{c} (weight {w})")
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        Phase::RolledBack(message) => ("False", "MoveFailed", message.clone()),
        Phase::HeldBy(cs) => (
            "False",
            "Draining",
            format!(
                "waiting for the soft finalizers of {} to be released",
                join(cs)
            ),
        ),
        Phase::Pending(p) => ("False", p.reason(), p.message()),
    };
    let have = ns.data["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == CONDITION_PLACED));
    // A namespace that was never placed has nothing to say.
    let silent = have.is_none() && matches!(phase, Phase::Unplaced);
    let same = have.is_some_and(|c| {
        c["status"] == status && c["reason"] == reason && c["message"] == message.as_str()
    });
    let placed_changed = !silent && !same;
    if !placed_changed && drained.is_none() {
        return true;
    }
    let mut conditions: Vec<Value> = ns.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| drained.is_none() || c["type"] != CONDITION_DRAINED)
        .filter(|c| c["type"] != CONDITION_PLACED)
        .cloned()
        .collect();
    if let Some(c) = have.filter(|_| !placed_changed) {
        conditions.push(c.clone());
    } else if placed_changed {
        conditions.push(json!({
            "type": CONDITION_PLACED,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": sluice_kube::time::now_rfc3339(),
        }));
    }
    if let Some(c) = &drained {
        conditions.push(c.clone());
    }
    let client = client.get();
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &dynamic("", "v1", "Namespace", "namespaces"),
    );
    let patch = json!({"status": {"conditions": conditions}});
    if let Err(e) = api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        tracing::warn!(namespace = name, error = %e, "namespace condition failed");
        return false;
    }
    if let Some((c, kind)) = &fresh {
        let (reason, message) = (
            c["reason"].as_str().unwrap_or_default(),
            c["message"].as_str().unwrap_or_default(),
        );
        event(client, name, reason, message, kind).await;
    }
    if !placed_changed {
        return true;
    }
    let kind = if status == "True" {
        "Normal"
    } else {
        "Warning"
    };
    let kind = if reason == "Moving" { "Normal" } else { kind };
    event(client, name, reason, &message, kind).await;
    true
}

/// Whether two lists name the same clusters, in any order.
fn same_clusters(a: &[ClusterName], b: &[ClusterName]) -> bool {
    let mut a = a.to_vec();
    let mut b = b.to_vec();
    a.sort();
    b.sort();
    a == b
}

fn join(cs: &[ClusterName]) -> String {
    if cs.is_empty() {
        return "nothing".into();
    }
    cs.iter()
        .map(ClusterName::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Record an Event about namespace `name` (best effort: an Event that cannot be written is
/// logged, never retried).
async fn event(client: &kube::Client, name: &str, reason: &str, message: &str, kind: &str) {
    let now = sluice_kube::time::now_rfc3339();
    let ev = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": format!("{name}.")},
        "involvedObject": {"apiVersion": "v1", "kind": "Namespace", "name": name},
        "reason": reason,
        "message": message,
        "type": kind,
        "source": {"component": MANAGER},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    });
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), name, &dynamic("", "v1", "Event", "events"));
    let Ok(obj) = serde_json::from_value::<DynamicObject>(ev) else {
        return;
    };
    if let Err(e) = api.create(&PostParams::default(), &obj).await {
        tracing::debug!(namespace = name, error = %e, "event not recorded");
    }
}

/// Each Placement's selected clusters and whether it can place anything.
async fn report_placements(
    roots: &Roots,
    placements: &BTreeMap<LogicalClusterPath, Vec<(Arc<DynamicObject>, PolicyView)>>,
    clusters: &[ClusterView],
) -> bool {
    let mut ok = true;
    for (path, ps) in placements {
        for (p, view) in ps {
            let (selected, status, reason, message) = match &view.clusters {
                Err(e) => (
                    Vec::new(),
                    "False",
                    "InvalidSelector",
                    format!("locationSelector: {e}"),
                ),
                Ok(s) => {
                    let sel: Vec<String> = clusters
                        .iter()
                        .filter(|c| {
                            s.matches(&c.labels) && c.ready && !c.unschedulable && !c.draining
                        })
                        .map(|c| c.name.to_string())
                        .collect();
                    match &view.namespaces {
                        Err(e) => (
                            sel,
                            "False",
                            "InvalidSelector",
                            format!("namespaceSelector: {e}"),
                        ),
                        Ok(_) if sel.is_empty() => (
                            sel,
                            "False",
                            "NoClusterMatches",
                            "no ready, schedulable cluster matches the locationSelector"
                                .to_string(),
                        ),
                        Ok(_) => (sel, "True", "Ready", "clusters selected".to_string()),
                    }
                }
            };
            let want = json!({"selectedClusters": selected, "conditions": [{
                "type": "Ready", "status": status, "reason": reason, "message": message,
            }]});
            let have = &p.data["status"];
            let same = have["selectedClusters"] == want["selectedClusters"]
                && have["conditions"][0]["status"] == status
                && have["conditions"][0]["reason"] == reason
                && have["conditions"][0]["message"] == message.as_str();
            if same {
                continue;
            }
            let mut want = want;
            want["conditions"][0]["lastTransitionTime"] = json!(sluice_kube::time::now_rfc3339());
            let Ok(client) = roots.at(&format!("/clusters/{path}")) else {
                ok = false;
                continue;
            };
            let api: Api<DynamicObject> = Api::all_with(
                client,
                &dynamic("sluice.dev", "v1alpha1", "Placement", "placements"),
            );
            let name = p.metadata.name.clone().unwrap_or_default();
            if let Err(e) = api
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"status": want})),
                )
                .await
            {
                tracing::warn!(placement = %name, error = %e, "placement status failed");
                ok = false;
            }
        }
    }
    ok
}

/// Each Cluster's readiness (its syncer's heartbeat), how many namespaces it runs and,
/// while it drains, which are left.
async fn report_clusters(
    root: &kube::Client,
    objects: &[Arc<DynamicObject>],
    views: &[ClusterView],
    placed_on: &BTreeMap<ClusterName, Vec<String>>,
    allocated: &BTreeMap<ClusterName, Resources>,
) -> bool {
    let api: Api<DynamicObject> = Api::all_with(
        root.clone(),
        &dynamic("sluice.dev", "v1alpha1", "Cluster", "clusters"),
    );
    let mut ok = true;
    for (o, v) in objects.iter().zip(views) {
        let (status, reason, message) = if v.ready {
            (
                "True",
                "SyncerHeartbeat",
                "the syncer's heartbeat is current",
            )
        } else {
            (
                "False",
                "SyncerHeartbeatMissing",
                "no current heartbeat from the cluster's syncer",
            )
        };
        let left = placed_on.get(&v.name).map(Vec::as_slice).unwrap_or(&[]);
        let mut want =
            vec![json!({"type": "Ready", "status": status, "reason": reason, "message": message})];
        if v.draining {
            let (status, reason, message) = if left.is_empty() {
                ("True", "Drained", "no namespace runs here".to_string())
            } else {
                (
                    "False",
                    "Draining",
                    format!("{} namespace(s) left: {}", left.len(), left.join(", ")),
                )
            };
            want.push(
                json!({"type": "Drained", "status": status, "reason": reason, "message": message}),
            );
        }
        let used = allocated.get(&v.name).copied().unwrap_or_default();
        let used = json!({
            "pods": used.pods.round() as i64,
            "cpu": format!("{}m", (used.cpu * 1000.0).round() as i64),
            "memory": format!("{}", used.memory.round() as i64),
        });
        let have = &o.data["status"];
        // Only the conditions placement owns: others (the MCS controller's) stay.
        const OURS: [&str; 2] = ["Ready", "Drained"];
        let theirs: Vec<Value> = have["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| !OURS.iter().any(|t| c["type"] == *t))
            .cloned()
            .collect();
        let mine: Vec<&Value> = have["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| OURS.iter().any(|t| c["type"] == *t))
            .collect();
        let same = have["placedNamespaces"].as_i64() == Some(left.len() as i64)
            && have["allocated"] == used
            && mine.len() == want.len()
            && mine.iter().zip(&want).all(|(h, w)| {
                ["type", "status", "reason", "message"]
                    .iter()
                    .all(|f| h[f] == w[f])
            });
        if same {
            continue;
        }
        let now = sluice_kube::time::now_rfc3339();
        for c in &mut want {
            c["lastTransitionTime"] = json!(now);
        }
        let want: Vec<Value> = theirs.into_iter().chain(want).collect();
        // The list is written whole, with the MCS controller's conditions as last read:
        // pinned to that version, so a condition written since is never dropped (a stale
        // write gets 409 and is redone from the new version).
        let patch = json!({
            "metadata": {"resourceVersion": o.metadata.resource_version},
            "status": {
                "placedNamespaces": left.len(),
                "allocated": used,
                "conditions": want,
            },
        });
        if let Err(e) = api
            .patch_status(
                v.name.as_str(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            match &e {
                kube::Error::Api(s) if s.code == 409 => {
                    tracing::debug!(cluster = %v.name, "cluster status changed meanwhile: redone")
                }
                _ => tracing::warn!(cluster = %v.name, error = %e, "cluster status failed"),
            }
            ok = false;
        }
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_clusters_mirror_loses_its_sync_finalizer_only() {
        let v = json!({"metadata": {"resourceVersion": "7", "finalizers": [
            "syncer.sluice.dev/east", "syncer.sluice.dev/west", "example.com/keep"]}});
        let west = [ClusterName::new("west")];
        let p = released_finalizers(&v, &west).unwrap();
        assert_eq!(
            p["metadata"]["finalizers"],
            json!(["syncer.sluice.dev/west", "example.com/keep"])
        );
        assert_eq!(p["metadata"]["resourceVersion"], "7");
        let both = [ClusterName::new("east"), ClusterName::new("west")];
        assert_eq!(released_finalizers(&v, &both), None);
    }

    #[test]
    fn split_workloads_carry_their_shares_and_lose_them_when_whole_again() {
        let o = json!({"metadata": {"labels": {"app": "x"}, "annotations": {
            "replicas.sluice.dev/a": "2", "team": "t"}}, "spec": {"replicas": 3}});
        let b = [ClusterName::new("b")];
        let target = Target::On {
            clusters: b.to_vec(),
            mode: Mode::Single,
        };
        assert_eq!(
            shares_patch(&o, &b, None, &target),
            Some(json!({"metadata": {"annotations": {"replicas.sluice.dev/a": null}}}))
        );
        // While pending, the shares it had stay (its pods keep running where they are).
        let pending = Target::Pending(schedule::Pending::ClusterNotFound("c".into()));
        assert_eq!(shares_patch(&o, &b, None, &pending), None);
        let ab = [ClusterName::new("a"), ClusterName::new("b")];
        let target = Target::On {
            clusters: ab.to_vec(),
            mode: Mode::Spread,
        };
        let shares = schedule::shares(3, &ab);
        let p = shares_patch(&o, &ab, Some(&shares), &target).unwrap();
        assert_eq!(
            p,
            json!({"metadata": {"annotations": {"replicas.sluice.dev/b": "1"}}})
        );
    }

    #[test]
    fn cached_namespaces_and_workspaces_keep_what_placement_reads() {
        let mut ns: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "shop", "labels": {"state.sluice.dev/east": "Sync"},
                "annotations": {"sluice.dev/logical-cluster": "root:a", "drained.sluice.dev/last": "x"}},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active", "conditions": [{"type": "Placed"}]}}))
        .unwrap();
        namespace_view(&mut ns);
        assert_eq!(
            ns.data,
            json!({"status": {"conditions": [{"type": "Placed"}]}})
        );
        assert_eq!(ns.metadata.annotations.as_ref().unwrap().len(), 2);
        let mut ws: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "Workspace",
            "metadata": {"name": "a", "annotations": {"sluice.dev/logical-cluster": "root",
                "other": "x"}},
            "spec": {"policy": {}}, "status": {"phase": "Ready"}}))
        .unwrap();
        workspace_view(&mut ws);
        assert_eq!(ws.data, json!({"spec": {"policy": {}}}));
        assert_eq!(path_of(&ws), Some(LogicalClusterPath::root()));
        assert_eq!(ws.metadata.annotations.as_ref().unwrap().len(), 1);
        assert!(PLACEABLE_NAMESPACES.contains("notin (kube-system,kube-public,kube-node-lease)"));
    }

    #[test]
    fn placement_reads_workloads_and_services_only() {
        let read: Vec<&str> = BUILTIN
            .iter()
            .filter(|k| decided_on(k))
            .map(|k| k.kind)
            .collect();
        assert!(read.contains(&"Deployment") && read.contains(&"Service"));
        for never in ["Secret", "ConfigMap", "ServiceAccount", "Ingress"] {
            assert!(!read.contains(&never), "{never}");
        }
    }
}
