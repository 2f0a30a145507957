//! `sluice mcs`: the running controller around the pure [`crate::reconcile`].
//!
//! It watches the `Cluster` objects of the control plane; for each it opens a client to
//! the member cluster (kubeconfig `<dir>/<cluster>.kubeconfig`) and starts informers
//! ([`member`]). Every change records the service it touches ([`changes`]); a round then
//! snapshots those services in every synced member, reconciles them, and writes the
//! difference ([`write`]), members in parallel. Changes that arrive while it works coalesce
//! into the next round. A membership change, a lease that ran out or came back, a namespace
//! change or a re-list widen the round to every service. The loop also wakes when the
//! earliest lease runs out, since an expiring lease is a change nobody writes.

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
use tokio::sync::watch;

use crate::Changes;
use crate::model::{ClusterId, ClusterName, MemberSnapshot};
use crate::reconcile::{ClusterDesired, reconcile};
use crate::vip::VipAllocator;
use member::Member;
use metrics::ControllerMetrics;
use sluice_kube::Informer;
use write::Writer;

/// Writes in flight per member cluster.
const WRITE_CONCURRENCY: usize = 32;
/// Pause after a failed round before the next, so a broken member does not spin.
const RETRY_AFTER: Duration = Duration::from_millis(200);

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

/// The controller's shared state, readable by the admin endpoint.
pub struct Controller {
    pub metrics: ControllerMetrics,
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

impl Controller {
    pub fn new() -> Arc<Self> {
        let metrics = ControllerMetrics::default();
        let mut registry = prometheus_client::registry::Registry::with_prefix("sluice_mcs");
        metrics.register(&mut registry);
        Arc::new(Self {
            metrics,
            registry,
            ready: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Ready once every member synced and the first round was written.
    pub fn is_ready(&self) -> bool {
        self.ready.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Run until `stop` turns true.
    pub async fn run(self: Arc<Self>, config: Config, mut stop: watch::Receiver<bool>) {
        let changes = Arc::new(Changes::default());
        // Membership is compared each round (`sync_members`): a Cluster change only wakes.
        let clusters: Informer<Cluster> = Informer::start_with(
            Api::all(config.control.clone()),
            watcher::Config::default(),
            "clusters",
            changes.waker(),
        );
        let mut members: BTreeMap<String, Joined> = BTreeMap::new();
        let mut vips = VipAllocator::new();
        let mut wake_at: Option<tokio::time::Instant> = None;
        // Each member's liveness in the last round: a change widens the next to everything.
        let mut alive: BTreeMap<String, bool> = BTreeMap::new();
        loop {
            let sleep = async {
                match wake_at {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = stop.changed() => return,
                _ = changes.notified() => {}
                _ = sleep => {}
            }
            if !clusters.is_ready() {
                continue;
            }
            if self
                .sync_members(&config, &clusters, &mut members, &changes)
                .await
            {
                changes.touch_all();
            }
            if !members.values().all(|j| j.member.synced()) {
                continue;
            }
            let started = Instant::now();
            let now = Timestamp::now();
            let alive_now: BTreeMap<String, bool> = members
                .iter()
                .map(|(name, j)| (name.clone(), j.member.alive(now)))
                .collect();
            if alive_now != alive {
                changes.touch_all();
            }
            let scope = changes.take();
            let report = scope.is_all();
            if !scope.is_empty() {
                let snapshots: Vec<MemberSnapshot> = members
                    .values()
                    .map(|j| j.member.snapshot(now, &scope))
                    .collect();
                let desired = reconcile(&snapshots, &mut vips, &scope);
                let reconciled = started.elapsed();
                let rounds = members.values().map(|j| {
                    let d = desired.cluster(&j.member.name);
                    self.write_member(j, d)
                });
                let results = futures::future::join_all(rounds).await;
                let mut failed = results.iter().any(|ok| !ok);
                if report {
                    for j in members.values() {
                        let errors: Vec<String> = desired
                            .errors_of(&j.member.name)
                            .map(|e| e.to_string())
                            .collect();
                        let alive = alive_now
                            .get(j.member.name.as_str())
                            .copied()
                            .unwrap_or(true);
                        // A report refused as stale is redone by the next full round.
                        failed |= !report_cluster(
                            &config.control,
                            &clusters,
                            &j.member.name,
                            alive,
                            &errors,
                        )
                        .await;
                    }
                } else if !desired.errors.is_empty() {
                    // Cluster conditions summarise every service: a full round reports them.
                    changes.touch_all();
                }
                tracing::debug!(
                    services = ?scope.len(),
                    reconcile_us = reconciled.as_micros() as u64,
                    took_us = started.elapsed().as_micros() as u64,
                    failed,
                    "round written"
                );
                self.metrics
                    .observe_round(started.elapsed(), failed, scope.len());
                if failed {
                    changes.restore(scope);
                } else if report {
                    self.ready.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                wake_at = failed.then(|| tokio::time::Instant::now() + RETRY_AFTER);
            }
            self.metrics
                .alive
                .set(alive_now.values().filter(|a| **a).count() as i64);
            alive = alive_now;
            // Wake when the earliest live lease runs out (or soon after a failure).
            let expiry = members
                .values()
                .filter_map(|j| j.member.lease_expiry())
                .filter(|t| *t > now)
                .min()
                .map(|t| {
                    let ms = t.duration_since(now).as_millis().max(0) as u64 + 10;
                    tokio::time::Instant::now() + Duration::from_millis(ms)
                });
            wake_at = match (wake_at.filter(|t| *t > tokio::time::Instant::now()), expiry) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
    }

    /// Join new clusters, drop removed ones, restart ones whose spec changed. Returns
    /// whether the membership changed.
    async fn sync_members(
        &self,
        config: &Config,
        clusters: &Informer<Cluster>,
        members: &mut BTreeMap<String, Joined>,
        changes: &Arc<Changes>,
    ) -> bool {
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
