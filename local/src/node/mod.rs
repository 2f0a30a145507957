//! The node agent: the kubelet of a local cluster. It binds Pods to its Node, runs their
//! containers as local processes with the Pod's IP from the cluster's loopback range,
//! probes readiness, restarts by policy with back-off, reports status, and terminates
//! gracefully (SIGTERM, the grace period, then SIGKILL) before deleting the Pod for good.

pub mod admin;
pub mod beside;
pub mod block;
pub mod claim_volume;
pub mod claims;
pub mod clone;
pub mod config;
pub mod container;
pub mod mounts;
pub mod probe;
pub mod process;
pub mod reclaim;
pub mod running;
pub mod service_account;
pub mod streaming;
pub mod terminal;
pub mod usage;
pub mod volumes;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use sluice_kube::events::{EventType, Recorder, Regarding};
use sluice_kube::resources::{Limits, Resources, pod_requests};
use tokio::sync::watch;

pub use config::{IpPool, NodeConfig, pod_value};
use process::PodRunner;

/// The labels of the node, as kubelet sets them (with the cluster's name): what a Pod's
/// `nodeSelector` is matched against.
fn node_labels(cfg: &NodeConfig) -> BTreeMap<String, String> {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    [
        ("kubernetes.io/hostname", cfg.node_name.as_str()),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", arch),
        ("sluice.dev/cluster", cfg.cluster.as_str()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Whether a Pod's `nodeSelector` matches the node's labels (every pair present).
fn selects(pod: &Pod, labels: &BTreeMap<String, String>) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_selector.as_ref())
        .is_none_or(|want| want.iter().all(|(k, v)| labels.get(k) == Some(v)))
}

fn node_object(cfg: &NodeConfig) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": cfg.node_name, "labels": node_labels(cfg)},
        "status": {
            "capacity": {"pods": cfg.max_pods.to_string(), "cpu": "2", "memory": "8Gi"},
            "allocatable": {"pods": cfg.max_pods.to_string(), "cpu": "2", "memory": "8Gi"},
            "addresses": [{"type": "InternalIP", "address": format!("127.{}.0.1", 20 + cfg.index)}, {"type": "Hostname", "address": cfg.node_name}],
            "nodeInfo": {"kubeletVersion": "v1.35.0-sluice", "operatingSystem": "linux", "architecture": std::env::consts::ARCH,
                         "containerRuntimeVersion": "sluice-process://0.1", "kernelVersion": "", "osImage": "local processes",
                         "machineID": "", "systemUUID": "", "bootID": "", "kubeProxyVersion": ""},
        }
    }))
    .unwrap_or_default()
}

async fn heartbeat(nodes: &Api<Node>, cfg: &NodeConfig) -> kube::Result<()> {
    let now = sluice_kube::time::now_rfc3339();
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "sluice node agent is posting ready status", "lastHeartbeatTime": now, "lastTransitionTime": now}]}});
    nodes
        .patch_status(
            &cfg.node_name,
            &PatchParams::default(),
            &Patch::Merge(status),
        )
        .await
        .map(|_| ())
}

/// Why the node agent stopped before it was told to.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("registering the Node: {0}")]
    Register(kube::Error),
    #[error("the Pod informer stopped before it synced")]
    Stopped,
}

/// The grace period of every container when the agent itself stops.
const STOP_GRACE: Duration = Duration::from_secs(2);
/// What the agent's stop may take beyond [`STOP_GRACE`].
const STOP_SLACK: Duration = Duration::from_secs(3);

/// Run the agent until `shutdown` flips; then stop every container it runs, within
/// [`STOP_GRACE`] and [`STOP_SLACK`].
pub async fn run(
    client: kube::Client,
    cfg: NodeConfig,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), NodeError> {
    let nodes: Api<Node> = Api::all(client.clone());
    match nodes
        .create(&PostParams::default(), &node_object(&cfg))
        .await
    {
        Ok(_) | Err(kube::Error::Api(_)) => {}
        Err(e) => return Err(NodeError::Register(e)),
    }
    if let Err(e) = claims::ensure_storage_class(&client, cfg.shared_storage.is_some()).await {
        tracing::warn!(error = %e, "the default StorageClass could not be made");
    }
    let changed = Arc::new(tokio::sync::Notify::new());
    let informer = sluice_kube::Informer::start(
        Api::<Pod>::all(client.clone()),
        watcher::Config::default(),
        changed.clone(),
        "pods",
    );
    let reader = informer.store.clone();
    reader
        .wait_until_ready()
        .await
        .map_err(|_| NodeError::Stopped)?;
    let reclaimer = tokio::spawn(reclaim::run(
        client.clone(),
        cfg.node_name.clone(),
        cfg.volumes_dir(),
        reader.clone(),
        cfg.metrics.reclaimer.clone(),
        shutdown.clone(),
    ));
    cfg.metrics
        .ready
        .store(true, std::sync::atomic::Ordering::Release);
    let ips = Arc::new(IpPool::new(cfg.index));
    let kubelet = Arc::new(Recorder::new(
        client.clone(),
        "kubelet",
        Some(&cfg.node_name),
    ));
    let scheduler = Recorder::new(client.clone(), "default-scheduler", None);
    // Addresses of Pods that were running before a restart stay theirs.
    let mut runners: HashMap<String, PodRunner> = HashMap::new();
    let mut beat = tokio::time::interval(Duration::from_secs(10));
    // Passes run on watch events; a pass whose binding or deletion failed runs again after
    // a second, since no event may come to retry it.
    let mut retry: Option<tokio::time::Instant> = None;
    loop {
        let retried = async {
            match retry {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.changed() => break,
            _ = changed.notified() => {}
            _ = retried => {}
            _ = beat.tick() => {
                if let Err(e) = heartbeat(&nodes, &cfg).await {
                    tracing::warn!(error = %e, "node heartbeat failed");
                }
            }
        }
        retry = None;
        let failed = || Some(tokio::time::Instant::now() + Duration::from_secs(1));
        let mut seen = BTreeSet::new();
        let mut pods = reader.state();
        // Oldest first: a Pod waiting for room gets it before a newer one.
        pods.sort_by(|a, b| {
            (&a.metadata.creation_timestamp, &a.metadata.name)
                .cmp(&(&b.metadata.creation_timestamp, &b.metadata.name))
        });
        let mut room = Room::of(&cfg, &pods);
        let labels = node_labels(&cfg);
        for pod in pods {
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let name = pod.metadata.name.clone().unwrap_or_default();
            let key = format!("{ns}/{name}");
            let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
            match node.as_deref() {
                None | Some("") if pod.metadata.deletion_timestamp.is_none() => {
                    // The one node of a local cluster is where every Pod goes that fits
                    // its allocatable; one that does not waits, Unschedulable, as the
                    // scheduler would leave it.
                    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
                    let need = pod_requests(&pod_value(&pod)["spec"]);
                    let fits = if selects(&pod, &labels) {
                        room.take(need)
                    } else {
                        Err("node(s) didn't match Pod's node affinity/selector".to_string())
                    };
                    let written = match fits {
                        Ok(()) => {
                            let bind = json!({"spec": {"nodeName": cfg.node_name}, "status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}});
                            let bound = api
                                .patch(&name, &PatchParams::default(), &Patch::Merge(bind))
                                .await;
                            if bound.is_ok() {
                                let message =
                                    format!("Successfully assigned {key} to {}", cfg.node_name);
                                scheduler
                                    .record(
                                        &Regarding::of(&*pod),
                                        EventType::Normal,
                                        "Scheduled",
                                        &message,
                                    )
                                    .await;
                            }
                            bound
                        }
                        Err(short) => {
                            let message = format!("0/1 nodes are available: 1 {short}.");
                            if unschedulable_says(&pod, &message) {
                                continue;
                            }
                            scheduler
                                .record(
                                    &Regarding::of(&*pod),
                                    EventType::Warning,
                                    "FailedScheduling",
                                    &message,
                                )
                                .await;
                            let status = json!({"status": {"conditions": [{"type": "PodScheduled", "status": "False",
                                "reason": "Unschedulable", "message": message,
                                "lastTransitionTime": sluice_kube::time::now_rfc3339()}]}});
                            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                                .await
                        }
                    };
                    if let Err(e) = written {
                        tracing::debug!(pod = %key, error = %e, "binding failed");
                        retry = failed();
                    }
                    continue;
                }
                None | Some("") => {
                    // Deleted before it was bound: nothing runs, it goes at once.
                    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
                    match api
                        .delete(&name, &DeleteParams::default().grace_period(0))
                        .await
                    {
                        Ok(_) | Err(kube::Error::Api(_)) => {}
                        Err(_) => retry = failed(),
                    }
                    continue;
                }
                Some(n) if n != cfg.node_name => continue,
                _ => {}
            }
            seen.insert(key.clone());
            let deleting = pod.metadata.deletion_timestamp.is_some();
            match runners.get_mut(&key) {
                Some(r)
                    if r.uid() == pod.metadata.uid.as_deref().unwrap_or("")
                        && !(deleting && r.finished()) =>
                {
                    if deleting {
                        r.terminate(grace_of(&pod));
                    } else {
                        r.update(&pod);
                    }
                }
                _ if deleting => {
                    // (A runner that finished before the deletion came stops nothing.)
                    runners.remove(&key);
                    // Nothing runs here (finished, or never started): delete for good.
                    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
                    match api
                        .delete(&name, &DeleteParams::default().grace_period(0))
                        .await
                    {
                        Ok(_) | Err(kube::Error::Api(_)) => {}
                        Err(_) => retry = failed(),
                    }
                }
                // Ran to completion (before a restart of this agent, or the runner is
                // gone): a finished Pod never runs again.
                _ if !crate::pod_state::pod_active(&pod) => {}
                _ => {
                    if let Some(old) = runners.remove(&key) {
                        old.terminate(Duration::ZERO);
                    }
                    let runner = PodRunner::start(
                        client.clone(),
                        &cfg,
                        (*pod).clone(),
                        ips.clone(),
                        kubelet.clone(),
                    );
                    runners.insert(key, runner);
                }
            }
        }
        cfg.metrics
            .pods
            .set(runners.values().filter(|r| !r.finished()).count() as i64);
        // Pods gone from the API: stop what still runs for them.
        // A finished runner stays while its Pod does, so the Pod is not started again
        // before its final status is seen.
        runners.retain(|key, r| {
            if seen.contains(key) {
                return true;
            }
            r.terminate(Duration::ZERO);
            false
        });
    }
    tracing::info!(node = %cfg.node_name, pods = runners.len(), "node agent stopping its containers");
    // Every Pod is told at once and they stop side by side: one after another, a node
    // with many Pods took minutes. What has not stopped by the bound (a status write to an
    // API server that is gone) is dropped, which kills the container still running.
    for r in runners.values() {
        r.terminate(STOP_GRACE);
    }
    let all = futures::future::join_all(runners.into_values().map(PodRunner::wait));
    if tokio::time::timeout(STOP_GRACE + STOP_SLACK, all)
        .await
        .is_err()
    {
        tracing::warn!(node = %cfg.node_name, "pods still stopping at the bound; killed");
    }
    reclaimer.abort();
    // Loop devices go back to the machine; the images stay for the next start.
    block::detach_node(&cfg.volumes_dir());
    drop(informer);
    Ok(())
}

/// What the node has left of its allocatable (the figures its Node object advertises)
/// beside the Pods bound to it that still run.
struct Room {
    allocatable: Limits,
    used: Resources,
}

impl Room {
    fn of(cfg: &NodeConfig, pods: &[Arc<Pod>]) -> Self {
        let allocatable = Limits::from_json(&node_object(cfg).status.map_or(Value::Null, |s| {
            serde_json::to_value(s.allocatable).unwrap_or(Value::Null)
        }));
        let used = pods
            .iter()
            .filter(|p| {
                p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(cfg.node_name.as_str())
                    && crate::pod_state::pod_active(p)
            })
            .fold(Resources::default(), |sum, p| {
                sum + pod_requests(&pod_value(p)["spec"])
            });
        Self { allocatable, used }
    }

    /// Take room for a Pod that requests `need`, or say what is short (the scheduler's
    /// words: `Insufficient cpu`, `Too many pods`).
    fn take(&mut self, need: Resources) -> Result<(), String> {
        let after = self.used + need;
        match self.allocatable.exceeded(&after) {
            None => {
                self.used = after;
                Ok(())
            }
            Some("pods") => Err("Too many pods".into()),
            Some(what) => Err(format!("Insufficient {what}")),
        }
    }
}

/// Whether the Pod already says it is unschedulable for this reason.
fn unschedulable_says(pod: &Pod, message: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.message.as_deref() == Some(message)
            })
        })
}

/// The grace period a deleted Pod gets.
fn grace_of(pod: &Pod) -> Duration {
    let secs = pod
        .metadata
        .deletion_grace_period_seconds
        .or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
        })
        .unwrap_or(30);
    Duration::from_secs(secs.max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_selector_matches_only_labels_the_node_has() {
        let cfg = NodeConfig::for_test();
        let labels = node_labels(&cfg);
        let pod = |selector: Value| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [], "nodeSelector": selector}}))
                .unwrap()
        };
        assert!(selects(&pod(Value::Null), &labels));
        assert!(selects(
            &pod(json!({"kubernetes.io/os": "linux", "sluice.dev/cluster": "east"})),
            &labels
        ));
        assert!(!selects(
            &pod(json!({"sluice.dev/cluster": "west"})),
            &labels
        ));
        assert!(!selects(&pod(json!({"disktype": "ssd"})), &labels));
    }
}
