//! `sluice mcs`: the running controller around the pure [`crate::reconcile`], on the batch
//! runtime of `sluice-kube` ([`BatchController`]).
//!
//! It watches the `Cluster` objects of the control plane; for each it opens a client to
//! the member cluster (kubeconfig `<dir>/<cluster>.kubeconfig`) and starts informers
//! ([`member`]). Every change records the service it touches ([`Changes`]); a reconcile
//! then snapshots those services in every synced member, reconciles them together (one
//! service's import merges its exports from every member), and writes the difference
//! ([`write`]), members in parallel. Changes that arrive while it works coalesce into the
//! next reconcile; a failed one is retried with backoff. A membership change, a lease that
//! ran out or came back, a namespace change or a re-list widen the reconcile to every
//! service. It looks again when the earliest lease runs out, since an expiring lease is a
//! change nobody writes.

pub mod member;
pub mod metrics;
pub mod write;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use sluice_api::sluice::{Cluster, ImportVips};
use sluice_kube::controller::{Action, Backoff, BatchController, BatchReconciler};
use tokio::sync::watch;

use crate::Changes;
use crate::model::{ClusterId, ClusterName, MemberSnapshot, Scope};
use crate::reconcile::{ClusterDesired, reconcile};
use crate::vip::VipAllocator;
use member::Member;
use metrics::McsMetrics;
use sluice_kube::Informer;
use write::Writer;

/// Writes in flight per member cluster.
const WRITE_CONCURRENCY: usize = 32;
/// Retries after a failed reconcile: 200 ms doubling to 5 s, so a broken member does not
/// spin and a repaired one is caught up promptly.
const BACKOFF: Backoff = Backoff {
    first: Duration::from_millis(200),
    max: Duration::from_secs(5),
};

pub struct Config {
    /// The control plane, logical cluster `root` (where `Cluster` objects live).
    pub control: Client,
    /// Where member kubeconfigs are: `<dir>/<cluster name>.kubeconfig`.
    pub kubeconfigs: PathBuf,
}

struct Joined {
    member: Member,
    writer: Writer,
    /// The `Cluster` object's spec as last seen, to notice an api or id change.
    spec: String,
}

/// Why a reconcile failed (each write's error is logged where it happened).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("a write to a member cluster failed")]
    Write,
    #[error("reporting on a Cluster object failed")]
    Report,
}

/// The controller's shared state, readable by the admin endpoint.
pub struct Controller {
    pub metrics: McsMetrics,
    runtime: sluice_kube::controller::ControllerMetrics,
    registry: prometheus_client::registry::Registry,
    ready: std::sync::atomic::AtomicBool,
}

impl sluice_observe::AdminSource for Controller {
    fn registry(&self) -> &prometheus_client::registry::Registry {
        &self.registry
    }

    fn ready(&self) -> bool {
        self.is_ready()
    }
}

/// The reconciler: the members and what carries over between reconciles.
struct Members<'a> {
    controller: &'a Controller,
    config: Config,
    changes: Arc<Changes>,
    clusters: Informer<Cluster>,
    members: BTreeMap<String, Joined>,
    vips: VipAllocator,
    /// Each member's liveness at the last reconcile: a change widens the next to
    /// everything.
    alive: BTreeMap<String, bool>,
}

impl Controller {
    pub fn new() -> Arc<Self> {
        let metrics = McsMetrics::default();
        let runtime = sluice_kube::controller::ControllerMetrics::default();
        let mut registry = prometheus_client::registry::Registry::with_prefix("sluice_mcs");
        metrics.register(&mut registry);
        runtime.register(&mut registry);
        Arc::new(Self {
            metrics,
            runtime,
            registry,
            ready: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Ready once every member synced and the first round was written.
    pub fn is_ready(&self) -> bool {
        self.ready.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Run until `stop` turns true.
    pub async fn run(self: Arc<Self>, config: Config, stop: watch::Receiver<bool>) {
        let changes = Arc::new(Changes::default());
        // Membership is compared each reconcile (`sync_members`): a Cluster change only
        // wakes.
        let clusters: Informer<Cluster> = Informer::start_with(
            Api::all(config.control.clone()),
            watcher::Config::default(),
            "clusters",
            changes.waker(),
        );
        let mut reconciler = Members {
            controller: &self,
            config,
            changes: changes.clone(),
            clusters,
            members: BTreeMap::new(),
            vips: VipAllocator::new(),
            alive: BTreeMap::new(),
        };
        let _ = BatchController::new("mcs", changes, self.runtime.clone())
            .with_backoff(BACKOFF)
            .run(&mut reconciler, stop)
            .await;
    }
}

impl BatchReconciler for Members<'_> {
    type Key = crate::model::ServiceKey;
    type Error = ReconcileError;

    async fn reconcile(&mut self, scope: &Scope) -> Result<Action, ReconcileError> {
        if !self.clusters.is_ready() {
            self.changes.restore(scope.clone());
            return Ok(Action::AwaitChange);
        }
        let joined = self.sync_members().await;
        if !self.members.values().all(|j| j.member.synced()) {
            // Each member's informers wake the controller as they list.
            self.changes.restore(scope.clone());
            if joined {
                self.changes.touch_all();
            }
            return Ok(Action::AwaitChange);
        }
        let now = Timestamp::now();
        let alive_now: BTreeMap<String, bool> = self
            .members
            .iter()
            .map(|(name, j)| (name.clone(), j.member.alive(now)))
            .collect();
        let widened = joined || alive_now != self.alive;
        self.alive = alive_now.clone();
        self.controller
            .metrics
            .alive
            .set(alive_now.values().filter(|a| **a).count() as i64);
        let scope = if widened { &Scope::All } else { scope };
        let result = if scope.is_empty() {
            Ok(())
        } else {
            self.round(scope, &alive_now, now).await
        };
        if result.is_err() && widened {
            self.changes.touch_all();
        }
        result?;
        // Look again when the earliest live lease runs out.
        let expiry = self
            .members
            .values()
            .filter_map(|j| j.member.lease_expiry())
            .filter(|t| *t > now)
            .min()
            .map(|t| Duration::from_millis(t.duration_since(now).as_millis().max(0) as u64 + 10));
        Ok(expiry.map_or(Action::AwaitChange, Action::Requeue))
    }
}

impl Members<'_> {
    /// Snapshot, reconcile and write `scope` in every member, and (over everything) report
    /// on each Cluster object.
    async fn round(
        &mut self,
        scope: &Scope,
        alive_now: &BTreeMap<String, bool>,
        now: Timestamp,
    ) -> Result<(), ReconcileError> {
        let started = Instant::now();
        let report = scope.is_all();
        let snapshots: Vec<MemberSnapshot> = self
            .members
            .values()
            .map(|j| j.member.snapshot(now, scope))
            .collect();
        let desired = reconcile(&snapshots, &mut self.vips, scope);
        let reconciled = started.elapsed();
        let controller = self.controller;
        let rounds = self.members.values().map(|j| {
            let d = desired.cluster(&j.member.name);
            controller.write_member(j, d)
        });
        let results = futures::future::join_all(rounds).await;
        let mut error = results
            .iter()
            .any(|ok| !ok)
            .then_some(ReconcileError::Write);
        if report {
            for j in self.members.values() {
                let errors: Vec<String> = desired
                    .errors_of(&j.member.name)
                    .map(|e| e.to_string())
                    .collect();
                let alive = alive_now
                    .get(j.member.name.as_str())
                    .copied()
                    .unwrap_or(true);
                // A report refused as stale is redone by the retry, over everything.
                if !report_cluster(
                    &self.config.control,
                    &self.clusters,
                    &j.member.name,
                    alive,
                    &errors,
                )
                .await
                {
                    error.get_or_insert(ReconcileError::Report);
                }
            }
        } else if !desired.errors.is_empty() {
            // Cluster conditions summarise every service: a full round reports them.
            self.changes.touch_all();
        }
        tracing::debug!(
            services = ?scope.len(),
            reconcile_us = reconciled.as_micros() as u64,
            took_us = started.elapsed().as_micros() as u64,
            failed = error.is_some(),
            "round written"
        );
        self.controller.metrics.observe_round(scope.len());
        match error {
            Some(e) => Err(e),
            None => {
                if report {
                    self.controller
                        .ready
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                }
                Ok(())
            }
        }
    }

    /// Join new clusters, drop removed ones, restart ones whose spec changed. Returns
    /// whether the membership changed.
    async fn sync_members(&mut self) -> bool {
        let (config, clusters, members, changes) = (
            &self.config,
            &self.clusters,
            &mut self.members,
            &self.changes,
        );

        let current = clusters.state();
        let before = members.len();
        members.retain(|name, _| {
            current
                .iter()
                .any(|c| c.metadata.name.as_deref() == Some(name))
        });
        let mut changed = members.len() != before;
        let mut sorted: Vec<&Arc<Cluster>> = current.iter().collect();
        sorted.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        for (position, c) in sorted.iter().enumerate() {
            let Some(name) = c.metadata.name.clone() else {
                continue;
            };
            let spec = serde_json::to_string(&c.spec).unwrap_or_default();
            if members.get(&name).is_some_and(|j| j.spec == spec) {
                continue;
            }
            let id_text = c
                .spec
                .as_ref()
                .and_then(|s| s.cluster_id.clone())
                .unwrap_or_else(|| name.clone());
            let id = match ClusterId::new(id_text) {
                Ok(id) => id,
                Err(e) => {
                    let errors = [e.to_string()];
                    report_cluster(
                        &config.control,
                        clusters,
                        &ClusterName::new(&name),
                        true,
                        &errors,
                    )
                    .await;
                    continue;
                }
            };
            // The index picks the VIP range: the label `dev up` sets, else the position.
            let labelled: Option<u8> =
                crate::meta::label(&c.metadata, "sluice.dev/index").and_then(|v| v.parse().ok());
            let has_index = labelled.is_some();
            let index = labelled.unwrap_or(position as u8);
            // Local clusters (labelled with their index) have a dataplane serving VIPs
            // from their range; any other cluster's kube-proxy serves derived Services.
            let import_vips = c
                .spec
                .as_ref()
                .and_then(|s| s.import_vips)
                .unwrap_or(if has_index {
                    ImportVips::Sluice
                } else {
                    ImportVips::DerivedService
                });
            let path = config.kubeconfigs.join(format!("{name}.kubeconfig"));
            let client = match sluice_kube::client::from_kubeconfig(&path).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(cluster = %name, kubeconfig = %path.display(), error = %e, "cannot reach member cluster");
                    continue;
                }
            };
            tracing::info!(cluster = %name, %id, index, ?import_vips, "member joined");
            let member = Member::start(
                ClusterName::new(&name),
                id,
                index,
                import_vips,
                client.clone(),
                changes.clone(),
            );
            changed = true;
            members.insert(
                name,
                Joined {
                    member,
                    writer: Writer::new(client),
                    spec,
                },
            );
        }
        changed
    }
}

impl Controller {
    /// Write one member's desired state; `false` if any write failed.
    async fn write_member(&self, j: &Joined, desired: Option<&ClusterDesired>) -> bool {
        let Some(d) = desired else {
            return true;
        };
        let m = &j.member;
        let imports = m.imports_in_scope(&d.scope);
        let slices = m.slices_in_scope(&d.scope, true);
        let exports = m.exports_in_scope(&d.scope);
        // Observed resourceVersions by (namespace, name), for the writer's skip check.
        fn versions<K: kube::Resource>(objs: &[Arc<K>]) -> HashMap<(String, String), String> {
            objs.iter()
                .filter_map(|o| {
                    let m = o.meta();
                    Some((
                        (m.namespace.clone()?, m.name.clone()?),
                        m.resource_version.clone()?,
                    ))
                })
                .collect()
        }
        let (import_rv, slice_rv, export_rv) =
            (versions(&imports), versions(&slices), versions(&exports));
        let find_import =
            |ns: &str, n: &str| import_rv.get(&(ns.to_string(), n.to_string())).cloned();
        let find_slice =
            |ns: &str, n: &str| slice_rv.get(&(ns.to_string(), n.to_string())).cloned();
        let find_export =
            |ns: &str, n: &str| export_rv.get(&(ns.to_string(), n.to_string())).cloned();
        let mut ops: Vec<futures::future::BoxFuture<'_, Result<bool, write::WriteError>>> =
            Vec::new();
        for (k, imp) in &d.imports {
            let rv = find_import(&k.namespace, &k.name);
            ops.push(Box::pin(async move {
                j.writer.import(k, imp, rv.as_deref()).await
            }));
        }
        for (k, sl) in &d.slices {
            let rv = find_slice(&k.namespace, &k.name);
            ops.push(Box::pin(async move {
                j.writer.slice(k, sl, rv.as_deref()).await
            }));
        }
        for (k, st) in &d.export_statuses {
            let rv = find_export(&k.namespace, &k.name);
            ops.push(Box::pin(async move {
                j.writer.export_status(k, st, rv.as_deref()).await
            }));
        }
        let derived = m.derived_in_scope(&d.scope);
        let service_rv = versions(&derived);
        for (k, svc) in &d.services {
            let rv = service_rv
                .get(&(k.namespace.clone(), k.name.clone()))
                .cloned();
            ops.push(Box::pin(async move {
                j.writer.service(k, svc, rv.as_deref()).await
            }));
        }
        for k in d.stale_services(derived.iter().map(|s| &**s)) {
            ops.push(Box::pin(async move {
                j.writer.delete_service(&k).await.map(|_| true)
            }));
        }
        let stale_imports = d.stale_imports(imports.iter().map(|i| &**i));
        let stale_slices = d.stale_slices(slices.iter().map(|s| &**s));
        for k in stale_imports {
            ops.push(Box::pin(async move {
                j.writer.delete_import(&k).await.map(|_| true)
            }));
        }
        for k in stale_slices {
            ops.push(Box::pin(async move {
                j.writer.delete_slice(&k).await.map(|_| true)
            }));
        }
        let results: Vec<_> = futures::stream::iter(ops)
            .buffer_unordered(WRITE_CONCURRENCY)
            .collect()
            .await;
        let mut ok = true;
        for r in results {
            match r {
                Ok(true) => {
                    self.metrics.writes.inc();
                }
                Ok(false) => {}
                Err(e) => {
                    ok = false;
                    self.metrics.write_errors.inc();
                    tracing::warn!(cluster = %m.name, error = %e, "write failed");
                }
            }
        }
        ok
    }
}

/// Put the controller's verdict on a `Cluster` object: condition `MCSMember`, False with
/// the reasons when the cluster was left out (a duplicate cluster id, an invalid id, no VIP
/// range) or its liveness lease ran out (`LeaseExpired`). Written only when it changes;
/// false if the write failed.
async fn report_cluster(
    control: &Client,
    clusters: &Informer<Cluster>,
    name: &ClusterName,
    alive: bool,
    errors: &[String],
) -> bool {
    let (status, reason, message) = if !errors.is_empty() {
        ("False", "Rejected", errors.join("; "))
    } else if !alive {
        (
            "False",
            "LeaseExpired",
            "its agent's liveness lease ran out: its endpoints are out of every import, and its \
             imports are left as they were"
                .to_string(),
        )
    } else {
        ("True", "Member", "exports and imports services".to_string())
    };
    let Some(current) = clusters
        .state()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(name.as_str()))
    else {
        return true;
    };
    let mut conditions = current
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    if conditions
        .iter()
        .any(|c| c.type_ == "MCSMember" && c.status == status && c.message == message)
    {
        return true;
    }
    conditions.retain(|c| c.type_ != "MCSMember");
    conditions.push(k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        type_: "MCSMember".into(),
        status: status.into(),
        reason: reason.into(),
        message,
        last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            Timestamp::now(),
        ),
        observed_generation: current.metadata.generation,
    });
    let api: Api<Cluster> = Api::all(control.clone());
    // The list is written whole, with placement's conditions as last read: pinned to that
    // version, so a condition written since is never dropped (a 409 fails the round, and
    // the next full round writes it again from the newer version).
    let patch = serde_json::json!({
        "metadata": { "resourceVersion": current.metadata.resource_version },
        "status": { "conditions": conditions },
    });
    match api
        .patch_status(
            name.as_str(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => true,
        Err(kube::Error::Api(s)) if s.code == 409 => {
            tracing::debug!(cluster = %name, "the Cluster object changed meanwhile: reported again");
            false
        }
        Err(e) => {
            tracing::warn!(cluster = %name, error = %e, "reporting on the Cluster object failed");
            false
        }
    }
}
