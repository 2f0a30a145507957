//! Pod mirrors: every pod of a synced namespace has a read-only mirror in its logical
//! cluster (metadata, spec and status as the pod says), updated when the pod changes and
//! deleted when it is gone; a mirror deleted upstream deletes the pod first.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::Value;
use sluice_api::sync::{FIELD_MANAGER, LABEL_SYNCED, finalizers_patch, sync_finalizer};
use sluice_api::{LOGICAL_CLUSTER_ANNOTATION, LogicalClusterPath};

use super::state::Sides;
use super::watched::Watched;
use super::write::{counted, delete, in_place, manager_params};
use crate::transform::Origin;

/// Mirror the pods of downstream namespace `down_ns` into upstream namespace `source`;
/// false if a write failed.
pub async fn mirror_pods(
    s: &Sides,
    w: &Watched,
    down_ns: &str,
    source: Option<&(LogicalClusterPath, String)>,
) -> bool {
    if !w.pods.is_ready() || !w.mirrors.is_ready() {
        return true;
    }
    let Some((path, up_ns)) = source else {
        return true;
    };
    let (syncer, config) = (&*s.syncer, &s.config);
    let mut ok = true;
    // The mirrors there are, by name.
    let mirrored: BTreeMap<String, Value> = w
        .mirrors
        .store
        .in_namespace(path.as_str(), up_ns)
        .into_iter()
        .filter(|m| {
            m.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(LOGICAL_CLUSTER_ANNOTATION))
                .is_some()
        })
        .filter_map(|m| Some((m.metadata.name.clone()?, serde_json::to_value(&*m).ok()?)))
        .collect();
    let client = match s.upstream.at(path) {
        Ok(c) => c,
        Err(_) => return false,
    };
    let api: Api<Pod> = Api::namespaced(client, up_ns);
    let mut wanted: BTreeSet<String> = BTreeSet::new();
    for p in w.pods.store.in_namespace("", down_ns) {
        let Some(name) = p.metadata.name.as_deref() else {
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
        wanted.insert(name.to_string());
        let have = mirrored.get(name);
        // The mirror was deleted upstream: the real Pod goes first (its controller makes a
        // new one); the mirror follows once it is gone.
        if have.is_some_and(|h| !h["metadata"]["deletionTimestamp"].is_null()) {
            if p.metadata.deletion_timestamp.is_none() {
                let pods: Api<Pod> = Api::namespaced(config.downstream.clone(), down_ns);
                ok &= delete(syncer, "Pod", &pods, down_ns, name).await;
            }
            continue;
        }
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
    for (name, mirror) in &mirrored {
        if wanted.contains(name) {
            continue;
        }
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
                tracing::debug!(namespace = %up_ns, pod = %name, error = %e, "releasing the mirror failed");
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
            tracing::warn!(namespace = %up_ns, pod = %name, error = %e, "removing the pod's mirror failed");
            ok = false;
        }
    }
    ok
}
