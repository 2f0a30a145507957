//! How a node agent is set up, the Pod addresses it hands out, and a Pod as JSON: what
//! the agent's parts share.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

use super::{admin, service_account};

/// How a node agent is set up.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// The cluster's name (`SLUICE_CLUSTER` in every Pod).
    pub cluster: String,
    /// The cluster's index: Pod IPs come from `127.(20+index).0.0/16`.
    pub index: u8,
    pub node_name: String,
    /// Where container logs are written (`<dir>/<namespace>/<pod>/<container>/<restart>.log`).
    pub logs_dir: PathBuf,
    /// The `sluice` binary, which runs the built-in images.
    pub sluice_bin: PathBuf,
    pub max_pods: u32,
    /// Run only the built-in images, not the commands of other containers: for manifests
    /// written by others, whose commands are not meant for this machine.
    pub builtin_images_only: bool,
    /// The cluster's DNS server: each Pod gets it and its search path in its environment
    /// ([`crate::resolve`]), as kubelet writes them into a Pod's resolv.conf.
    pub dns: Option<std::net::SocketAddr>,
    /// Counters and readiness, served by [`admin::serve`].
    pub metrics: Arc<admin::NodeMetrics>,
    /// The API server Pods are given credentials for (`None`: Pods get none).
    pub api: Option<Arc<service_account::ApiEndpoint>>,
    /// The containers running now, for the streaming endpoint ([`super::streaming`]).
    pub running: Arc<super::running::Running>,
    /// The directory every cluster of the clusterset reaches, serving the `shared`
    /// StorageClass ([`super::claims`]); `None`: the node has no such class.
    pub shared_storage: Option<PathBuf>,
}

impl NodeConfig {
    /// A node of cluster `east` for unit tests: nothing runs, no API server.
    #[cfg(test)]
    pub(crate) fn for_test() -> Self {
        Self {
            cluster: "east".into(),
            index: 0,
            node_name: "east-node".into(),
            logs_dir: PathBuf::from("/logs"),
            sluice_bin: PathBuf::from("sluice"),
            max_pods: 1,
            builtin_images_only: false,
            dns: None,
            metrics: Default::default(),
            api: None,
            running: Default::default(),
            shared_storage: None,
        }
    }

    /// Where the node keeps its Pods' volumes and its claims' data: beside their logs and
    /// credentials.
    pub fn volumes_dir(&self) -> PathBuf {
        self.logs_dir
            .parent()
            .unwrap_or(&self.logs_dir)
            .join("volumes")
    }

    /// The node's own address: its API server, agent and host-network Pods answer there.
    pub fn node_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(127, 20 + self.index, 0, 1)
    }
}

/// Pod IPs in use on this node.
pub struct IpPool {
    index: u8,
    used: Mutex<BTreeSet<u32>>,
}

impl IpPool {
    pub fn new(index: u8) -> Self {
        Self {
            index,
            used: Mutex::new(BTreeSet::new()),
        }
    }

    fn base(&self) -> u32 {
        u32::from(Ipv4Addr::new(127, 20 + self.index, 0, 0))
    }

    /// Take `ip` (a Pod keeping its address across an agent restart) or the next free one
    /// from `.1.1` on.
    pub fn take(&self, want: Option<Ipv4Addr>) -> Option<Ipv4Addr> {
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(ip) = want {
            let v = u32::from(ip);
            if v >> 16 == self.base() >> 16 && used.insert(v) {
                return Some(ip);
            }
        }
        let free = (self.base() + 257..self.base() + 65_534).find(|v| !used.contains(v))?;
        used.insert(free);
        Some(Ipv4Addr::from(free))
    }

    pub fn give_back(&self, ip: Ipv4Addr) {
        self.used
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&u32::from(ip));
    }
}

/// The JSON of a Pod, for the runner's lookups.
pub fn pod_value(pod: &Pod) -> Value {
    serde_json::to_value(pod).unwrap_or(Value::Null)
}
