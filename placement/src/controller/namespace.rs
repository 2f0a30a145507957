//! One namespace's reconcile: read it, its workloads and Services from the stores and the
//! others' totals from the [`Ledger`](super::ledger::Ledger); decide where it runs
//! ([`schedule`]), step toward that ([`schedule::step`], traffic shifted off first by
//! [`shift`], judged by [`rollback`]); write its state labels, its workloads' replica
//! shares and summed status, drop the mirrors a lost cluster left; report its conditions.
//! It writes only what differs.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sluice_api::ClusterName;
use sluice_api::sluice::TrafficShift;
use sluice_api::sync::{
    LABEL_CLUSTER, ORDINALS_ANNOTATION_PREFIX, REPLICAS_ANNOTATION_PREFIX, SOFT_FINALIZER_PREFIX,
    STATE_SYNC, SYNC_FINALIZER_PREFIX, draining_annotation, ordinals_annotation, placed_clusters,
    replicas_annotation, shift_annotation, state_label, weight_annotation,
};
use sluice_kube::Action;
use sluice_kube::resources::Resources;

use super::error::{ReconcileError, Write};
use super::ledger::NsKey;
use super::report::{self, DRAINED_ANNOTATION, MANAGER, drained_condition, same_clusters};
use super::views::{dynamic, labels_of};
use super::{MAX_DRAIN_MOVES, Placer, SHIFT_TICK, Snapshot};
use crate::schedule::{self, ClusterView, Mode, Phase, Target};
use crate::{imports, rollback, shift, status, tenancy};

/// Namespace annotation: the namespace was placed with its workloads counted (some pods
/// of demand) and they fitted. Only such a namespace is established where it is: one that
/// was placed while empty and then grew beyond every cluster's room is taken off again,
/// whatever its syncer has already reported on it (a report comes within milliseconds of
/// the placement, so it cannot tell "running" from "just placed").
const ADMITTED_ANNOTATION: &str = "capacity.sluice.dev/admitted";

impl Placer {
    /// Reconcile namespace `key`; what is left to do over time (a traffic shift) asks to be
    /// looked at again.
    pub(super) async fn reconcile_namespace(
        &mut self,
        key: &NsKey,
    ) -> Result<Action, ReconcileError> {
        let (path, name) = key;
        let Some(ns) = self.w.namespaces.get_in(path.as_str(), "", name) else {
            let changed = self.ledger.forget(key);
            self.report_clusters_later(changed);
            return Ok(Action::AwaitChange);
        };
        let snapshot = Snapshot::read(&self.w, &self.ledger);
        let objs = self.w.objects_of(key);
        let values: Vec<Value> = objs
            .iter()
            .map(|(_, _, o)| serde_json::to_value(&**o).unwrap_or(Value::Null))
            .collect();
        let workloads: Vec<(&'static str, &Value)> = objs
            .iter()
            .zip(&values)
            .filter(|((k, _, _), _)| crate::demand::runs_pods(k.kind))
            .map(|((k, _, _), v)| (k.kind, v))
            .collect();
        let labels = ns.labels();
        let current = placed_clusters(labels.iter());
        // What it requests where it runs now, as the others see it.
        let counted: Vec<(ClusterName, Resources)> = current
            .iter()
            .map(|c| {
                let d = crate::demand::demand(workloads.iter().copied(), Some(c));
                (c.clone(), d)
            })
            .collect();
        let changed = self.ledger.set(key, counted);
        self.report_clusters_later(changed);
        let full = crate::demand::demand(workloads.iter().copied(), None);
        let policies = self.w.policies_of(path);
        let own_policy = |parent: &sluice_api::LogicalClusterPath, name: &str| {
            self.w
                .workspaces
                .get_in(parent.as_str(), "", name)
                .and_then(|w| w.policy.clone())
        };
        let policy = tenancy::effective(path, &own_policy);
        // The clusters as this namespace sees them: what the others use, and what its
        // workspace may use.
        let views: Vec<ClusterView> = snapshot
            .views
            .iter()
            .map(|c| {
                let mut v = c.clone();
                let mine = self.ledger.mine(key, &c.name);
                v.used = self.ledger.allocated(&c.name) - mine;
                v.allowed = tenancy::cluster_allowed(&policy, &c.labels);
                v.quotas = self.ledger.usage().quotas(&policy, &c.name, mine);
                v
            })
            .collect();
        let admitted = ns.annotations.contains_key(ADMITTED_ANNOTATION);
        // Also established: what asks for no pod (nothing to start), and what already runs
        // on several clusters (spread or spilled, as placed before admission was recorded).
        let established =
            !current.is_empty() && (admitted || full.pods == 0.0 || current.len() > 1);
        let draining: BTreeSet<ClusterName> = views
            .iter()
            .filter(|c| c.draining)
            .map(|c| c.name.clone())
            .collect();
        let mut drain_queued = false;
        let target = if ns.deleting {
            // A namespace being deleted stays where it is while its contents go.
            Target::On {
                clusters: current.clone(),
                mode: Mode::Single,
            }
        } else {
            let mine = crate::demand::workloads(workloads.iter().copied());
            let policy_views: Vec<_> = policies.iter().map(|(_, v)| v.clone()).collect();
            match schedule::target(
                &labels,
                &current,
                &views,
                &policy_views,
                &full,
                &mine,
                established,
            ) {
                // Draining clusters give up a bounded number of namespaces at a time.
                Target::On { clusters: to, .. }
                    if current.len() == 1 && draining.contains(&current[0]) && to != current =>
                {
                    if self.ledger.moving_off(&draining) >= MAX_DRAIN_MOVES {
                        drain_queued = true;
                        Target::Pending(schedule::Pending::DrainQueued(current[0].clone()))
                    } else {
                        Target::On {
                            clusters: to,
                            mode: Mode::Single,
                        }
                    }
                }
                t => t,
            }
        };
        self.ledger.queue_for_drain(key, drain_queued);
        let ns_annotations = &ns.annotations;
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
        let members = &snapshot.members;
        let wanted: Vec<ClusterName> = match &target {
            Target::On { clusters, .. } => clusters.clone(),
            _ => Vec::new(),
        };
        // A move carries the data of the claims bound where the app ran.
        let kinds: Vec<(&str, &Value)> = objs
            .iter()
            .zip(&values)
            .map(|((k, _, _), v)| (k.kind, v))
            .collect();
        let copies = if ns.deleting {
            None
        } else {
            crate::copy::plan(&current, &wanted, &kinds, |c| self.mirrored_pods(key, c))
        };
        let copying = copies.as_ref().map(|p| p.waiting()).unwrap_or_default();
        let available = |c: &ClusterName| {
            if let Some(p) = copies
                .as_ref()
                .filter(|p| &p.to == c && !copying.is_empty())
            {
                return Err(schedule::NotYet::Copying {
                    from: p.from.clone(),
                    claims: copying.clone(),
                });
            }
            let ready = objs
                .iter()
                .zip(&values)
                .filter(|((k, _, _), _)| k.reports_status())
                .all(|((k, _, _), v)| status::available_on(k.kind, v, c));
            if !ready {
                return Err(schedule::NotYet::Workloads);
            }
            let kinds = objs.iter().zip(&values).map(|((k, _, _), v)| (k.kind, v));
            let expected = imports::expected(kinds, c);
            let unseen = imports::unseen_in(&expected, c, members, ns_annotations);
            if unseen.is_empty() {
                Ok(())
            } else {
                Err(schedule::NotYet::Endpoints(unseen))
            }
        };
        let held: BTreeSet<ClusterName> = ns_annotations
            .keys()
            .filter_map(|k| k.strip_prefix(SOFT_FINALIZER_PREFIX))
            .map(ClusterName::new)
            .collect();
        let (mut next, mut phase) = schedule::step(&current, &target, available, &held);
        // Traffic leaves a cluster before the cluster goes.
        // A cluster whose syncer is gone cannot be told its weight: it goes at once, as
        // before (its endpoints leave the imports with its lease).
        let leaving: Vec<ClusterName> = current
            .iter()
            .filter(|c| !next.contains(c) && !wanted.contains(c))
            .filter(|c| snapshot.ready(c))
            .cloned()
            .collect();
        let shift_policy = policies
            .iter()
            .find(|(_, p)| p.namespaces.as_ref().is_ok_and(|s| s.matches(&labels)))
            .map(|(_, p)| p.traffic_shift)
            .unwrap_or_default();
        // A rolled-back move's new clusters answered badly: their traffic goes at once.
        let gate_policy = match rolled_back {
            Some(_) => TrafficShift {
                duration_seconds: Some(0),
                ..shift_policy
            },
            None => shift_policy,
        };
        let mut gate = shift::gate(
            &current,
            &wanted,
            &leaving,
            ns_annotations,
            &gate_policy,
            k8s_openapi::jiff::Timestamp::now(),
            |c| {
                let r = imports::drain_of(c, members, ns_annotations);
                tracing::debug!(logical_cluster = %path, namespace = %name, cluster = %c,
                    unconfirmed = ?r.unconfirmed, unreported = ?r.unreported, active = r.active,
                    "drain report");
                r
            },
        );
        let shifting = !gate.kept.is_empty();
        if shifting {
            for (c, _) in &gate.kept {
                next.push(c.clone());
            }
            next.sort();
            phase = Phase::Shifting(gate.kept.clone());
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
        let rollback_policy = shift_policy.rollback.unwrap_or_default();
        if rolled_back.is_none()
            && let Some(v) = rollback::judge(&new, &old, members, ns_annotations, &rollback_policy)
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
        // The target runs nothing that mounts a claim still being copied there: said in
        // the same write that places the namespace there.
        if let Some(h) = crate::copy::holding_patch(ns_annotations, copies.as_ref()) {
            gate.annotations
                .insert(sluice_api::claim_copy::HOLDING_ANNOTATION.to_string(), h);
        }
        // Made when this namespace is written to; most reconciles write nothing.
        let client = self
            .roots
            .lazy(&format!("/clusters/{path}"))
            .map_err(|e| ReconcileError::Client(path.clone(), e))?;
        // What each object needs written: a split workload's share of each cluster's
        // replicas (and the counts a claim's copy holds it to), a StatefulSet's first
        // ordinals, a claim's asked copy.
        let mut split = Split::new(&target, &views);
        let patches: Vec<Option<Value>> = objs
            .iter()
            .zip(&values)
            .map(|((k, _, o), v)| {
                if o.metadata.deletion_timestamp.is_some() {
                    None
                } else if k.kind == "PersistentVolumeClaim" {
                    let asked = copies
                        .as_ref()
                        .and_then(|p| p.asked(o.metadata.name.as_deref().unwrap_or("")));
                    crate::copy::asked_patch(v, asked.as_ref())
                } else {
                    let shares = split.shares(k.kind, v);
                    let held = copies
                        .as_ref()
                        .map(|p| p.held(k.kind, v))
                        .unwrap_or_default();
                    let starts = copies
                        .as_ref()
                        .map(|p| p.starts(k.kind, v))
                        .unwrap_or_default();
                    merged(
                        shares_patch(v, &next, shares.as_deref(), &held, &target),
                        starts_patch(v, &starts),
                    )
                }
            })
            .collect();
        // A cluster's share is written before the namespace is placed there: its syncer,
        // seeing the namespace first, would start the whole count for a moment (a spill's
        // new cluster ran all of a workload's replicas, then stopped all but its share,
        // and the proxies in front sent requests to the stopped ones). A patch that also
        // drops a share or an ordinal goes after, whole, as before: its keys change
        // together (a StatefulSet's share and first ordinal), and a share dropped before
        // its cluster is left would run the whole count there.
        let newly: Vec<ClusterName> = next
            .iter()
            .filter(|c| !current.contains(c))
            .cloned()
            .collect();
        let (first, patches): (Vec<_>, Vec<_>) = patches
            .into_iter()
            .map(|p| match p {
                Some(p) if goes_first(&p, &newly) => (Some(p), None),
                p => (None, p),
            })
            .unzip();
        for (((_, ar, o), _), patch) in objs.iter().zip(&values).zip(&first) {
            let Some(patch) = patch else { continue };
            let obj_name = o.metadata.name.clone().unwrap_or_default();
            Api::<DynamicObject>::namespaced_with(client.get().clone(), name, ar)
                .patch(&obj_name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .map_err(|e| ReconcileError::write(Write::ReplicaShares, &obj_name, e))?;
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
            ns_api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| ReconcileError::write(Write::Placement, name, e))?;
            tracing::info!(logical_cluster = %path, namespace = %name,
                from = ?current, to = ?next, "placement changed");
        }
        // What it now requests on each cluster: a newcomer counted whole until its share
        // is known, so it never overcommits a cluster.
        let counted: Vec<(ClusterName, Resources)> = next
            .iter()
            .map(|c| {
                let d = if current.contains(c) {
                    self.ledger.mine(key, c)
                } else {
                    full
                };
                (c.clone(), d)
            })
            .collect();
        let changed = self.ledger.set(key, counted);
        self.report_clusters_later(changed);
        self.ledger
            .settle(key, matches!(phase, Phase::Placed | Phase::Unplaced));
        let client = client.get();
        report::report_phase(client, &ns, name, &phase, &gate.drained).await?;
        self.drop_stale_mirrors(client, key, &next, &snapshot)
            .await?;

        // The rest of each object's writes, and the workloads' status summed up.
        let mut failed = None;
        for (((k, ar, o), v), patch) in objs.iter().zip(&values).zip(patches) {
            let obj_name = o.metadata.name.clone().unwrap_or_default();
            let api = || Api::<DynamicObject>::namespaced_with(client.clone(), name, ar);
            if let Some(patch) = patch
                && let Err(e) = api()
                    .patch(&obj_name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
            {
                failed.get_or_insert(ReconcileError::write(Write::ReplicaShares, &obj_name, e));
            }
            if k.reports_status()
                && let Some(sum) = status::summarize(k.kind, v, &next)
                && !same_status(&v["status"], &sum)
                && let Err(e) = api()
                    .patch_status(
                        &obj_name,
                        &PatchParams::default(),
                        &Patch::Merge(&json!({"status": sum})),
                    )
                    .await
            {
                failed.get_or_insert(ReconcileError::write(Write::Status, &obj_name, e));
            }
        }
        if !ns.deleting
            && let Err(e) = self.ordinal_claims(client, key, &kinds).await
        {
            failed.get_or_insert(e);
        }
        if let Some(e) = failed {
            return Err(e);
        }
        Ok(if shifting {
            // Each step of a shift comes on time.
            Action::Requeue(SHIFT_TICK)
        } else {
            Action::AwaitChange
        })
    }

    /// The labels of the Pods `cluster` mirrors into namespace `key`.
    fn mirrored_pods(&self, key: &NsKey, cluster: &ClusterName) -> Vec<crate::copy::Labels> {
        let (path, ns) = key;
        self.w
            .mirrors
            .iter()
            .filter(|(ar, _)| ar.kind == "Pod")
            .flat_map(|(_, i)| i.store.in_namespace(path.as_str(), ns))
            .map(|m| labels_of(&m))
            .filter(|l| l.get(LABEL_CLUSTER).map(String::as_str) == Some(cluster.as_str()))
            .collect()
    }

    /// Make the claims of namespace `key`'s StatefulSets' ordinals that are not there
    /// yet, and delete those a set scaled away under `whenScaled: Delete`
    /// ([`crate::ordinal_claims`]).
    async fn ordinal_claims(
        &self,
        client: &kube::Client,
        key: &NsKey,
        objects: &[(&str, &Value)],
    ) -> Result<(), ReconcileError> {
        let (path, ns) = key;
        let mirrors = |kind: &str| -> Vec<String> {
            self.w
                .mirrors
                .iter()
                .filter(|(ar, _)| ar.kind == kind)
                .flat_map(|(_, i)| i.store.in_namespace(path.as_str(), ns))
                .filter_map(|m| m.metadata.name.clone())
                .collect()
        };
        // Every claim name the namespace holds, mirrors too: looked up once per ordinal.
        let names: BTreeSet<String> = mirrors("PersistentVolumeClaim")
            .into_iter()
            .chain(
                objects
                    .iter()
                    .filter(|(k, _)| *k == "PersistentVolumeClaim")
                    .filter_map(|(_, v)| v["metadata"]["name"].as_str().map(str::to_string)),
            )
            .collect();
        let exists = |name: &str| names.contains(name);
        let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
        for claim in
            crate::ordinal_claims::missing(objects, exists, crate::ordinal_claims::MAX_PER_PASS)
        {
            let name = claim["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let Ok(claim) = serde_json::from_value::<PersistentVolumeClaim>(claim) else {
                continue;
            };
            match api.create(&PostParams::default(), &claim).await {
                Ok(_) => {
                    tracing::info!(logical_cluster = %path, namespace = %ns, claim = %name, "made a StatefulSet ordinal's claim");
                }
                // Made meanwhile (by an earlier pass, or a mirror took the name).
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                // Refused as the user wrote the template (its quota, its class): the
                // ordinal waits for its claim, as in a cluster.
                Err(kube::Error::Api(e)) if e.code == 422 || e.code == 403 => {
                    tracing::debug!(logical_cluster = %path, namespace = %ns, claim = %name, error = %e.message, "an ordinal's claim was refused");
                }
                Err(e) => return Err(ReconcileError::write(Write::OrdinalClaim, &name, e)),
            }
        }
        let pods: BTreeSet<String> = mirrors("Pod").into_iter().collect();
        for name in crate::ordinal_claims::scaled_away(objects, |p| pods.contains(p)) {
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) | Err(kube::Error::Api(_)) => {}
                Err(e) => return Err(ReconcileError::write(Write::OrdinalClaim, &name, e)),
            }
        }
        Ok(())
    }

    /// Delete the Pod and claim mirrors of namespace `key` that a cluster it is no longer
    /// placed on left behind because its syncer is gone (a live syncer removes its own once
    /// the real objects are gone).
    async fn drop_stale_mirrors(
        &self,
        client: &kube::Client,
        key: &NsKey,
        next: &[ClusterName],
        snapshot: &Snapshot,
    ) -> Result<(), ReconcileError> {
        let (path, ns) = key;
        for (ar, informer) in &self.w.mirrors {
            let api = || Api::<DynamicObject>::namespaced_with(client.clone(), ns, ar);
            for m in informer.store.in_namespace(path.as_str(), ns) {
                let Some(cluster) = labels_of(&m).get(LABEL_CLUSTER).map(ClusterName::new) else {
                    continue;
                };
                if next.contains(&cluster) || snapshot.ready(&cluster) {
                    continue;
                }
                let name = m.metadata.name.clone().unwrap_or_default();
                let params = PatchParams {
                    field_manager: Some(MANAGER.to_string()),
                    ..PatchParams::default()
                };
                let v = serde_json::to_value(&*m).unwrap_or(Value::Null);
                if let Some(patch) = released_finalizers(&v, next) {
                    api()
                        .patch(&name, &params, &Patch::Merge(&patch))
                        .await
                        .map_err(|e| ReconcileError::write(Write::MirrorRelease, &name, e))?;
                }
                if m.metadata.deletion_timestamp.is_none() {
                    let deleted = api()
                        .delete(&name, &kube::api::DeleteParams::default().grace_period(0))
                        .await;
                    match deleted {
                        Ok(_) => {
                            tracing::info!(logical_cluster = %path, namespace = %ns, kind = %ar.kind,
                            %name, %cluster, "removed the mirror a lost cluster left")
                        }
                        Err(kube::Error::Api(s)) if s.code == 404 => {}
                        Err(e) => return Err(ReconcileError::write(Write::MirrorDelete, &name, e)),
                    }
                }
            }
        }
        Ok(())
    }
}

/// How a namespace's workloads split over its clusters: by capacity when spread, filling
/// the first cluster's room first when spilled; nothing to split otherwise.
struct Split {
    mode: Mode,
    clusters: Vec<ClusterView>,
    /// What the shares given so far take on each cluster (spill).
    spent: std::collections::BTreeMap<ClusterName, Resources>,
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
            spent: Default::default(),
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
/// split, or from clusters it left), with the clusters where a claim's copy `held` it to a
/// count; `None` when it is right already.
fn shares_patch(
    v: &Value,
    placed: &[ClusterName],
    shares: Option<&[(ClusterName, i64)]>,
    held: &[(ClusterName, i64)],
    target: &Target,
) -> Option<Value> {
    let spread = shares.is_some();
    let meta = &v["metadata"];
    let mut annotations = serde_json::Map::new();
    for (k, _) in meta["annotations"].as_object().into_iter().flatten() {
        if let Some(c) = k.strip_prefix(REPLICAS_ANNOTATION_PREFIX)
            && (!spread || !placed.iter().any(|p| p.as_str() == c))
            && !held.iter().any(|(h, _)| h.as_str() == c)
            && !matches!(target, Target::Pending(_))
        {
            annotations.insert(k.clone(), Value::Null);
        }
    }
    let shares: Vec<(ClusterName, i64)> = shares
        .into_iter()
        .flatten()
        .filter(|(c, _)| !held.iter().any(|(h, _)| h == c))
        .chain(held.iter())
        .cloned()
        .collect();
    if !shares.is_empty() {
        for (c, n) in &shares {
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

/// Whether workload patch `p` is written before the namespace is placed on the clusters
/// `newly` added: it gives one of them its share, and drops no share or first ordinal.
fn goes_first(p: &Value, newly: &[ClusterName]) -> bool {
    let Some(annotations) = p["metadata"]["annotations"].as_object() else {
        return false;
    };
    let drops = annotations.iter().any(|(k, v)| {
        v.is_null()
            && (k.starts_with(REPLICAS_ANNOTATION_PREFIX)
                || k.starts_with(ORDINALS_ANNOTATION_PREFIX))
    });
    !drops
        && newly.iter().any(|c| {
            annotations
                .get(&replicas_annotation(c))
                .is_some_and(|v| !v.is_null())
        })
}

/// The merge patch that sets StatefulSet `v`'s first ordinal on the clusters of `starts`
/// and drops it from any other; `None` when it is right already.
fn starts_patch(v: &Value, starts: &[(ClusterName, i64)]) -> Option<Value> {
    let have = v["metadata"]["annotations"].as_object();
    let mut annotations = serde_json::Map::new();
    for (k, _) in have.into_iter().flatten() {
        if let Some(c) = k.strip_prefix(ORDINALS_ANNOTATION_PREFIX)
            && !starts.iter().any(|(s, _)| s.as_str() == c)
        {
            annotations.insert(k.clone(), Value::Null);
        }
    }
    for (c, n) in starts {
        let key = ordinals_annotation(c);
        let want = n.to_string();
        if v["metadata"]["annotations"][&key].as_str() != Some(want.as_str()) {
            annotations.insert(key, Value::from(want));
        }
    }
    (!annotations.is_empty()).then(|| json!({"metadata": {"annotations": annotations}}))
}

/// Two merge patches of annotations as one.
fn merged(a: Option<Value>, b: Option<Value>) -> Option<Value> {
    match (a, b) {
        (Some(mut a), Some(b)) => {
            if let (Some(into), Some(from)) = (
                a["metadata"]["annotations"].as_object_mut(),
                b["metadata"]["annotations"].as_object(),
            ) {
                into.extend(from.clone());
            }
            Some(a)
        }
        (a, b) => a.or(b),
    }
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
            shares_patch(&o, &b, None, &[], &target),
            Some(json!({"metadata": {"annotations": {"replicas.sluice.dev/a": null}}}))
        );
        // While pending, the shares it had stay (its pods keep running where they are).
        let pending = Target::Pending(schedule::Pending::ClusterNotFound("c".into()));
        assert_eq!(shares_patch(&o, &b, None, &[], &pending), None);
        let ab = [ClusterName::new("a"), ClusterName::new("b")];
        let target = Target::On {
            clusters: ab.to_vec(),
            mode: Mode::Spread,
        };
        let shares = schedule::shares(3, &ab);
        let p = shares_patch(&o, &ab, Some(&shares), &[], &target).unwrap();
        assert_eq!(
            p,
            json!({"metadata": {"annotations": {"replicas.sluice.dev/b": "1"}}})
        );
    }

    #[test]
    fn a_new_clusters_share_goes_before_the_namespace_and_a_drop_after() {
        let (a, b) = (ClusterName::new("a"), ClusterName::new("b"));
        // A spill to b: b's share (and a's smaller one) before b runs the namespace.
        let spill = json!({"metadata": {"annotations": {
            "replicas.sluice.dev/a": "3", "replicas.sluice.dev/b": "1"}}});
        assert!(goes_first(&spill, std::slice::from_ref(&b)));
        // Nothing newly placed: as before, after.
        assert!(!goes_first(&spill, &[]));
        // Only an existing cluster's share changes: after.
        let grow = json!({"metadata": {"annotations": {"replicas.sluice.dev/a": "4"}}});
        assert!(!goes_first(&grow, std::slice::from_ref(&b)));
        // A share and a first ordinal change together, and a drop runs nothing whole
        // early: after, whole.
        let ordinals = json!({"metadata": {"annotations": {
            "replicas.sluice.dev/b": "3", "ordinals.sluice.dev/b": null}}});
        assert!(!goes_first(&ordinals, std::slice::from_ref(&b)));
        let leaving = json!({"metadata": {"annotations": {
            "replicas.sluice.dev/b": "2", "replicas.sluice.dev/a": null}}});
        assert!(!goes_first(&leaving, &[a, b]));
        // A claim's asked copy is no share.
        let asked = json!({"metadata": {"annotations": {"copy.sluice.dev/asked": "x"}}});
        assert!(!goes_first(&asked, &[ClusterName::new("b")]));
    }

    #[test]
    fn state_labels_change_only_for_the_clusters_that_differ() {
        let (a, b, c) = (
            ClusterName::new("a"),
            ClusterName::new("b"),
            ClusterName::new("c"),
        );
        let p = state_labels_patch(&[a.clone(), b.clone()], &[b, c]);
        assert_eq!(
            p,
            json!({"state.sluice.dev/a": null, "state.sluice.dev/c": "Sync"})
        );
    }
}
