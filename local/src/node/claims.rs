//! PersistentVolumeClaims on a local node, provisioned when a Pod first mounts them (as a
//! local-path provisioner with `WaitForFirstConsumer` binding does): the claim's volume is
//! the directory `<volumes>/claims/<claim uid>`, which outlives the Pods that mount it, and
//! the claim is reported `Bound` with the access modes and capacity it asked for. The
//! directory stays when the claim is deleted (reclaim policy `Retain`); a claim made again
//! under the same name has a new uid, so it starts empty. Block volumes and claims made
//! from a data source are refused.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

/// The directory of claim `name` in `ns`, made and the claim bound if it is not yet.
pub async fn provision(
    client: &kube::Client,
    volumes: &Path,
    ns: &str,
    name: &str,
) -> Result<PathBuf, String> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let claim = match api.get_opt(name).await {
        Ok(Some(c)) => c,
        Ok(None) => return Err(format!("persistentvolumeclaim {name:?} not found")),
        Err(e) => return Err(format!("persistentvolumeclaim {name:?}: {e}")),
    };
    if claim.metadata.deletion_timestamp.is_some() {
        return Err(format!("persistentvolumeclaim {name:?} is being deleted"));
    }
    // What a directory cannot be is refused, not quietly made an empty directory.
    if let Some(spec) = &claim.spec {
        if spec.volume_mode.as_deref() == Some("Block") {
            return Err(format!(
                "persistentvolumeclaim {name:?}: block volumes are not supported by local clusters"
            ));
        }
        if spec.data_source.is_some() || spec.data_source_ref.is_some() {
            return Err(format!(
                "persistentvolumeclaim {name:?}: a dataSource (clone or snapshot) is not supported by local clusters"
            ));
        }
    }
    let uid = claim.metadata.uid.clone().unwrap_or_default();
    if uid.is_empty() || uid.contains('/') || uid == "." || uid == ".." {
        return Err(format!("persistentvolumeclaim {name:?} has no usable uid"));
    }
    let dir = volumes.join("claims").join(&uid);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let bound = claim
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Bound");
    if !bound {
        let spec = claim.spec.unwrap_or_default();
        let storage = spec
            .resources
            .and_then(|r| r.requests)
            .and_then(|r| r.get("storage").cloned());
        let status = json!({"status": {
            "phase": "Bound",
            "accessModes": spec.access_modes.unwrap_or_default(),
            "capacity": storage.map(|s| json!({"storage": s})).unwrap_or(json!({})),
        }});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .map_err(|e| format!("binding persistentvolumeclaim {name:?}: {e}"))?;
    }
    Ok(dir)
}
