//! Claims marked shared (`sluice.dev/storage: shared`, docs/stateful.md): once such a claim
//! is bound here, say on it whether the volume is storage outside this cluster (every
//! cluster that binds the claim mounts the same data, so a move copies nothing) or this
//! cluster's own (a `local` or `hostPath` volume: the data then moves like any claim's).
//! The `sluice.dev/Shared` condition travels up with the claim's status report; placement
//! reads it from the cluster the app leaves.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use sluice_api::claim_copy::{
    CLUSTER_LOCAL, DELETED_WITH_CLAIM, NETWORK_STORAGE, SHARED_CONDITION, Storage,
};

use super::state::Sides;
use super::watched::Watched;
use super::write::counted;

/// What the volume a claim is bound to is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Where {
    /// Outside this cluster: the volume source's kind (`nfs`, `csi` ...).
    Network(String),
    /// This cluster's own: `local` or `hostPath`, on the node it names.
    ClusterLocal(String),
    /// Outside this cluster, but deleted with its claim (`reclaimPolicy: Delete`): the
    /// claim going here, as it does when the app leaves, would delete what the next
    /// cluster mounts.
    DeletedWithClaim(String),
}

/// What `pv`'s source is.
pub fn classify(pv: &PersistentVolume) -> Where {
    let spec = serde_json::to_value(pv.spec.clone().unwrap_or_default()).unwrap_or_default();
    let source = spec.as_object().and_then(|m| {
        m.iter()
            .find(|(k, v)| v.is_object() && !NOT_SOURCES.contains(&k.as_str()))
            .map(|(k, _)| k.clone())
    });
    match source {
        Some(k) if k == "local" || k == "hostPath" => Where::ClusterLocal(k),
        Some(k) if spec["persistentVolumeReclaimPolicy"] == "Delete" => Where::DeletedWithClaim(k),
        Some(k) => Where::Network(k),
        None => Where::ClusterLocal("no volume source".into()),
    }
}

/// The object fields of a PersistentVolume's spec that are not its volume source.
const NOT_SOURCES: [&str; 5] = [
    "capacity",
    "claimRef",
    "nodeAffinity",
    "mountOptions",
    "volumeAttributesClassName",
];

/// The condition `volume` (what it is: `at`) earns a claim marked shared.
pub fn condition(volume: &str, at: &Where) -> (&'static str, &'static str, String) {
    match at {
        Where::Network(kind) => (
            "True",
            NETWORK_STORAGE,
            format!(
                "bound to volume {volume} ({kind}), storage outside this cluster: every cluster that binds the claim mounts the same data"
            ),
        ),
        Where::DeletedWithClaim(kind) => (
            "False",
            DELETED_WITH_CLAIM,
            format!(
                "bound to volume {volume} ({kind}) of reclaimPolicy Delete: the app leaving this cluster would delete the data the next one mounts; give the class reclaimPolicy Retain"
            ),
        ),
        Where::ClusterLocal(kind) => (
            "False",
            CLUSTER_LOCAL,
            format!(
                "bound to volume {volume} ({kind}), storage of this cluster alone: its data moves with the app like a ReadWriteOnce claim's"
            ),
        ),
    }
}

fn marked_and_unsaid(c: &PersistentVolumeClaim) -> Option<&str> {
    if Storage::of(c.metadata.annotations.as_ref()) != Storage::Shared {
        return None;
    }
    let status = c.status.as_ref()?;
    if status.phase.as_deref() != Some("Bound")
        || status
            .conditions
            .iter()
            .flatten()
            .any(|k| k.type_ == SHARED_CONDITION)
    {
        return None;
    }
    c.spec
        .as_ref()?
        .volume_name
        .as_deref()
        .filter(|v| !v.is_empty())
}

/// Say on each claim of `down_ns` marked shared and newly bound what its volume is; false
/// if a read or write failed.
pub async fn report(s: &Sides, w: &Watched, down_ns: &str) -> bool {
    let mut ok = true;
    for c in w.claims.store.in_namespace("", down_ns) {
        let (Some(volume), Some(name)) = (marked_and_unsaid(&c), c.metadata.name.as_deref()) else {
            continue;
        };
        let pvs: Api<PersistentVolume> = Api::all(s.config.downstream.clone());
        let pv = match pvs.get_opt(volume).await {
            Ok(Some(pv)) => pv,
            // Not in this cluster's view yet: looked for again.
            Ok(None) => {
                ok = false;
                continue;
            }
            Err(e) => {
                tracing::warn!(namespace = %down_ns, claim = %name, %volume, error = %e,
                    "reading a shared claim's volume failed");
                ok = false;
                continue;
            }
        };
        let at = classify(&pv);
        let (status, reason, message) = condition(volume, &at);
        let now = k8s_openapi::jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let patch = json!({"status": {"conditions": [{
            "type": SHARED_CONDITION, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": now, "lastProbeTime": now,
        }]}});
        let api: Api<PersistentVolumeClaim> = Api::namespaced(s.config.downstream.clone(), down_ns);
        let r = api
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await;
        let written = counted(&s.syncer, "PersistentVolumeClaim", "status", r).is_ok();
        if written {
            tracing::info!(namespace = %down_ns, claim = %name, %volume, shared = status, %reason, "a shared claim's storage is known");
        }
        ok &= written;
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pv(spec: serde_json::Value) -> PersistentVolume {
        serde_json::from_value(json!({"metadata": {"name": "pvc-1"}, "spec": spec}))
            .unwrap_or_default()
    }

    #[test]
    fn network_sources_are_shared_and_node_paths_are_not() {
        let nfs = pv(
            json!({"capacity": {"storage": "1Gi"}, "claimRef": {"name": "c"},
            "nfs": {"server": "files", "path": "/a"}}),
        );
        assert_eq!(classify(&nfs), Where::Network("nfs".into()));
        let local = pv(json!({"local": {"path": "/v"}, "nodeAffinity": {"required": {}}}));
        assert_eq!(classify(&local), Where::ClusterLocal("local".into()));
        let host = pv(json!({"hostPath": {"path": "/v"}}));
        assert_eq!(classify(&host), Where::ClusterLocal("hostPath".into()));
        let csi = pv(json!({"csi": {"driver": "efs.csi.aws.com", "volumeHandle": "fs-1"}}));
        assert_eq!(classify(&csi), Where::Network("csi".into()));
        let deleted = pv(json!({"persistentVolumeReclaimPolicy": "Delete",
            "nfs": {"server": "files", "path": "/a"}}));
        assert_eq!(classify(&deleted), Where::DeletedWithClaim("nfs".into()));
        assert_eq!(
            condition("pvc-1", &Where::Network("nfs".into())).1,
            NETWORK_STORAGE
        );
        assert_eq!(
            condition("pvc-1", &Where::ClusterLocal("local".into())).0,
            "False"
        );
    }
}
