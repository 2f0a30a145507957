//! What happens to a volume this node provisioned ([`super::claims`]) once its claim is
//! gone — the part of kube's PersistentVolume controller and a local-path provisioner that
//! acts on reclaim: with `persistentVolumeReclaimPolicy: Delete` (the default class's) the
//! directory (or a block volume's loop device and image) is removed and the
//! PersistentVolume deleted; with `Retain` the volume is
//! marked `Released` and its data kept for an administrator. Nothing is removed while a
//! Pod on this node still mounts the claim (kube's `pvc-protection` keeps the claim itself
//! until then; here the claim may already be gone, so its volume waits instead). The
//! directory removed is always the one derived from the claim's uid, never a path read
//! from the PersistentVolume. A volume of shared storage is only ever released: other
//! clusters may still mount its data.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::json;
use sluice_kube::controller::ControllerMetrics;
use sluice_kube::informer::Store;
use sluice_kube::pod::mounts_claim;
use sluice_kube::{Action, Controller, Informer, Queue, Reconciler};
use tokio::sync::watch;

use super::claim_volume::{claim_dir, volume_name};
use super::claims::{PROVISIONER, SHARED_PROVISIONER};

/// What the reclaimer looks at.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    /// A PersistentVolume, by name.
    Volume(String),
    /// A watch re-listed: every volume.
    All,
}

struct Reclaimer {
    client: kube::Client,
    node: String,
    volumes_root: PathBuf,
    queue: Arc<Queue<Key>>,
    volumes: Store<PersistentVolume>,
    claims: Store<PersistentVolumeClaim>,
    pods: Store<Pod>,
}

/// Why a reclaim failed (retried with backoff).
#[derive(Debug, thiserror::Error)]
enum ReclaimError {
    #[error("{0}")]
    Api(#[from] kube::Error),
    #[error("removing a block volume: {0}")]
    Block(#[from] super::block::BlockError),
    #[error("removing {path}: {source}")]
    Remove {
        path: String,
        source: std::io::Error,
    },
}

/// How long a volume whose claim is gone waits for the Pods that still mount it.
const IN_USE_RECHECK: Duration = Duration::from_secs(1);

impl Reconciler for Reclaimer {
    type Key = Key;
    type Error = ReclaimError;

    async fn reconcile(&mut self, key: &Key) -> Result<Action, ReclaimError> {
        let name = match key {
            Key::All => {
                for pv in self.volumes.state() {
                    if let Some(n) = &pv.metadata.name {
                        self.queue.touch(Key::Volume(n.clone()));
                    }
                }
                return Ok(Action::AwaitChange);
            }
            Key::Volume(name) => name,
        };
        let Some(pv) = self.volumes.get("", name) else {
            return Ok(Action::AwaitChange);
        };
        let provisioner = pv
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("pv.kubernetes.io/provisioned-by"))
            .map(String::as_str);
        // A shared volume (no node of its own) is released by whichever node sees its
        // claim go, and its data always kept: other clusters may still mount it.
        let shared = provisioner == Some(SHARED_PROVISIONER);
        let ours = shared || (provisioner == Some(PROVISIONER) && pinned_to(&pv, &self.node));
        if !ours || pv.metadata.deletion_timestamp.is_some() {
            return Ok(Action::AwaitChange);
        }
        let spec = pv.spec.clone().unwrap_or_default();
        let Some(claim_ref) = spec.claim_ref.as_ref() else {
            return Ok(Action::AwaitChange);
        };
        let (ns, claim, uid) = (
            claim_ref.namespace.clone().unwrap_or_default(),
            claim_ref.name.clone().unwrap_or_default(),
            claim_ref.uid.clone().unwrap_or_default(),
        );
        // Only a volume this agent named after its claim is acted on.
        if volume_name(&uid) != *name {
            return Ok(Action::AwaitChange);
        }
        let alive = self
            .claims
            .get(&ns, &claim)
            .is_some_and(|c| c.metadata.uid.as_deref() == Some(uid.as_str()));
        if alive {
            return Ok(Action::AwaitChange);
        }
        let mounted = self.pods.in_namespace("", &ns).iter().any(|p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(self.node.as_str())
                && crate::pod_state::pod_active(p)
                && mounts_claim(p, &claim)
        });
        if mounted {
            return Ok(Action::Requeue(IN_USE_RECHECK));
        }
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        let policy = spec
            .persistent_volume_reclaim_policy
            .as_deref()
            .unwrap_or("Retain");
        if policy == "Delete" && !shared {
            if spec.volume_mode.as_deref() == Some("Block") {
                super::block::image(&self.volumes_root, &uid)
                    .and_then(|image| super::block::remove(&image))?;
            } else if let Some(dir) = claim_dir(&self.volumes_root, &uid) {
                match std::fs::remove_dir_all(&dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(source) => {
                        return Err(ReclaimError::Remove {
                            path: dir.display().to_string(),
                            source,
                        });
                    }
                }
            }
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
            tracing::info!(volume = %name, claim = %format!("{ns}/{claim}"), "claim gone: volume deleted");
        } else if pv.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Released") {
            api.patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": "Released"}})),
            )
            .await?;
            tracing::info!(volume = %name, claim = %format!("{ns}/{claim}"), "claim gone: volume released, data kept");
        }
        Ok(Action::AwaitChange)
    }
}

/// Whether the volume's node affinity names `node`.
fn pinned_to(pv: &PersistentVolume, node: &str) -> bool {
    pv.spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
        .is_some_and(|r| {
            r.node_selector_terms.iter().any(|t| {
                t.match_expressions.iter().flatten().any(|e| {
                    e.key == "kubernetes.io/hostname"
                        && e.values.iter().flatten().any(|v| v == node)
                })
            })
        })
}

/// Reclaim this node's volumes as their claims go, until `stop` flips.
pub async fn run(
    client: kube::Client,
    node: String,
    volumes_root: PathBuf,
    pods: Store<Pod>,
    metrics: ControllerMetrics,
    stop: watch::Receiver<bool>,
) {
    let queue = Arc::new(Queue::new(Duration::from_millis(5)));
    let q = queue.clone();
    let volumes = Informer::start_with(
        Api::<PersistentVolume>::all(client.clone()),
        watcher::Config::default(),
        "persistentvolumes",
        move |e| match e {
            watcher::Event::Apply(o) | watcher::Event::Delete(o) => {
                if let Some(n) = &o.metadata.name {
                    q.touch(Key::Volume(n.clone()));
                }
            }
            watcher::Event::InitDone => q.touch(Key::All),
            _ => {}
        },
    );
    let q = queue.clone();
    let claims = Informer::start_with(
        Api::<PersistentVolumeClaim>::all(client.clone()),
        watcher::Config::default(),
        "persistentvolumeclaims",
        move |e| match e {
            watcher::Event::Apply(o) | watcher::Event::Delete(o) => {
                if let Some(uid) = &o.metadata.uid {
                    q.touch(Key::Volume(volume_name(uid)));
                }
            }
            watcher::Event::InitDone => q.touch(Key::All),
            _ => {}
        },
    );
    let mut reclaimer = Reclaimer {
        client,
        node,
        volumes_root,
        queue: queue.clone(),
        volumes: volumes.store.clone(),
        claims: claims.store.clone(),
        pods,
    };
    let controller = Controller::new("volume reclaimer", queue, metrics);
    let _ = controller.run(&mut reclaimer, stop).await;
    drop((volumes, claims));
}
