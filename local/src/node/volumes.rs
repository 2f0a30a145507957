//! A Pod's volumes on the node: `secret`, `configMap` and `emptyDir`, written under
//! `<root>/<pod uid>/<volume>`, and `persistentVolumeClaim` ([`super::claims`]), mounted
//! where each container's `volumeMounts` say ([`super::mounts`]), and block claims at their
//! `volumeDevices` paths ([`super::block`]). Secrets and ConfigMaps are read again at every
//! container start, so a restart sees their current data. Other volume types and `subPath`
//! are refused with a reason rather than left out.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use serde_json::Value;

use super::mounts::{Mount, MountKind};

/// The volumes `container` of `pod` mounts, made ready under `root` (and, for claims of
/// shared storage, in `shared`).
pub async fn prepare(
    client: &kube::Client,
    root: &Path,
    shared: Option<&Path>,
    pod: &Value,
    container: &Value,
) -> Result<Vec<Mount>, String> {
    let mounts = container["volumeMounts"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let devices = container["volumeDevices"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if mounts.is_empty() && devices.is_empty() {
        return Ok(Vec::new());
    }
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or("default");
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
    if !is_plain_name(uid) {
        return Err(format!("pod uid {uid:?} cannot name a directory"));
    }
    let volumes = pod["spec"]["volumes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
    let mut out = Vec::new();
    for d in &devices {
        let name = d["name"].as_str().unwrap_or_default();
        let target = d["devicePath"].as_str().unwrap_or_default();
        if !target.starts_with('/') || target.ends_with('/') {
            return Err(format!(
                "volume device {name:?}: devicePath {target:?} is not an absolute file path"
            ));
        }
        let volume = volume_named(&volumes, name, "volume device")?;
        let Some(claim) = volume["persistentVolumeClaim"].as_object() else {
            return Err(format!(
                "volume device {name:?}: only a persistentVolumeClaim of volumeMode Block can be a device"
            ));
        };
        // A read-only bind mount does not keep writes off a device node: refused rather
        // than handed over writable.
        if claim.get("readOnly").and_then(Value::as_bool) == Some(true) {
            return Err(format!(
                "volume device {name:?}: read-only block devices are not supported by local clusters"
            ));
        }
        let claim_name = claim.get("claimName").and_then(Value::as_str).unwrap_or("");
        let image = super::claims::provision(
            client,
            root,
            shared,
            node,
            ns,
            claim_name,
            super::claims::Use::Device,
        )
        .await?;
        let device = super::block::attach(&image).map_err(|e| e.to_string())?;
        out.push(Mount {
            source: device,
            target: target.to_string(),
            read_only: false,
            kind: MountKind::Device,
        });
    }
    for m in &mounts {
        let name = m["name"].as_str().unwrap_or_default();
        let target = m["mountPath"].as_str().unwrap_or_default();
        if !target.starts_with('/') {
            return Err(format!(
                "volume mount {name:?}: mountPath {target:?} is not absolute"
            ));
        }
        if m["subPath"].as_str().is_some_and(|s| !s.is_empty())
            || m["subPathExpr"].as_str().is_some_and(|s| !s.is_empty())
        {
            return Err(format!(
                "volume mount {name:?}: subPath is not supported by local clusters"
            ));
        }
        let volume = volume_named(&volumes, name, "volume mount")?;
        if !is_plain_name(name) {
            return Err(format!("volume {name:?} cannot name a directory"));
        }
        let dir = root.join(uid).join(name);
        let read_only = m["readOnly"].as_bool().unwrap_or(false);
        if volume["emptyDir"].is_object() {
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            out.push(Mount {
                source: dir,
                target: target.to_string(),
                read_only,
                kind: MountKind::Directory,
            });
            continue;
        }
        if let Some(claim) = volume["persistentVolumeClaim"].as_object() {
            let claim_name = claim.get("claimName").and_then(Value::as_str).unwrap_or("");
            let source = super::claims::provision(
                client,
                root,
                shared,
                node,
                ns,
                claim_name,
                super::claims::Use::Mount,
            )
            .await?;
            out.push(Mount {
                source,
                target: target.to_string(),
                read_only: read_only
                    || claim
                        .get("readOnly")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                kind: MountKind::Directory,
            });
            continue;
        }
        let (data, items) = if let Some(s) = volume["secret"].as_object() {
            let secret_name = s.get("secretName").and_then(Value::as_str).unwrap_or("");
            let optional = s.get("optional").and_then(Value::as_bool).unwrap_or(false);
            let api: Api<Secret> = Api::namespaced(client.clone(), ns);
            let data = match api.get_opt(secret_name).await {
                Ok(Some(secret)) => secret
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect(),
                Ok(None) if optional => BTreeMap::new(),
                Ok(None) => return Err(format!("secret {secret_name:?} not found")),
                Err(e) => return Err(format!("secret {secret_name:?}: {e}")),
            };
            (data, s.get("items"))
        } else if let Some(c) = volume["configMap"].as_object() {
            let cm_name = c.get("name").and_then(Value::as_str).unwrap_or("");
            let optional = c.get("optional").and_then(Value::as_bool).unwrap_or(false);
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
            let data = match api.get_opt(cm_name).await {
                Ok(Some(cm)) => {
                    let mut data: BTreeMap<String, Vec<u8>> = cm
                        .data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.into_bytes()))
                        .collect();
                    data.extend(
                        cm.binary_data
                            .unwrap_or_default()
                            .into_iter()
                            .map(|(k, v)| (k, v.0)),
                    );
                    data
                }
                Ok(None) if optional => BTreeMap::new(),
                Ok(None) => return Err(format!("configmap {cm_name:?} not found")),
                Err(e) => return Err(format!("configmap {cm_name:?}: {e}")),
            };
            (data, c.get("items"))
        } else {
            let kind = volume
                .as_object()
                .and_then(|o| o.keys().find(|k| *k != "name").cloned())
                .unwrap_or_else(|| "empty".into());
            return Err(format!(
                "volume {name:?}: {kind} volumes are not supported by local clusters (secret, configMap, emptyDir and persistentVolumeClaim are)"
            ));
        };
        let files = select(data, items, name)?;
        // Written afresh: keys gone from the Secret are gone from the volume.
        let _ = std::fs::remove_dir_all(&dir);
        for (path, bytes) in &files {
            let file = dir.join(path);
            if let Some(parent) = file.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| format!("{}: {e}", parent.display()))?;
            }
            write(&file, bytes)?;
        }
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        // Secret and ConfigMap volumes are read-only, as kubelet mounts them.
        out.push(Mount {
            source: dir,
            target: target.to_string(),
            read_only: true,
            kind: MountKind::Directory,
        });
    }
    Ok(out)
}

/// Drop what the Pod's volumes left on the node.
pub fn remove(root: &Path, pod: &Value) {
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
    if is_plain_name(uid) {
        let _ = std::fs::remove_dir_all(root.join(uid));
    }
}

/// The files of a volume from `data`: every key, or only `items` (key → path) when given.
fn select(
    data: BTreeMap<String, Vec<u8>>,
    items: Option<&Value>,
    volume: &str,
) -> Result<Vec<(PathBuf, Vec<u8>)>, String> {
    let Some(items) = items.and_then(Value::as_array) else {
        return data
            .into_iter()
            .map(|(k, v)| relative(&k, volume).map(|p| (p, v)))
            .collect();
    };
    items
        .iter()
        .map(|i| {
            let key = i["key"].as_str().unwrap_or_default();
            let path = i["path"].as_str().unwrap_or(key);
            let bytes = data
                .get(key)
                .cloned()
                .ok_or_else(|| format!("volume {volume:?}: no key {key:?}"))?;
            Ok((relative(path, volume)?, bytes))
        })
        .collect()
}

/// `path` as a path inside the volume: relative, and without `..`.
fn relative(path: &str, volume: &str) -> Result<PathBuf, String> {
    let p = Path::new(path);
    let plain = !path.is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)));
    if plain {
        Ok(p.to_path_buf())
    } else {
        Err(format!(
            "volume {volume:?}: path {path:?} must stay inside the volume"
        ))
    }
}

/// The pod's volume `name`, which a container's `what` (a mount, a device) names.
fn volume_named<'a>(volumes: &'a [Value], name: &str, what: &str) -> Result<&'a Value, String> {
    volumes
        .iter()
        .find(|v| v["name"] == name)
        .ok_or_else(|| format!("{what} {name:?}: the pod has no such volume"))
}

fn is_plain_name(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.contains('/')
}

/// A volume file, readable by its owner and group (kubelet's default mode 0644 lets any
/// user read; here the processes run as the agent's own user).
fn write(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o640)
        .open(path)
        .and_then(|mut f| f.write_all(bytes))
        .map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn item_paths_stay_inside_the_volume() {
        let data = BTreeMap::from([("k".to_string(), b"v".to_vec())]);
        for bad in ["../x", "/etc/passwd", "a/../../b", ""] {
            let items = json!([{"key": "k", "path": bad}]);
            assert!(select(data.clone(), Some(&items), "v").is_err(), "{bad}");
        }
        let items = json!([{"key": "k", "path": "dir/file"}]);
        let files = select(data.clone(), Some(&items), "v").unwrap();
        assert_eq!(files, vec![(PathBuf::from("dir/file"), b"v".to_vec())]);
        let items = json!([{"key": "missing"}]);
        assert!(select(data, Some(&items), "v").is_err());
    }
}
