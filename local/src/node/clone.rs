//! A claim filled from another claim (`dataSource`/`dataSourceRef` of kind
//! `PersistentVolumeClaim`), as a CSI driver with volume cloning serves it: the source claim
//! must be in the same namespace, of the same class, bound here, and no larger than the new
//! claim; its volume's files are copied into the new volume before the new claim is bound.
//! Other sources (a VolumeSnapshot, a populator's kind) are refused with a reason.
//!
//! The copy is made beside the new volume's directory and renamed into place, so a volume
//! directory that exists is a whole clone: an agent stopped mid-copy starts it again.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, TypedLocalObjectReference};
use kube::api::Api;

use super::claim_volume::{claim_dir, volume_name};

/// The claim a new claim is cloned from, if its spec names one; an error for a source that
/// local clusters cannot fill a claim from.
pub fn source(claim: &PersistentVolumeClaim, name: &str) -> Result<Option<String>, String> {
    let spec = claim.spec.clone().unwrap_or_default();
    let by_ref = spec.data_source_ref.map(|r| {
        (
            TypedLocalObjectReference {
                api_group: r.api_group,
                kind: r.kind,
                name: r.name,
            },
            r.namespace,
        )
    });
    let Some((source, namespace)) = by_ref.or(spec.data_source.map(|s| (s, None))) else {
        return Ok(None);
    };
    let core = source.api_group.as_deref().unwrap_or("").is_empty();
    if !core || source.kind != "PersistentVolumeClaim" {
        let group = source
            .api_group
            .as_deref()
            .filter(|g| !g.is_empty())
            .map(|g| format!(".{g}"))
            .unwrap_or_default();
        return Err(format!(
            "persistentvolumeclaim {name:?}: a dataSource of kind {:?} ({}{group} {:?}) is not supported by local clusters: they fill a claim only from another PersistentVolumeClaim (a clone)",
            source.kind,
            source.kind.to_lowercase(),
            source.name
        ));
    }
    if let Some(ns) = namespace.filter(|n| Some(n.as_str()) != claim.metadata.namespace.as_deref())
    {
        return Err(format!(
            "persistentvolumeclaim {name:?}: a dataSourceRef in another namespace ({ns:?}) is not supported by local clusters"
        ));
    }
    Ok(Some(source.name))
}

/// The directory claim `claim` (of class `class`, asking for `want` bytes) gets as a clone
/// of claim `from` of the same namespace: `dir`, with `from`'s files.
pub async fn fill(
    client: &kube::Client,
    volumes: &Path,
    claim: &PersistentVolumeClaim,
    class: &str,
    want: f64,
    from: &str,
    dir: &Path,
) -> Result<(), String> {
    if dir.is_dir() {
        return Ok(());
    }
    let ns = claim.metadata.namespace.clone().unwrap_or_default();
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let waiting = |why: String| {
        format!(
            "persistentvolumeclaim {name:?}: waiting to clone persistentvolumeclaim {from:?}: {why}"
        )
    };
    let source = match api.get_opt(from).await {
        Ok(Some(s)) => s,
        Ok(None) => return Err(waiting("not found".into())),
        Err(e) => return Err(waiting(e.to_string())),
    };
    let uid = source.metadata.uid.clone().unwrap_or_default();
    let bound_here = source.spec.as_ref().and_then(|s| s.volume_name.as_deref())
        == Some(volume_name(&uid).as_str())
        && source.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
    let from_dir = claim_dir(volumes, &uid).filter(|d| bound_here && d.is_dir());
    let Some(from_dir) = from_dir else {
        return Err(waiting(
            "it is not bound to a volume of this node (a Pod here must mount it first)".into(),
        ));
    };
    let source_class = source
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.clone())
        .unwrap_or_default();
    if source_class != class {
        return Err(format!(
            "persistentvolumeclaim {name:?}: the source PVC and destination PVCs must be in the same storage class for cloning. Source is in {source_class:?}, but new PVC is in {class:?}"
        ));
    }
    let source_size = source
        .status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .map(|q| q.0.clone())
        .unwrap_or_default();
    if sluice_kube::resources::parse_quantity(&source_size).is_some_and(|have| want < have) {
        return Err(format!(
            "persistentvolumeclaim {name:?}: the requested size is less than the size {source_size} of the source PVC {from:?}"
        ));
    }
    let partial = dir.with_extension("cloning");
    let (to, done) = (partial.clone(), dir.to_path_buf());
    tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        if partial.exists() {
            std::fs::remove_dir_all(&partial)?;
        }
        copy_tree(&from_dir, &partial)?;
        std::fs::rename(&partial, &done)
    })
    .await
    .map_err(|e| format!("cloning persistentvolumeclaim {from:?}: {e}"))?
    .map_err(|e| {
        format!(
            "cloning persistentvolumeclaim {from:?} into {}: {e}",
            to.display()
        )
    })
}

/// Copy the tree at `from` to `to` (which must not exist): directories, files and symbolic
/// links (as links, never followed), with their permissions; other kinds of file are left
/// out, as a file copy tool leaves them.
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    let mut work: Vec<(PathBuf, PathBuf)> = vec![(from.to_path_buf(), to.to_path_buf())];
    // A directory's own mode is set once everything in it is written (it may not be
    // writable), the deepest first.
    let mut dirs = Vec::new();
    while let Some((src, dst)) = work.pop() {
        let meta = std::fs::symlink_metadata(&src)?;
        let kind = meta.file_type();
        if kind.is_dir() {
            std::fs::create_dir(&dst)?;
            for entry in std::fs::read_dir(&src)? {
                let entry = entry?;
                work.push((entry.path(), dst.join(entry.file_name())));
            }
            dirs.push((dst, meta.permissions()));
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        } else if kind.is_file() {
            // `copy` gives the copy the source's permissions.
            std::fs::copy(&src, &dst)?;
        }
    }
    for (dir, mode) in dirs.into_iter().rev() {
        std::fs::set_permissions(&dir, mode)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(spec: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(
            json!({"metadata": {"name": "new", "namespace": "app"}, "spec": spec}),
        )
        .unwrap()
    }

    #[test]
    fn only_a_claim_of_the_same_namespace_is_a_source() {
        let c = claim(json!({}));
        assert_eq!(source(&c, "new"), Ok(None));
        let c = claim(json!({"dataSource": {"kind": "PersistentVolumeClaim", "name": "seed"}}));
        assert_eq!(source(&c, "new"), Ok(Some("seed".into())));
        let c = claim(
            json!({"dataSourceRef": {"kind": "PersistentVolumeClaim", "name": "seed", "namespace": "app"}}),
        );
        assert_eq!(source(&c, "new"), Ok(Some("seed".into())));
        let c = claim(
            json!({"dataSourceRef": {"kind": "PersistentVolumeClaim", "name": "seed", "namespace": "other"}}),
        );
        assert!(source(&c, "new").unwrap_err().contains("another namespace"));
        let c = claim(
            json!({"dataSource": {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "nightly"}}),
        );
        let err = source(&c, "new").unwrap_err();
        assert!(
            err.contains("volumesnapshot.snapshot.storage.k8s.io \"nightly\""),
            "{err}"
        );
        let c = claim(
            json!({"dataSource": {"apiGroup": "example.com", "kind": "PersistentVolumeClaim", "name": "x"}}),
        );
        assert!(source(&c, "new").is_err());
    }

    #[test]
    fn a_tree_is_copied_with_its_links_and_modes() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("from");
        std::fs::create_dir_all(from.join("sub/deeper")).unwrap();
        std::fs::write(from.join("sub/deeper/file"), "data").unwrap();
        std::fs::write(from.join("run.sh"), "#!/bin/sh").unwrap();
        std::fs::set_permissions(from.join("run.sh"), std::fs::Permissions::from_mode(0o750))
            .unwrap();
        std::os::unix::fs::symlink("/etc/passwd", from.join("outside")).unwrap();
        std::fs::set_permissions(from.join("sub"), std::fs::Permissions::from_mode(0o555)).unwrap();
        let to = dir.path().join("to");
        copy_tree(&from, &to).unwrap();
        assert_eq!(
            std::fs::read_to_string(to.join("sub/deeper/file")).unwrap(),
            "data"
        );
        let mode = std::fs::metadata(to.join("run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o750);
        let mode = std::fs::metadata(to.join("sub"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o555);
        assert_eq!(
            std::fs::read_link(to.join("outside")).unwrap(),
            PathBuf::from("/etc/passwd")
        );
        assert!(copy_tree(&from, &to).is_err(), "the target must be new");
    }
}
