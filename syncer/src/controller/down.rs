//! One downstream namespace made what upstream says: the namespace first, every placed
//! object applied unless the downstream one already contains it, its status reported up
//! and this cluster's finalizer held on it, then what is no longer placed deleted, and the
//! namespace itself once nothing of it is placed anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, Patch};
use serde_json::Value;
use sluice_api::LogicalClusterPath;
use sluice_api::claim_copy::Holding;
use sluice_api::sync::{share_on, sync_finalizer};

use super::report::{report_status, set_finalizer};
use super::state::Sides;
use super::warnings::refused;
use super::watched::{KindSync, Watched, placed_anywhere};
use super::write::{apply_params, delete, holds, in_place};
use crate::drift::contained;
use crate::transform::{Origin, downstream, namespace_object};

/// Sync downstream namespace `down_ns`, which holds upstream namespace `source` when
/// known (a downstream namespace of unknown origin holds nothing placed: what it has
/// goes); false if a write failed.
pub async fn sync_namespace(
    s: &Sides,
    w: &Watched,
    down_ns: &str,
    source: Option<&(LogicalClusterPath, String)>,
) -> bool {
    let (syncer, config, upstream) = (&*s.syncer, &s.config, &s.upstream);
    let mut ok = true;
    let ns_api: Api<Namespace> = Api::all(config.downstream.clone());
    let finalizer = sync_finalizer(&config.cluster);
    let mut origin: Option<Origin> = None;
    let mut desired: Vec<(&KindSync, Value)> = Vec::new();
    // Upstream objects whose status this cluster reports, with what they say now.
    let mut reporting: Vec<(&KindSync, Origin, Value)> = Vec::new();
    // Upstream objects to put this cluster's finalizer on once synced, and those being
    // deleted upstream that wait for their downstream copy to go.
    let mut to_hold: Vec<(&KindSync, Origin, Arc<DynamicObject>)> = Vec::new();
    let mut deleting: Vec<(&KindSync, Origin, Arc<DynamicObject>)> = Vec::new();
    if let Some((path, up_ns)) = source {
        // What mounts a claim still being copied here does not run here yet.
        let holding = w
            .logical_namespaces
            .get_in(path.as_str(), "", up_ns)
            .and_then(|n| Holding::of(n.metadata.annotations.as_ref()))
            .filter(|h| h.cluster == config.cluster);
        let held = |kind: &str, v: &Value| {
            holding
                .as_ref()
                .is_some_and(|h| h.holds(kind, v, &config.cluster))
        };
        for k in w.kinds.iter().filter(|k| k.up.is_ready()) {
            for obj in k.up.store.in_namespace(path.as_str(), up_ns) {
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
                        if k.kind.kind == "Pod" && share_on(&json, &config.cluster) == Some(0) => {}
                    // While a claim it mounts is being copied here, a workload with
                    // replicas runs none (below); one without (a Pod, a Job, a CronJob,
                    // a DaemonSet) is not made here yet (one already here is left as it
                    // is, not deleted).
                    Ok((_, d))
                        if held(k.kind.kind, &json)
                            && !d["spec"]["replicas"].is_i64()
                            && k.down
                                .store
                                .get(down_ns, obj.metadata.name.as_deref().unwrap_or(""))
                                .is_none() => {}
                    Ok((o, mut d)) => {
                        if held(k.kind.kind, &json) && d["spec"]["replicas"].is_i64() {
                            d["spec"]["replicas"] = Value::from(0);
                        }
                        if k.kind.kind == "StatefulSet" {
                            crate::ordinals::run_ready_ordinals(&mut d, |claim| {
                                ordinal_claim_ready(w, path, up_ns, down_ns, claim)
                                    && !holding
                                        .as_ref()
                                        .is_some_and(|h| h.claims.iter().any(|c| c == claim))
                            });
                        }
                        if k.kind.kind == "Service" {
                            let ns = w.logical_namespaces.get_in(path.as_str(), "", up_ns);
                            let annotations =
                                ns.as_ref().and_then(|n| n.metadata.annotations.as_ref());
                            crate::transform::with_traffic(&mut d, annotations, &config.cluster);
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
    let imported = source.is_some_and(|(path, up_ns)| {
        w.logical_namespaces
            .get_in(path.as_str(), "", up_ns)
            .is_some_and(|n| placed_anywhere(&n))
    });
    let have_ns = w.namespaces.get("", down_ns);
    // The namespace here holds another upstream namespace (names that collide): not ours
    // to write, nor to empty.
    if let (Some(have), Some(up)) = (&have_ns, source)
        && let Some(holder) = crate::sources::owner_of(&have.metadata)
        && holder != *up
    {
        syncer.sources.refuse(crate::sources::Conflict {
            downstream: down_ns.to_string(),
            holder,
            claimant: up.clone(),
        });
        return true;
    }
    let wanted_ns = match (&origin, source) {
        (Some(o), _) => Some((&o.logical_cluster, o.namespace.as_str())),
        (None, Some((path, up_ns))) if imported => Some((path, up_ns.as_str())),
        _ => None,
    };
    if let Some((path, up_ns)) = wanted_ns {
        let level = w
            .logical_namespaces
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
                return false;
            }
        }
    }

    // What is downstream now, by kind and name.
    let mut actual: BTreeMap<(&str, String), Value> = BTreeMap::new();
    let stores: Vec<(&KindSync, Vec<Arc<DynamicObject>>)> = w
        .kinds
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
        let key = (k.kind.kind, down_ns.to_string(), name.to_string());
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
            // The cluster refuses it (invalid there, a kind it does not serve): said once,
            // upstream, as an Event on the object; retried when it changes, not every
            // second.
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

    // Synced objects carry this cluster's finalizer, so that their upstream deletion waits
    // for the downstream one.
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
    // too, once every upstream informer has listed (before that, "nothing placed" may only
    // mean "not listed yet").
    if wanted_ns.is_none()
        && w.kinds.iter().all(|k| k.up.is_ready())
        && w.logical_namespaces.is_ready()
        && have_ns.is_some_and(|n| n.metadata.deletion_timestamp.is_none())
    {
        ok &= delete(syncer, "Namespace", &ns_api, "", down_ns).await;
    }
    ok
}

/// Whether claim `claim` of a StatefulSet's ordinal is there for it: made in the logical
/// cluster (it comes down as any claim), or made by this cluster itself before the logical
/// cluster made them (a set that ran before then keeps its own).
fn ordinal_claim_ready(
    w: &Watched,
    path: &LogicalClusterPath,
    up_ns: &str,
    down_ns: &str,
    claim: &str,
) -> bool {
    let upstream = w
        .kinds
        .iter()
        .find(|k| k.kind.kind == "PersistentVolumeClaim")
        .and_then(|k| k.up.store.get_in(path.as_str(), up_ns, claim))
        .is_some_and(|c| c.metadata.deletion_timestamp.is_none());
    upstream || w.claims.store.get(down_ns, claim).is_some()
}
