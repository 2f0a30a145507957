//! Mirrors: every pod of a synced namespace, and every claim its cluster made (a
//! StatefulSet's, from its claim templates), has a read-only mirror in its logical cluster
//! (metadata, spec and status as the cluster says), updated when it changes and deleted
//! when it is gone; a mirror deleted upstream deletes the real object first. A mirror is
//! created, never taken over: while another cluster's mirror holds the name (a
//! StatefulSet's `db-0` on both clusters of a move), this cluster's waits for it to go.
//! The claims a cluster made for a namespace that has left it are deleted once unmounted.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::Value;
use sluice_api::ClusterName;
use sluice_api::sync::{
    FIELD_MANAGER, LABEL_SYNCED, finalizers_patch, state_label, sync_finalizer,
};
use sluice_api::{LOGICAL_CLUSTER_ANNOTATION, LogicalClusterPath};
use sluice_kube::informer::Store;

use super::state::Sides;
use super::watched::Watched;
use super::write::{counted, delete, in_place, manager_params};
use crate::transform::Origin;

/// Mirror the pods and the cluster's own claims of downstream namespace `down_ns` into
/// upstream namespace `source`; false if a write failed.
pub async fn mirror_all(
    s: &Sides,
    w: &Watched,
    down_ns: &str,
    source: Option<&(LogicalClusterPath, String)>,
) -> bool {
    if !w.pods.is_ready() || !w.mirrors.is_ready() {
        return true;
    }
    let pods = Mirrored {
        kind: "Pod",
        down: &w.pods.store,
        up: &w.mirrors.store,
        to_mirror: crate::mirror::pod,
    };
    let mut ok = mirror(s, &pods, down_ns, source).await;
    if w.claims.is_ready() && w.claim_mirrors.is_ready() {
        ok &= release_claims(s, w, down_ns, source).await;
        let claims = Mirrored {
            kind: "PersistentVolumeClaim",
            down: &w.claims.store,
            up: &w.claim_mirrors.store,
            to_mirror: crate::mirror::claim,
        };
        ok &= mirror(s, &claims, down_ns, source).await;
    }
    ok
}

/// Once the namespace has left this cluster (moved, or its cluster drained), the claims
/// the cluster made for it (a StatefulSet's) go too, as each is no longer mounted: the
/// workloads that used them run elsewhere now, and the volume behind each is reclaimed by
/// its class's policy. False if a deletion failed.
async fn release_claims(
    s: &Sides,
    w: &Watched,
    down_ns: &str,
    source: Option<&(LogicalClusterPath, String)>,
) -> bool {
    let Some((path, up_ns)) = source else {
        return true;
    };
    let placed_here = w
        .logical_namespaces
        .get_in(path.as_str(), "", up_ns)
        .is_some_and(|n| {
            n.metadata.deletion_timestamp.is_none()
                && n.metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key(&state_label(&s.config.cluster)))
        });
    if placed_here || !w.logical_namespaces.is_ready() {
        return true;
    }
    let pods = w.pods.store.in_namespace("", down_ns);
    let mounted = |claim: &str| {
        pods.iter()
            .any(|p| sluice_kube::pod::mounts_claim(p, claim))
    };
    let api: Api<PersistentVolumeClaim> = Api::namespaced(s.config.downstream.clone(), down_ns);
    let mut ok = true;
    for c in w.claims.store.in_namespace("", down_ns) {
        let made_here = !c
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(LABEL_SYNCED));
        let Some(name) = c.metadata.name.as_deref() else {
            continue;
        };
        if made_here && c.metadata.deletion_timestamp.is_none() && !mounted(name) {
            tracing::info!(namespace = %down_ns, claim = name, "the namespace left this cluster: its claim goes");
            ok &= delete(&s.syncer, "PersistentVolumeClaim", &api, down_ns, name).await;
        }
    }
    ok
}

/// One mirrored kind: the cluster's objects, their mirrors upstream, and how a mirror is
/// made from an object.
struct Mirrored<'a, K: kube::Resource + 'static> {
    kind: &'static str,
    down: &'a Store<K>,
    up: &'a Store<K>,
    to_mirror: fn(&Value, &Origin, &ClusterName) -> Option<Value>,
}

/// Mirror `m`'s objects of downstream namespace `down_ns` into upstream namespace `source`.
async fn mirror<K>(
    s: &Sides,
    m: &Mirrored<'_, K>,
    down_ns: &str,
    source: Option<&(LogicalClusterPath, String)>,
) -> bool
where
    K: kube::Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let Some((path, up_ns)) = source else {
        return true;
    };
    let (syncer, config) = (&*s.syncer, &s.config);
    let mut ok = true;
    // The mirrors there are, by name.
    let mirrored: BTreeMap<String, Value> =
        m.up.in_namespace(path.as_str(), up_ns)
            .into_iter()
            .filter(|o| {
                o.meta()
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(LOGICAL_CLUSTER_ANNOTATION))
                    .is_some()
            })
            .filter_map(|o| Some((o.meta().name.clone()?, serde_json::to_value(&*o).ok()?)))
            .collect();
    let client = match s.upstream.at(path) {
        Ok(c) => c,
        Err(_) => return false,
    };
    let api: Api<K> = Api::namespaced(client, up_ns);
    let kind = m.kind;
    let mut wanted: BTreeSet<String> = BTreeSet::new();
    for p in m.down.in_namespace("", down_ns) {
        let Some(name) = p.meta().name.as_deref() else {
            continue;
        };
        // A copy of an object made upstream reports to that object; it has no mirror.
        if p.meta()
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(LABEL_SYNCED))
        {
            continue;
        }
        let origin = Origin {
            logical_cluster: path.clone(),
            namespace: up_ns.clone(),
            name: name.to_string(),
        };
        let Ok(down) = serde_json::to_value(&*p) else {
            continue;
        };
        let Some(want) = (m.to_mirror)(&down, &origin, &config.cluster) else {
            continue;
        };
        wanted.insert(name.to_string());
        let have = mirrored.get(name);
        // The mirror was deleted upstream: the real object goes first (a Pod's controller
        // makes a new one); the mirror follows once it is gone.
        if have.is_some_and(|h| !h["metadata"]["deletionTimestamp"].is_null()) {
            if p.meta().deletion_timestamp.is_none() {
                let real: Api<K> = Api::namespaced(config.downstream.clone(), down_ns);
                ok &= delete(syncer, kind, &real, down_ns, name).await;
            }
            continue;
        }
        let mut meta_spec = want.clone();
        if let Some(o) = meta_spec.as_object_mut() {
            o.remove("status");
        }
        let written = match have {
            // Created, never taken over: a name held by another cluster's mirror waits.
            None => Some(match serde_json::from_value::<K>(meta_spec) {
                Ok(obj) => {
                    let params = PostParams {
                        field_manager: Some(FIELD_MANAGER.to_string()),
                        ..PostParams::default()
                    };
                    api.create(&params, &obj).await.map(|_| ())
                }
                Err(e) => Err(kube::Error::SerdeError(e)),
            }),
            Some(h) if !in_place(&meta_spec, h) => {
                let params = PatchParams::apply(FIELD_MANAGER).force();
                Some(
                    api.patch(name, &params, &Patch::Apply(&meta_spec))
                        .await
                        .map(|_| ()),
                )
            }
            Some(_) => None,
        };
        if let Some(w) = &written {
            syncer.metrics.write(kind, "mirror", w.is_ok());
        }
        match written.unwrap_or(Ok(())) {
            Ok(()) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {
                tracing::debug!(namespace = %up_ns, kind, name, "the name is another cluster's mirror: waiting for it to go");
                ok = false;
                continue;
            }
            Err(e) => {
                tracing::warn!(namespace = %up_ns, kind, name, error = %e, "mirroring failed");
                ok = false;
                continue;
            }
        }
        if have.is_none_or(|h| h["status"] != want["status"]) {
            let patch = serde_json::json!({"status": want["status"]});
            let written = api
                .patch_status(name, &manager_params(), &Patch::Merge(&patch))
                .await;
            syncer.metrics.write(kind, "mirror", written.is_ok());
            if let Err(e) = written {
                tracing::warn!(namespace = %up_ns, kind, name, error = %e, "mirroring the status failed");
                ok = false;
            }
        }
    }
    let finalizer = sync_finalizer(&config.cluster);
    for (name, mirror) in &mirrored {
        if wanted.contains(name) {
            continue;
        }
        // The real object is gone: release the mirror, then delete it (a mirror deleted
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
            if let Err(e) = counted(syncer, kind, "release", released) {
                tracing::debug!(namespace = %up_ns, kind, name = %name, error = %e, "releasing the mirror failed");
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
        if let Err(e) = counted(syncer, kind, "unmirror", deleted) {
            tracing::warn!(namespace = %up_ns, kind, name = %name, error = %e, "removing the mirror failed");
            ok = false;
        }
    }
    ok
}
