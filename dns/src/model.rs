//! What the DNS server knows: the objects its informers saw, reduced to what answers need.
//!
//! Kept apart from the protocol handler (which only reads it) and from the informers
//! (which only write it), so answers can be tested from hand-built state.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use sluice_api::LogicalClusterPath;
use sluice_api::mcs::{self, ServiceImport, ServiceImportType};
use sluice_api::sluice::Cluster;
use sluice_api::sync::{
    ANNOTATION_LOGICAL_CLUSTER, ANNOTATION_UPSTREAM_NAMESPACE, LABEL_LOGICAL_CLUSTER,
    admitted_ingress_hosts, ingress_ip, serves_ingress,
};

/// `namespace/name` of a Service or ServiceImport.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceKey {
    pub namespace: String,
    pub name: String,
}

impl ServiceKey {
    pub fn new(namespace: &str, name: &str) -> Self {
        Self {
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }
}

/// A port as DNS sees it: SRV needs the name and protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    pub name: Option<String>,
    /// Lower case (`tcp`, `udp`, `sctp`), as it appears in `_<port>._<proto>`.
    pub protocol: String,
    pub port: u16,
}

impl Port {
    fn new(name: Option<&str>, protocol: Option<&str>, port: i32) -> Option<Self> {
        Some(Self {
            name: name.filter(|n| !n.is_empty()).map(str::to_ascii_lowercase),
            protocol: protocol.unwrap_or("TCP").to_ascii_lowercase(),
            port: u16::try_from(port).ok()?,
        })
    }
}

/// A ServiceImport, reduced.
#[derive(Clone, Debug, PartialEq)]
pub struct Import {
    pub kind: ServiceImportType,
    pub ips: Vec<IpAddr>,
    pub ports: Vec<Port>,
}

/// One endpoint of a slice.
#[derive(Clone, Debug, PartialEq)]
pub struct Endpoint {
    pub addresses: Vec<IpAddr>,
    pub hostname: Option<String>,
    pub ready: bool,
}

impl Endpoint {
    /// The DNS label naming this endpoint: its hostname, else its first address with
    /// dashes (`10-1-2-3`), as Kubernetes DNS does.
    pub fn label(&self) -> Option<String> {
        if let Some(h) = &self.hostname {
            return Some(h.to_ascii_lowercase());
        }
        self.addresses.first().map(|ip| dashed(*ip))
    }
}

/// `10.1.2.3` → `10-1-2-3`; IPv6 colons become dashes too.
pub fn dashed(ip: IpAddr) -> String {
    ip.to_string().replace(['.', ':'], "-")
}

/// An EndpointSlice, reduced.
#[derive(Clone, Debug, PartialEq)]
pub struct Slice {
    pub service: ServiceKey,
    /// The source cluster (MCS slices); empty for a local slice.
    pub cluster: String,
    pub ports: Vec<Port>,
    pub endpoints: Vec<Endpoint>,
}

/// A local Service (`cluster.local`).
#[derive(Clone, Debug, PartialEq)]
pub enum LocalService {
    ClusterIp { ips: Vec<IpAddr>, ports: Vec<Port> },
    Headless { ports: Vec<Port> },
    ExternalName(String),
}

/// An Ingress: its logical cluster (empty for one of this cluster's own), namespace and
/// name.
pub type IngressId = (String, String, String);

/// A cluster's ingress as DNS answers for it.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterIngress {
    pub ips: Vec<IpAddr>,
    /// Ready (its syncer's heartbeat is current).
    pub ready: bool,
    /// Being drained: it leaves the answers first, while its ingress still serves.
    pub draining: bool,
}

/// Which table a slice landed in.
#[derive(Clone, Debug, PartialEq, Eq)]
enum SliceHome {
    Mcs(ServiceKey),
    Local(ServiceKey),
}

/// Everything the answers are computed from.
#[derive(Debug, Default)]
pub struct Model {
    imports: HashMap<ServiceKey, Import>,
    mcs_slices: HashMap<ServiceKey, BTreeMap<String, Slice>>,
    services: HashMap<ServiceKey, LocalService>,
    local_slices: HashMap<ServiceKey, BTreeMap<String, Slice>>,
    slice_homes: HashMap<(String, String), SliceHome>,
    /// Pod IPs per namespace, with a count (two pods may briefly share an IP).
    pods: HashMap<(String, IpAddr), usize>,
    pod_ips: HashMap<(String, String), IpAddr>,
    /// The namespace of the pod holding each address (the last one seen, when two do).
    ip_namespaces: HashMap<IpAddr, String>,
    /// Namespaces that Sluice placed here: the logical cluster each belongs to.
    logical: HashMap<String, LogicalClusterPath>,
    /// The namespaces here that say they hold each upstream namespace (from their
    /// annotations): one is the answer; two (names that collide) answer nothing.
    holders: HashMap<(LogicalClusterPath, String), BTreeSet<String>>,
    /// What each namespace here said it holds (to forget it when that changes).
    holds: HashMap<String, (LogicalClusterPath, String)>,
    /// The hosts of each Ingress served by the clusterset's ingresses, by [`IngressId`].
    ingresses: HashMap<IngressId, Vec<String>>,
    /// Every such host, with how many Ingresses name it (a query looks here).
    ingress_hosts: HashMap<String, usize>,
    /// Every cluster's ingress addresses and whether it takes new clients.
    clusters: BTreeMap<String, ClusterIngress>,
    /// Bumped on every change; the SOA serial.
    pub serial: u32,
}

fn parse_ips<'a>(ips: impl IntoIterator<Item = &'a String>) -> Vec<IpAddr> {
    ips.into_iter().filter_map(|s| s.parse().ok()).collect()
}

impl Model {
    fn bump(&mut self) {
        self.serial = self.serial.wrapping_add(1);
    }

    pub fn import(&self, key: &ServiceKey) -> Option<&Import> {
        self.imports.get(key)
    }

    pub fn imports_len(&self) -> usize {
        self.imports.len()
    }

    /// Whether any ServiceImport lives in `namespace` (`<ns>.svc.<zone>` then exists).
    pub fn has_imports_in(&self, namespace: &str) -> bool {
        self.imports.keys().any(|k| k.namespace == namespace)
    }

    pub fn has_services_in(&self, namespace: &str) -> bool {
        self.services.keys().any(|k| k.namespace == namespace)
    }

    /// The MCS slices of an import, in a stable order (by slice name).
    pub fn mcs_slices(&self, key: &ServiceKey) -> impl Iterator<Item = &Slice> {
        self.mcs_slices
            .get(key)
            .into_iter()
            .flat_map(|m| m.values())
    }

    pub fn service(&self, key: &ServiceKey) -> Option<&LocalService> {
        self.services.get(key)
    }

    pub fn local_slices(&self, key: &ServiceKey) -> impl Iterator<Item = &Slice> {
        self.local_slices
            .get(key)
            .into_iter()
            .flat_map(|m| m.values())
    }

    pub fn has_pod(&self, namespace: &str, ip: IpAddr) -> bool {
        self.pods.contains_key(&(namespace.to_string(), ip))
    }

    pub fn apply_import(&mut self, si: &ServiceImport) {
        let (Some(ns), Some(name)) = (&si.metadata.namespace, &si.metadata.name) else {
            return;
        };
        let import = Import {
            kind: si.spec.r#type,
            ips: parse_ips(&si.spec.ips),
            ports: si
                .spec
                .ports
                .iter()
                .filter_map(|p| Port::new(p.name.as_deref(), p.protocol.as_deref(), p.port))
                .collect(),
        };
        self.imports.insert(ServiceKey::new(ns, name), import);
        self.bump();
    }

    pub fn delete_import(&mut self, key: &ServiceKey) {
        if self.imports.remove(key).is_some() {
            self.bump();
        }
    }

    pub fn import_keys(&self) -> Vec<ServiceKey> {
        self.imports.keys().cloned().collect()
    }

    pub fn apply_service(&mut self, svc: &Service) {
        let (Some(ns), Some(name)) = (&svc.metadata.namespace, &svc.metadata.name) else {
            return;
        };
        let Some(spec) = &svc.spec else { return };
        let ports: Vec<Port> = spec
            .ports
            .iter()
            .flatten()
            .filter_map(|p| Port::new(p.name.as_deref(), p.protocol.as_deref(), p.port))
            .collect();
        let entry = if spec.type_.as_deref() == Some("ExternalName") {
            match &spec.external_name {
                Some(n) => LocalService::ExternalName(n.clone()),
                None => return,
            }
        } else if spec.cluster_ip.as_deref() == Some("None") {
            LocalService::Headless { ports }
        } else {
            let ips = match &spec.cluster_ips {
                Some(ips) if !ips.is_empty() => parse_ips(ips),
                _ => parse_ips(spec.cluster_ip.iter()),
            };
            LocalService::ClusterIp { ips, ports }
        };
        self.services.insert(ServiceKey::new(ns, name), entry);
        self.bump();
    }

    pub fn delete_service(&mut self, key: &ServiceKey) {
        if self.services.remove(key).is_some() {
            self.bump();
        }
    }

    pub fn service_keys(&self) -> Vec<ServiceKey> {
        self.services.keys().cloned().collect()
    }

    /// An EndpointSlice: MCS slices (both multicluster labels) feed `clusterset.local`,
    /// slices with `kubernetes.io/service-name` feed `cluster.local`, others are ignored.
    pub fn apply_slice(&mut self, es: &EndpointSlice) {
        let (Some(ns), Some(name)) = (&es.metadata.namespace, &es.metadata.name) else {
            return;
        };
        let id = (ns.clone(), name.clone());
        self.remove_slice(&id);
        let labels = es.metadata.labels.clone().unwrap_or_default();
        let ports = es
            .ports
            .iter()
            .flatten()
            .filter_map(|p| Port::new(p.name.as_deref(), p.protocol.as_deref(), p.port?))
            .collect();
        let endpoints = es
            .endpoints
            .iter()
            .flatten()
            .map(|e| Endpoint {
                addresses: parse_ips(&e.addresses),
                hostname: e.hostname.clone(),
                // Kubernetes: an unknown readiness counts as ready.
                ready: e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true),
            })
            .collect();
        let (home, cluster) = match (
            labels.get(mcs::LABEL_SERVICE_NAME),
            labels.get(mcs::LABEL_SOURCE_CLUSTER),
            labels.get("kubernetes.io/service-name"),
        ) {
            (Some(svc), Some(cluster), _) => (SliceHome::Mcs(ServiceKey::new(ns, svc)), cluster),
            (_, _, Some(svc)) => (SliceHome::Local(ServiceKey::new(ns, svc)), &String::new()),
            _ => return,
        };
        let (table, key) = match &home {
            SliceHome::Mcs(k) => (&mut self.mcs_slices, k.clone()),
            SliceHome::Local(k) => (&mut self.local_slices, k.clone()),
        };
        table.entry(key.clone()).or_default().insert(
            name.clone(),
            Slice {
                service: key,
                cluster: cluster.to_ascii_lowercase(),
                ports,
                endpoints,
            },
        );
        self.slice_homes.insert(id, home);
        self.bump();
    }

    pub fn delete_slice(&mut self, namespace: &str, name: &str) {
        if self.remove_slice(&(namespace.to_string(), name.to_string())) {
            self.bump();
        }
    }

    fn remove_slice(&mut self, id: &(String, String)) -> bool {
        let Some(home) = self.slice_homes.remove(id) else {
            return false;
        };
        let (table, key) = match &home {
            SliceHome::Mcs(k) => (&mut self.mcs_slices, k),
            SliceHome::Local(k) => (&mut self.local_slices, k),
        };
        if let Some(m) = table.get_mut(key) {
            m.remove(&id.1);
            if m.is_empty() {
                table.remove(key);
            }
        }
        true
    }

    pub fn slice_ids(&self) -> Vec<(String, String)> {
        self.slice_homes.keys().cloned().collect()
    }

    /// The logical cluster of the pod at `ip`, if Sluice placed it (its namespace is the
    /// downstream namespace of a logical cluster's namespace).
    pub fn logical_cluster_of(&self, ip: IpAddr) -> Option<&LogicalClusterPath> {
        self.logical.get(self.ip_namespaces.get(&ip)?)
    }

    /// The namespace here that holds namespace `ns` of logical cluster `path`: `ns` itself
    /// when it already is one of `path`'s downstream namespaces (a pod's search path names
    /// its own), else the one whose annotations say it holds `path`'s `ns` — never a name
    /// computed from what a tenant chose, and none when two claim it.
    pub fn downstream_of(&self, path: &LogicalClusterPath, ns: &str) -> Option<&str> {
        if let Some((name, p)) = self.logical.get_key_value(ns)
            && p == path
        {
            return Some(name);
        }
        let holders = self.holders.get(&(path.clone(), ns.to_string()))?;
        match holders.len() {
            1 => holders.first().map(String::as_str),
            _ => None,
        }
    }

    /// Forget what namespace `name` said it holds.
    fn forget_holder(&mut self, name: &str) {
        if let Some(up) = self.holds.remove(name)
            && let Some(set) = self.holders.get_mut(&up)
        {
            set.remove(name);
            if set.is_empty() {
                self.holders.remove(&up);
            }
        }
    }

    /// A namespace: placed by Sluice when it carries the logical-cluster label and a
    /// logical cluster path annotation.
    pub fn apply_namespace(&mut self, ns: &Namespace) {
        let Some(name) = &ns.metadata.name else {
            return;
        };
        let placed = ns
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(LABEL_LOGICAL_CLUSTER));
        let path = ns
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_LOGICAL_CLUSTER))
            .and_then(|p| p.parse::<LogicalClusterPath>().ok())
            .filter(|_| placed);
        let upstream = ns
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_UPSTREAM_NAMESPACE))
            .cloned();
        let held = path.clone().zip(upstream);
        let mut changed = self.holds.get(name) != held.as_ref();
        if changed {
            self.forget_holder(name);
            if let Some(up) = held {
                self.holders
                    .entry(up.clone())
                    .or_default()
                    .insert(name.clone());
                self.holds.insert(name.clone(), up);
            }
        }
        changed |= match path {
            Some(p) => self.logical.insert(name.clone(), p.clone()) != Some(p),
            None => self.logical.remove(name).is_some(),
        };
        if changed {
            self.bump();
        }
    }

    pub fn delete_namespace(&mut self, name: &str) {
        self.forget_holder(name);
        if self.logical.remove(name).is_some() {
            self.bump();
        }
    }

    pub fn namespace_ids(&self) -> Vec<String> {
        self.logical.keys().cloned().collect()
    }

    pub fn apply_pod(&mut self, pod: &Pod) {
        let (Some(ns), Some(name)) = (&pod.metadata.namespace, &pod.metadata.name) else {
            return;
        };
        let id = (ns.clone(), name.clone());
        let ip = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_ref())
            .and_then(|ip| ip.parse::<IpAddr>().ok());
        if self.pod_ips.get(&id).copied() == ip {
            return;
        }
        self.delete_pod(ns, name);
        if let Some(ip) = ip {
            self.pod_ips.insert(id, ip);
            *self.pods.entry((ns.clone(), ip)).or_default() += 1;
            // A host-network Pod shares its node's address: it says nothing of who asks.
            let host_network = pod
                .spec
                .as_ref()
                .and_then(|s| s.host_network)
                .unwrap_or(false);
            if !host_network {
                self.ip_namespaces.insert(ip, ns.clone());
            }
            self.bump();
        }
    }

    pub fn delete_pod(&mut self, namespace: &str, name: &str) {
        let id = (namespace.to_string(), name.to_string());
        if let Some(ip) = self.pod_ips.remove(&id) {
            let key = (id.0, ip);
            if let Some(n) = self.pods.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    self.pods.remove(&key);
                    if self.ip_namespaces.get(&ip) == Some(&key.0) {
                        self.ip_namespaces.remove(&ip);
                        // Another pod may hold the address still (in another namespace).
                        if let Some(((other, _), _)) = self.pods.iter().find(|((_, a), _)| *a == ip)
                        {
                            self.ip_namespaces.insert(ip, other.clone());
                        }
                    }
                }
            }
            self.bump();
        }
    }

    pub fn pod_ids(&self) -> Vec<(String, String)> {
        self.pod_ips.keys().cloned().collect()
    }

    /// An Ingress's hosts, if the clusterset's ingresses serve it (class `sluice` or none):
    /// of a logical cluster's Ingress, only those the control plane admitted it for (a host
    /// belongs to its first claimant under its workspace's delegated domains); of one of
    /// this cluster's own, its rules' hosts.
    pub fn apply_ingress(&mut self, ing: &Ingress) {
        let Some(id) = ingress_id(ing) else { return };
        if !serves_ingress(ing) {
            self.delete_ingress(&id);
            return;
        }
        let named: Vec<String> = if id.0.is_empty() {
            ing.spec
                .as_ref()
                .and_then(|s| s.rules.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|r| r.host.clone())
                .collect()
        } else {
            admitted_ingress_hosts(ing)
        };
        let mut hosts: Vec<String> = named
            .iter()
            .map(|h| h.trim_end_matches('.').to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .collect();
        hosts.sort();
        hosts.dedup();
        if self.ingresses.get(&id) == Some(&hosts) {
            return;
        }
        self.delete_ingress(&id);
        for h in &hosts {
            *self.ingress_hosts.entry(h.clone()).or_default() += 1;
        }
        self.ingresses.insert(id, hosts);
        self.bump();
    }

    pub fn delete_ingress(&mut self, id: &IngressId) {
        let Some(hosts) = self.ingresses.remove(id) else {
            return;
        };
        for h in hosts {
            if let Some(n) = self.ingress_hosts.get_mut(&h) {
                *n -= 1;
                if *n == 0 {
                    self.ingress_hosts.remove(&h);
                }
            }
        }
        self.bump();
    }

    /// Whether any Ingress names a host (a query for a name outside the zones asks).
    pub fn has_ingress_hosts(&self) -> bool {
        !self.ingress_hosts.is_empty()
    }

    pub fn ingress_ids(&self) -> Vec<IngressId> {
        self.ingresses.keys().cloned().collect()
    }

    /// Whether some Ingress names `host` (lower case, no trailing dot): exactly, or by a
    /// wildcard rule (`*.example.com` covers one more label).
    pub fn is_ingress_host(&self, host: &str) -> bool {
        self.ingress_hosts.contains_key(host)
            || host
                .split_once('.')
                .is_some_and(|(_, rest)| self.ingress_hosts.contains_key(&format!("*.{rest}")))
    }

    /// A `Cluster` of the control plane: its ingress addresses, readiness and drain.
    pub fn apply_cluster(&mut self, c: &Cluster) {
        let Some(name) = c.metadata.name.clone() else {
            return;
        };
        let spec = c.spec.as_ref();
        let ips: Vec<IpAddr> = spec
            .map(|s| s.ingresses.as_slice())
            .unwrap_or_default()
            .iter()
            .filter_map(|a| ingress_ip(a))
            .collect();
        let ready = c.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        });
        let entry = ClusterIngress {
            ips,
            ready,
            draining: spec.and_then(|s| s.drain).unwrap_or(false),
        };
        if self.clusters.get(&name) != Some(&entry) {
            self.clusters.insert(name, entry);
            self.bump();
        }
    }

    pub fn delete_cluster(&mut self, name: &str) {
        if self.clusters.remove(name).is_some() {
            self.bump();
        }
    }

    pub fn cluster_names(&self) -> Vec<String> {
        self.clusters.keys().cloned().collect()
    }

    /// Where clients of an Ingress host go: the ingresses of the Ready clusters that are
    /// not being drained; if there are none, of the Ready ones; if none is Ready, of every
    /// cluster (an answer that may work beats none).
    pub fn ingress_addresses(&self) -> Vec<IpAddr> {
        let pick = |keep: &dyn Fn(&ClusterIngress) -> bool| -> Vec<IpAddr> {
            let mut ips: Vec<IpAddr> = self
                .clusters
                .values()
                .filter(|c| keep(c))
                .flat_map(|c| c.ips.iter().copied())
                .collect();
            ips.sort();
            ips.dedup();
            ips
        };
        [
            pick(&|c| c.ready && !c.draining),
            pick(&|c| c.ready),
            pick(&|_| true),
        ]
        .into_iter()
        .find(|ips| !ips.is_empty())
        .unwrap_or_default()
    }

    /// Counts per object kind, for metrics.
    pub fn counts(&self) -> [(&'static str, usize); 7] {
        [
            ("serviceimports", self.imports.len()),
            ("services", self.services.len()),
            ("endpointslices", self.slice_homes.len()),
            ("pods", self.pod_ips.len()),
            ("namespaces", self.logical.len()),
            ("ingresses", self.ingresses.len()),
            ("clusters", self.clusters.len()),
        ]
    }
}

/// An Ingress's id: logical cluster (from a wildcard list's annotation; empty for one of
/// this cluster's own), namespace, name.
pub fn ingress_id(ing: &Ingress) -> Option<IngressId> {
    let path = ing
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_LOGICAL_CLUSTER))
        .cloned()
        .unwrap_or_default();
    Some((
        path,
        ing.metadata.namespace.clone()?,
        ing.metadata.name.clone()?,
    ))
}

/// Keys present before a re-list that the re-list did not return.
pub fn stale<K: Eq + std::hash::Hash + Clone>(before: Vec<K>, seen: &HashSet<K>) -> Vec<K> {
    before.into_iter().filter(|k| !seen.contains(k)).collect()
}
