//! PersistentVolumeClaims on a local node, as a local-path provisioner with
//! `WaitForFirstConsumer` binding serves them: the cluster has one default StorageClass,
//! [`STORAGE_CLASS`], made by the node agent at start; a claim of that class is provisioned
//! when a Pod first mounts it — a directory `<volumes>/claims/<claim uid>` that outlives the
//! Pods that mount it, a PersistentVolume `pvc-<claim uid>` pinned to this node and bound to
//! the claim, and the claim `Bound` to it with the access modes and capacity it asked for.
//! A claim of `volumeMode: Block` is an image file `<volumes>/claims/<claim uid>.img`
//! served as a loop device ([`super::block`]). A claim larger than what the node's disk has
//! free, of a class that does not exist or that another provisioner serves, or made from a
//! data source other than another claim ([`super::clone`]) is refused with kube's reason,
//! and its Pod waits. What happens when the claim goes is [`super::reclaim`]'s part.
//!
//! A node started with shared storage (`sluice node --shared-storage DIR`: one directory
//! every local cluster of the clusterset reaches, the machine's stand-in for a network file
//! server) also has the class [`SHARED_CLASS`]: a claim of it is an `nfs` volume at
//! `/<namespace>/<claim>` of that server — the same directory for the same claim on every
//! cluster, as an NFS subdirectory provisioner with a path pattern gives on real clusters.
//! Its data is kept when the claim goes (`Retain`): other clusters may still mount it.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use super::claim_volume::{claim_dir, volume_name};

/// The name of the local clusters' default StorageClass (kind's and k3s's name for theirs).
pub const STORAGE_CLASS: &str = "standard";
/// The provisioner the class names, and the annotation on what it provisioned.
pub const PROVISIONER: &str = "sluice.dev/local-path";
/// The class of storage every local cluster reaches, on nodes started with shared storage.
pub const SHARED_CLASS: &str = "shared";
/// The provisioner of [`SHARED_CLASS`], and the annotation on what it provisioned.
pub const SHARED_PROVISIONER: &str = "sluice.dev/shared-path";
/// The `nfs` server the shared volumes name: the clusterset's shared storage directory.
pub const SHARED_SERVER: &str = "shared.sluice.local";
/// The annotation that makes a StorageClass the default.
const DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";

/// Make the default StorageClass, and the shared one when the node has shared storage,
/// unless they exist (an administrator may have changed them: they are not written over).
pub async fn ensure_storage_class(client: &kube::Client, shared: bool) -> Result<(), kube::Error> {
    let api: Api<StorageClass> = Api::all(client.clone());
    let mut classes = vec![json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": STORAGE_CLASS, "annotations": {DEFAULT_CLASS: "true"}},
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowVolumeExpansion": false,
    })];
    if shared {
        classes.push(json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": SHARED_CLASS},
            "provisioner": SHARED_PROVISIONER,
            "reclaimPolicy": "Retain",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowVolumeExpansion": false,
        }));
    }
    for class in classes {
        let class: StorageClass = serde_json::from_value(class).map_err(kube::Error::SerdeError)?;
        match api.create(&PostParams::default(), &class).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The directory of claim `name` of namespace `ns` in the shared storage `root`: the same on
/// every cluster (a namespace is a DNS label and a claim a DNS subdomain; anything else is
/// not a directory here).
pub fn shared_dir(root: &Path, ns: &str, name: &str) -> Option<PathBuf> {
    let plain = |s: &str| !s.is_empty() && s != "." && s != ".." && !s.contains('/');
    (plain(ns) && plain(name)).then(|| root.join(ns).join(name))
}

/// How a container asks for a claim; it must agree with the claim's `volumeMode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    /// In `volumeMounts`: a file system (a directory here).
    Mount,
    /// In `volumeDevices`: a raw block device ([`super::block`]).
    Device,
}

/// The volume of claim `name` in `ns`, for a Pod on `node`: a directory, or for a block
/// claim its image file; provisioned and bound if it is not yet.
pub async fn provision(
    client: &kube::Client,
    volumes: &Path,
    shared: Option<&Path>,
    node: &str,
    ns: &str,
    name: &str,
    used: Use,
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
    let uid = claim.metadata.uid.clone().unwrap_or_default();
    let dir = claim_dir(volumes, &uid)
        .ok_or_else(|| format!("persistentvolumeclaim {name:?} has no usable uid"))?;
    let spec = claim.spec.clone().unwrap_or_default();
    // kubelet's check: a claim is a file system or a device, never the other.
    let block = spec.volume_mode.as_deref() == Some("Block");
    match (block, used) {
        (true, Use::Mount) => {
            return Err(format!(
                "volume {name:?} has volumeMode Block, but is specified in volumeMounts"
            ));
        }
        (false, Use::Device) => {
            return Err(format!(
                "volume {name:?} has volumeMode Filesystem, but is specified in volumeDevices"
            ));
        }
        _ => {}
    }
    let image = || super::block::image(volumes, &uid).map_err(|e| e.to_string());
    let bound_here = spec.volume_name.as_deref() == Some(volume_name(&uid).as_str())
        && claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
    let shared_dir = || {
        let root = shared.ok_or_else(|| {
            format!("persistentvolumeclaim {name:?} is of shared storage, which this node does not reach")
        })?;
        shared_dir(root, ns, name)
            .ok_or_else(|| format!("persistentvolumeclaim {name:?} cannot name a directory"))
    };
    if bound_here && block {
        let image = image()?;
        if !image.is_file() {
            return Err(format!(
                "persistentvolumeclaim {name:?}: its block volume {} is gone from this node",
                image.display()
            ));
        }
        return Ok(image);
    }
    if bound_here {
        // Which storage it is comes from the volume this node made, never from the claim
        // (whose annotations the tenant writes).
        let pvs: Api<PersistentVolume> = Api::all(client.clone());
        let pv = pvs
            .get_opt(&volume_name(&uid))
            .await
            .map_err(|e| format!("persistentvolume {:?}: {e}", volume_name(&uid)))?;
        let shared_volume = pv.as_ref().is_some_and(|pv| {
            pv.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("pv.kubernetes.io/provisioned-by"))
                .is_some_and(|p| p == SHARED_PROVISIONER)
        });
        let dir = if shared_volume { shared_dir()? } else { dir };
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        return Ok(dir);
    }
    if let Some(volume) = spec.volume_name.as_deref().filter(|v| !v.is_empty())
        && volume != volume_name(&uid)
    {
        return Err(format!(
            "persistentvolumeclaim {name:?} names volume {volume:?}: local clusters bind only the volumes they provision"
        ));
    }
    let clone_of = super::clone::source(&claim, name)?;
    if block && clone_of.is_some() {
        return Err(format!(
            "persistentvolumeclaim {name:?}: local clusters do not clone block volumes"
        ));
    }
    let class = storage_class(client, spec.storage_class_name.as_deref()).await?;
    let reclaim = class
        .reclaim_policy
        .as_deref()
        .unwrap_or("Delete")
        .to_string();
    let class_name = class.metadata.name.clone().unwrap_or_default();
    let is_shared = class.provisioner == SHARED_PROVISIONER;
    if is_shared && reclaim != "Retain" {
        return Err(format!(
            "storageclass.storage.k8s.io {class_name:?}: shared storage keeps its data when a claim goes (reclaimPolicy: Retain), since other clusters may still mount it; it is {reclaim}"
        ));
    }
    if is_shared
        && sluice_api::claim_copy::Storage::of(claim.metadata.annotations.as_ref())
            != sluice_api::claim_copy::Storage::Shared
    {
        return Err(format!(
            "persistentvolumeclaim {name:?}: class {class_name:?} is storage every cluster mounts; annotate the claim {}: shared (a claim whose data moves would be copied onto itself)",
            sluice_api::claim_copy::STORAGE_ANNOTATION
        ));
    }
    if is_shared && block {
        return Err(format!(
            "persistentvolumeclaim {name:?}: class {class_name:?} is shared file storage, which has no block volumes"
        ));
    }
    let (dir, room) = if is_shared {
        let dir = shared_dir()?;
        let root = shared.unwrap_or(volumes).to_path_buf();
        (dir, root)
    } else {
        (dir, volumes.to_path_buf())
    };
    let provisioner = if is_shared {
        SHARED_PROVISIONER
    } else {
        PROVISIONER
    };
    let storage = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| q.0.clone());
    let want = storage
        .as_deref()
        .and_then(sluice_kube::resources::parse_quantity)
        .unwrap_or(0.0);
    std::fs::create_dir_all(&room).map_err(|e| format!("{}: {e}", room.display()))?;
    let free = free_bytes(&room).map_err(|e| format!("{}: {e}", room.display()))?;
    if want > free as f64 {
        return Err(format!(
            "persistentvolumeclaim {name:?} asks for {} but node {node:?} has {} free",
            storage.unwrap_or_default(),
            human_bytes(free)
        ));
    }
    let dir = if block {
        if want < 1.0 {
            return Err(format!(
                "persistentvolumeclaim {name:?}: a block volume needs a storage request"
            ));
        }
        let image = image()?;
        super::block::create(&image, want as u64).map_err(|e| e.to_string())?;
        image
    } else {
        dir
    };
    match &clone_of {
        _ if block => {}
        Some(_) if is_shared => {
            return Err(format!(
                "persistentvolumeclaim {name:?}: class {class_name:?} is storage every cluster mounts, which local clusters do not clone"
            ));
        }
        Some(from) => {
            super::clone::fill(client, volumes, &claim, &class_name, want, from, &dir).await?;
        }
        None => std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?,
    }
    let access = spec.access_modes.clone().unwrap_or_default();
    let capacity = storage
        .as_ref()
        .map(|s| json!({"storage": s}))
        .unwrap_or(json!({}));
    let pv_name = volume_name(&uid);
    let mut pv_spec = json!({
        "capacity": capacity,
        "accessModes": access,
        "persistentVolumeReclaimPolicy": reclaim,
        "storageClassName": class_name,
        "volumeMode": if block { "Block" } else { "Filesystem" },
        "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "namespace": ns, "name": name, "uid": uid},
    });
    if is_shared {
        pv_spec["nfs"] = json!({"server": SHARED_SERVER, "path": format!("/{ns}/{name}")});
    } else {
        pv_spec["local"] = json!({"path": dir.display().to_string()});
        pv_spec["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}});
    }
    let pv: PersistentVolume = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": pv_name, "annotations": {"pv.kubernetes.io/provisioned-by": provisioner}},
        "spec": pv_spec,
    }))
    .map_err(|e| format!("persistentvolume {pv_name:?}: {e}"))?;
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    match pvs.create(&PostParams::default(), &pv).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(format!("provisioning persistentvolume {pv_name:?}: {e}")),
    }
    let pv_status = json!({"status": {"phase": "Bound"}});
    pvs.patch_status(&pv_name, &PatchParams::default(), &Patch::Merge(&pv_status))
        .await
        .map_err(|e| format!("binding persistentvolume {pv_name:?}: {e}"))?;
    let bind = json!({
        "metadata": {"annotations": {
            "pv.kubernetes.io/bind-completed": "yes",
            "pv.kubernetes.io/bound-by-controller": "yes",
            "volume.kubernetes.io/selected-node": node,
            "volume.kubernetes.io/storage-provisioner": provisioner,
        }},
        "spec": {"volumeName": pv_name, "storageClassName": class_name},
    });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&bind))
        .await
        .map_err(|e| format!("binding persistentvolumeclaim {name:?}: {e}"))?;
    let status = json!({"status": {"phase": "Bound", "accessModes": access, "capacity": capacity}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .map_err(|e| format!("binding persistentvolumeclaim {name:?}: {e}"))?;
    Ok(dir)
}

/// The class a claim asks for (the default when it names none), if this node serves it.
async fn storage_class(client: &kube::Client, name: Option<&str>) -> Result<StorageClass, String> {
    let api: Api<StorageClass> = Api::all(client.clone());
    let class = match name {
        Some("") => {
            return Err(
                "the claim asks for no StorageClass (\"\"), and local clusters have no PersistentVolumes to bind it to"
                    .to_string(),
            );
        }
        Some(name) => match api.get_opt(name).await {
            Ok(Some(c)) => c,
            Ok(None) => return Err(format!("storageclass.storage.k8s.io {name:?} not found")),
            Err(e) => return Err(format!("storageclass.storage.k8s.io {name:?}: {e}")),
        },
        None => {
            let all = api
                .list(&Default::default())
                .await
                .map_err(|e| format!("storageclasses: {e}"))?;
            all.items
                .into_iter()
                .filter(|c| {
                    c.metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(DEFAULT_CLASS))
                        .is_some_and(|v| v == "true")
                })
                .max_by(|a, b| {
                    (&a.metadata.creation_timestamp, &b.metadata.name)
                        .cmp(&(&b.metadata.creation_timestamp, &a.metadata.name))
                })
                .ok_or_else(|| {
                    "the claim names no StorageClass and the cluster has no default one".to_string()
                })?
        }
    };
    if class.provisioner != PROVISIONER && class.provisioner != SHARED_PROVISIONER {
        return Err(format!(
            "waiting for a volume to be created, either by external provisioner {:?} or manually created by system administrator",
            class.provisioner
        ));
    }
    Ok(class)
}

/// The bytes free for an unprivileged user on the filesystem of `dir`.
fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    let s = rustix::fs::statvfs(dir)?;
    Ok(s.f_bavail.saturating_mul(s.f_frsize))
}

/// `n` bytes in kube's binary units, as `kubectl describe` shows capacity.
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    let mut v = n;
    let mut i = 0;
    while v >= 1024 && i + 1 < UNITS.len() {
        v /= 1024;
        i += 1;
    }
    format!("{v}{}", UNITS[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_in_binary_units() {
        assert_eq!(human_bytes(512), "512");
        assert_eq!(human_bytes(3 * 1024 * 1024 * 1024), "3Gi");
        assert_eq!(human_bytes(u64::MAX), "15Ei");
    }
}
