//! From Kubernetes objects to the proxy's configuration: the cluster mode's one pure
//! step, so every rule here is tested with plain values.
//!
//! - Every Service with a ClusterIP gets a listener per TCP port on `clusterIP:port`
//!   (kube-proxy's role in a local cluster), balanced over the endpoints of its own
//!   EndpointSlices.
//! - Every ClusterSetIP ServiceImport gets a listener per TCP port on `VIP:port`, balanced
//!   over the MCS EndpointSlices of every source cluster that exposes that port: local
//!   endpoints directly, remote ones through their cluster's gateway. Each source's
//!   `sluice.dev/weight` is its share of the service, spread evenly over its endpoints
//!   that take new traffic (so a cluster's share does not grow with its endpoint count),
//!   and `sluice.dev/draining` drains them all.
//! - A derived Service (the MCS controller gives one to each import in a cluster whose
//!   kube-proxy serves VIPs) gets no listener of its own: its ClusterIP is the import's VIP.
//! - The gateway admits the local endpoints of imports (exported services), nothing else.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Service, ServicePort};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use k8s_openapi::api::networking::v1::{Ingress, IngressBackend};
use sluice_api::ServiceKey;
use sluice_api::mcs::{ANNOTATION_DRAINING, ANNOTATION_WEIGHT, is_managed, slice_service};
use sluice_api::mcs::{LABEL_SOURCE_CLUSTER, ServiceImport, ServiceImportType};
use sluice_api::sync::serves_ingress;
use sluice_kube::meta::{annotation, label};

use crate::config::{
    AppProtocol, DEFAULT_WEIGHT, EndpointConfig, IngressRoute, Locality, PathType, PeerConfig,
    ProxyConfig, ServiceConfig, TunnelConfig,
};

/// What the whole configuration is built from.
pub struct Inputs<'a> {
    /// This cluster's MCS cluster id.
    pub cluster: &'a str,
    pub services: &'a [Arc<Service>],
    pub slices: &'a [Arc<EndpointSlice>],
    pub imports: &'a [Arc<ServiceImport>],
    /// Identity, trust and this cluster's gateway; `peers` is filled here.
    pub tunnel: Option<TunnelConfig>,
    /// Other clusters' gateways.
    pub peers: Vec<PeerConfig>,
}

/// The port number a slice gives the port called `name` (unnamed: `""`).
fn slice_port(s: &EndpointSlice, name: &str) -> Option<u16> {
    s.ports
        .as_ref()?
        .iter()
        .find(|p| {
            p.name.as_deref().unwrap_or("") == name
                && p.protocol.as_deref().unwrap_or("TCP") == "TCP"
        })
        .and_then(|p| p.port)
        .and_then(|p| u16::try_from(p).ok())
}

/// Serving endpoints: ready ones, and terminating ones still serving (as draining: they
/// finish what they have and get nothing new).
fn serving(e: &Endpoint) -> Option<bool> {
    let c = e.conditions.as_ref();
    let ready = c.and_then(|c| c.ready).unwrap_or(true);
    let serving = c.and_then(|c| c.serving).unwrap_or(ready);
    let terminating = c.and_then(|c| c.terminating).unwrap_or(false);
    if ready && !terminating {
        Some(false)
    } else if serving {
        Some(true)
    } else {
        None
    }
}

fn endpoints_of(
    s: &EndpointSlice,
    port: u16,
    weight: u32,
    draining: bool,
    cluster: &str,
    via: Option<&str>,
) -> Vec<EndpointConfig> {
    let mut out = Vec::new();
    for e in s.endpoints.iter().flatten() {
        let Some(drain) = serving(e) else { continue };
        for a in &e.addresses {
            let Ok(ip) = a.parse::<IpAddr>() else {
                continue;
            };
            out.push(EndpointConfig {
                address: SocketAddr::new(ip, port),
                weight,
                draining: draining || drain,
                cluster: cluster.to_string(),
                via: via.map(str::to_string),
            });
        }
    }
    out
}

fn tcp(protocol: Option<&str>) -> bool {
    protocol.unwrap_or("TCP") == "TCP"
}

fn local_service(
    svc: &Service,
    p: &ServicePort,
    slices: &[&EndpointSlice],
    cluster: &str,
) -> Option<ServiceConfig> {
    let spec = svc.spec.as_ref()?;
    let ip: IpAddr = spec.cluster_ip.as_deref()?.parse().ok()?;
    let port = u16::try_from(p.port).ok()?;
    let pname = p.name.as_deref().unwrap_or("");
    let mut endpoints = Vec::new();
    for s in slices {
        if let Some(target) = slice_port(s, pname) {
            endpoints.extend(endpoints_of(
                s,
                target,
                DEFAULT_WEIGHT,
                false,
                cluster,
                None,
            ));
        }
    }
    let name = listener_name(
        svc.metadata.namespace.as_deref().unwrap_or(""),
        svc.metadata.name.as_deref().unwrap_or(""),
        &port_label(pname, port),
        false,
    );
    Some(listener(
        name,
        SocketAddr::new(ip, port),
        AppProtocol::from_port(p.app_protocol.as_deref(), p.name.as_deref()),
        endpoints,
        false,
    ))
}

/// A listener's name: `ns/name:port`, and ` (clusterset)` for an import's VIP.
fn listener_name(ns: &str, name: &str, port: &str, clusterset: bool) -> String {
    let suffix = if clusterset { " (clusterset)" } else { "" };
    format!("{ns}/{name}:{port}{suffix}")
}

/// How a listener's name shows a port: by its name, else its number.
fn port_label(name: &str, number: u16) -> String {
    if name.is_empty() {
        number.to_string()
    } else {
        name.to_string()
    }
}

/// A listener with the cluster mode's defaults (timeouts, a 20% retry budget).
fn listener(
    name: String,
    listen: SocketAddr,
    protocol: AppProtocol,
    endpoints: Vec<EndpointConfig>,
    exported: bool,
) -> ServiceConfig {
    ServiceConfig {
        name,
        listen,
        protocol,
        endpoints,
        timeouts: Default::default(),
        retry_ratio: 0.2,
        exported,
        locality: Locality::Any,
    }
}

/// One service's objects in this cluster (by namespace sameness, the Service, its
/// ServiceImport and their slices share a key): everything its listeners come from.
#[derive(Default)]
pub struct ServiceObjects<'a> {
    pub service: Option<&'a Service>,
    /// The Service's own EndpointSlices.
    pub own_slices: Vec<&'a EndpointSlice>,
    pub import: Option<&'a ServiceImport>,
    /// The MCS EndpointSlices of the import, one or more per source cluster.
    pub mcs_slices: Vec<&'a EndpointSlice>,
}

impl<'a> ServiceObjects<'a> {
    /// File `slice` under its kind (own or MCS).
    pub fn add_slice(&mut self, slice: &'a EndpointSlice) {
        if is_managed(&slice.metadata) {
            self.mcs_slices.push(slice);
        } else {
            self.own_slices.push(slice);
        }
    }
}

/// Whether a traffic shift is under way for the service: some source cluster's weight
/// is not the default.
pub fn shifting(objects: &ServiceObjects<'_>) -> bool {
    objects.mcs_slices.iter().any(|s| {
        annotation(&s.metadata, ANNOTATION_WEIGHT)
            .and_then(|w| w.parse::<u32>().ok())
            .is_some_and(|w| w != DEFAULT_WEIGHT)
    })
}

/// The listeners of one service: its ClusterIP ports, then its clusterset VIP ports.
/// `peers` are the clusters whose endpoints are reachable (through their gateways).
pub fn service_configs(
    cluster: &str,
    peers: &[PeerConfig],
    objects: &ServiceObjects<'_>,
) -> Vec<ServiceConfig> {
    let mut services = Vec::new();
    // A derived Service (the MCS controller's, for kube-proxy) has the import's VIP as
    // its ClusterIP: the import's listener below serves that address, through gateways.
    if let Some(svc) = objects.service
        && !is_managed(&svc.metadata)
        && let Some(spec) = svc.spec.as_ref()
        && spec.type_.as_deref() != Some("ExternalName")
    {
        for p in spec.ports.iter().flatten() {
            if tcp(p.protocol.as_deref()) {
                services.extend(local_service(svc, p, &objects.own_slices, cluster));
            }
        }
    }
    if let Some(imp) = objects.import {
        services.extend(clusterset_services(
            cluster,
            peers,
            imp,
            &objects.mcs_slices,
        ));
    }
    services
}

fn clusterset_services(
    cluster: &str,
    peers: &[PeerConfig],
    imp: &ServiceImport,
    slices: &[&EndpointSlice],
) -> Vec<ServiceConfig> {
    let peer_known = |c: &str| peers.iter().any(|p| p.cluster == c);
    let (Some(ns), Some(name)) = (
        imp.metadata.namespace.as_deref(),
        imp.metadata.name.as_deref(),
    ) else {
        return Vec::new();
    };
    if imp.spec.r#type != ServiceImportType::ClusterSetIP {
        return Vec::new();
    }
    let Some(vip) = imp
        .spec
        .ips
        .first()
        .and_then(|ip| ip.parse::<IpAddr>().ok())
    else {
        return Vec::new();
    };
    let locality = Locality::from_traffic_distribution(imp.spec.traffic_distribution.as_deref());
    let mut services = Vec::new();
    for p in &imp.spec.ports {
        if !tcp(p.protocol.as_deref()) {
            continue;
        }
        let Ok(port) = u16::try_from(p.port) else {
            continue;
        };
        let pname = p.name.as_deref().unwrap_or("");
        let mut endpoints = Vec::new();
        for s in slices {
            let Some(source) = label(&s.metadata, LABEL_SOURCE_CLUSTER) else {
                continue;
            };
            let local = source == cluster;
            if !local && !peer_known(source) {
                continue;
            }
            let Some(target) = slice_port(s, pname) else {
                continue;
            };
            let weight = annotation(&s.metadata, ANNOTATION_WEIGHT)
                .and_then(|w| w.parse().ok())
                .unwrap_or(DEFAULT_WEIGHT);
            let draining = annotation(&s.metadata, ANNOTATION_DRAINING) == Some("true");
            let via = (!local).then_some(source);
            endpoints.extend(endpoints_of(s, target, weight, draining, source, via));
        }
        spread_weights(&mut endpoints);
        services.push(ServiceConfig {
            locality,
            ..listener(
                listener_name(ns, name, &port_label(pname, port), true),
                SocketAddr::new(vip, port),
                AppProtocol::from_port(p.app_protocol.as_deref(), p.name.as_deref()),
                endpoints,
                true,
            )
        });
    }
    services
}

/// Resolution of a cluster's weight when it is spread over its endpoints: a share of 1
/// over 1,000 endpoints still gives each a weight of 1.
const WEIGHT_SCALE: u64 = 1000;

/// Turn each endpoint's weight, its source cluster's share, into its part of that share:
/// `weight × WEIGHT_SCALE ÷ n`, `n` the source's endpoints that take new traffic (not
/// draining). A positive share never rounds down to nothing.
fn spread_weights(endpoints: &mut [EndpointConfig]) {
    let mut taking: HashMap<String, u64> = HashMap::new();
    for e in endpoints.iter().filter(|e| !e.draining) {
        *taking.entry(e.cluster.clone()).or_default() += 1;
    }
    for e in endpoints.iter_mut() {
        let n = taking.get(&e.cluster).copied().unwrap_or(1).max(1);
        let w = u64::from(e.weight) * WEIGHT_SCALE / n;
        e.weight = if e.weight > 0 {
            u32::try_from(w.max(1)).unwrap_or(u32::MAX)
        } else {
            0
        };
    }
}

/// The configuration from every service's listeners (in the order given) and the tunnels.
/// Two objects claiming one address (a stale import, a reused ClusterIP): the first keeps
/// it, so one bad object cannot take the whole configuration down.
pub fn assemble<'a>(
    groups: impl IntoIterator<Item = &'a [ServiceConfig]>,
    tunnel: Option<TunnelConfig>,
    peers: &[PeerConfig],
) -> ProxyConfig {
    let mut seen = HashSet::new();
    let services = groups
        .into_iter()
        .flatten()
        .filter(|s| seen.insert(s.listen))
        .cloned()
        .collect();
    let tunnel = tunnel.map(|mut t| {
        t.peers = peers.to_vec();
        t
    });
    ProxyConfig {
        services,
        tunnel,
        ingress: None,
    }
}

/// Which service owns each listen address in [`assemble`]'s result (the first to name
/// it), and whether any address is named by more than one service.
pub fn owners(
    built: &BTreeMap<ServiceKey, Vec<ServiceConfig>>,
) -> (HashMap<SocketAddr, ServiceKey>, bool) {
    let mut out = HashMap::new();
    let mut shared = false;
    for (key, configs) in built {
        for c in configs {
            match out.entry(c.listen) {
                std::collections::hash_map::Entry::Occupied(_) => shared = true,
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(key.clone());
                }
            }
        }
    }
    (out, shared)
}

/// The listener an Ingress backend in namespace `ns` names: the Service's clusterset VIP
/// for that port (it reaches the Service wherever it runs), else its ClusterIP.
fn backend_listener(
    ns: &str,
    backend: &IngressBackend,
    built: &BTreeMap<ServiceKey, Vec<ServiceConfig>>,
) -> Option<String> {
    let svc = backend.service.as_ref()?;
    let configs = built.get(&ServiceKey::new(ns, &svc.name))?;
    let port = svc.port.as_ref()?;
    let fits = |c: &&ServiceConfig, clusterset: bool| match (&port.name, port.number) {
        (Some(pname), _) => c.name == listener_name(ns, &svc.name, pname, clusterset),
        (None, Some(n)) => {
            i32::from(c.listen.port()) == n && c.name.ends_with(" (clusterset)") == clusterset
        }
        (None, None) => false,
    };
    let pick = |clusterset| configs.iter().find(|c| fits(c, clusterset));
    pick(true).or_else(|| pick(false)).map(|c| c.name.clone())
}

/// The ingress routes of Ingress objects, each with the namespace its backends live in
/// here (its downstream namespace, for one from a logical cluster). Rules whose backend
/// has no listener (no such Service or port) are left out; a default backend serves any
/// host and path no rule takes. Of a logical cluster's Ingress, only the rules of the hosts
/// it was admitted for ([`sluice_api::sync::INGRESS_HOSTS_ANNOTATION`]).
pub fn ingress_routes<'a>(
    ingresses: impl IntoIterator<Item = (&'a str, &'a Ingress)>,
    built: &BTreeMap<ServiceKey, Vec<ServiceConfig>>,
) -> Vec<IngressRoute> {
    let mut out = Vec::new();
    for (ns, ing) in ingresses {
        let Some(spec) = ing.spec.as_ref().filter(|_| serves_ingress(ing)) else {
            continue;
        };
        // A logical cluster's Ingress serves only the hosts the control plane admitted it
        // for (its workspace's domains, first claim wins); a cluster's own, all of its.
        let logical = ing
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(sluice_api::sync::ANNOTATION_LOGICAL_CLUSTER));
        let admitted = sluice_api::sync::admitted_ingress_hosts(ing);
        let serves = |host: &str| {
            !logical
                || admitted
                    .iter()
                    .any(|a| *a == sluice_api::tenancy::normalize_domain(host))
        };
        for rule in spec.rules.iter().flatten() {
            let host = rule.host.clone().unwrap_or_default();
            if !serves(&host) {
                continue;
            }
            for p in rule.http.iter().flat_map(|h| &h.paths) {
                if let Some(service) = backend_listener(ns, &p.backend, built) {
                    out.push(IngressRoute {
                        host: host.clone(),
                        path: p.path.clone(),
                        path_type: match p.path_type.as_str() {
                            "Exact" => PathType::Exact,
                            _ => PathType::Prefix,
                        },
                        service,
                    });
                }
            }
        }
        if let Some(service) = spec
            .default_backend
            .as_ref()
            .filter(|_| serves(""))
            .and_then(|b| backend_listener(ns, b, built))
        {
            out.push(IngressRoute {
                host: String::new(),
                path: None,
                path_type: PathType::Prefix,
                service,
            });
        }
    }
    out
}

/// Group objects by service key.
pub fn group<'a>(
    services: &'a [Arc<Service>],
    slices: &'a [Arc<EndpointSlice>],
    imports: &'a [Arc<ServiceImport>],
) -> BTreeMap<ServiceKey, ServiceObjects<'a>> {
    let mut by_key: BTreeMap<ServiceKey, ServiceObjects<'a>> = BTreeMap::new();
    for svc in services {
        if let Some(k) = ServiceKey::from_meta(&svc.metadata) {
            by_key.entry(k).or_default().service = Some(svc);
        }
    }
    for imp in imports {
        if let Some(k) = ServiceKey::from_meta(&imp.metadata) {
            by_key.entry(k).or_default().import = Some(imp);
        }
    }
    for s in slices {
        if let Some(k) = slice_service(s) {
            by_key.entry(k).or_default().add_slice(s);
        }
    }
    by_key
}

/// The whole configuration at once (the cluster mode keeps it per service instead, and
/// rebuilds only the services that changed).
pub fn build(inputs: Inputs<'_>) -> ProxyConfig {
    let groups: Vec<Vec<ServiceConfig>> = group(inputs.services, inputs.slices, inputs.imports)
        .values()
        .map(|o| service_configs(inputs.cluster, &inputs.peers, o))
        .collect();
    assemble(
        groups.iter().map(Vec::as_slice),
        inputs.tunnel,
        &inputs.peers,
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::config::TunnelTransport;
    use serde_json::json;

    fn obj<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Arc<T> {
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn service(name: &str, ip: &str) -> Arc<Service> {
        obj(json!({
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"clusterIP": ip, "ports": [
                {"name": "http", "port": 80, "targetPort": 8080},
                {"name": "dns", "port": 53, "protocol": "UDP"},
            ]},
        }))
    }

    fn own_slice(svc: &str, ips: &[&str]) -> Arc<EndpointSlice> {
        obj(json!({
            "metadata": {"name": format!("{svc}-own"), "namespace": "shop",
                         "labels": {"kubernetes.io/service-name": svc}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080}],
            "endpoints": ips.iter().map(|ip| json!({"addresses": [ip]})).collect::<Vec<_>>(),
        }))
    }

    fn mcs_slice(
        svc: &str,
        source: &str,
        ip: &str,
        annotations: serde_json::Value,
    ) -> Arc<EndpointSlice> {
        obj(json!({
            "metadata": {"name": format!("{svc}-{source}"), "namespace": "shop",
                         "annotations": annotations,
                         "labels": {"multicluster.kubernetes.io/service-name": svc,
                                    "multicluster.kubernetes.io/source-cluster": source,
                                    "endpointslice.kubernetes.io/managed-by": "sluice-mcs"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080}],
            "endpoints": [{"addresses": [ip]}, {"addresses": [ip], "conditions": {"ready": false}}],
        }))
    }

    fn import(svc: &str, vip: &str, type_: &str) -> Arc<ServiceImport> {
        obj(json!({
            "metadata": {"name": svc, "namespace": "shop"},
            "spec": {"type": type_, "ips": [vip], "ports": [{"name": "http", "port": 80}]},
        }))
    }

    fn peer(cluster: &str) -> PeerConfig {
        PeerConfig {
            cluster: cluster.into(),
            address: "127.21.0.1:15443".parse().unwrap(),
            transport: TunnelTransport::H2,
        }
    }

    fn build_all(
        services: &[Arc<Service>],
        slices: &[Arc<EndpointSlice>],
        imports: &[Arc<ServiceImport>],
        peers: Vec<PeerConfig>,
    ) -> ProxyConfig {
        build(Inputs {
            cluster: "east",
            services,
            slices,
            imports,
            tunnel: None,
            peers,
        })
    }

    #[test]
    fn cluster_ips_and_clusterset_vips() {
        let services = [service("echo", "10.96.0.10")];
        let slices = [
            own_slice("echo", &["10.0.0.1", "10.0.0.2"]),
            mcs_slice("echo", "east", "10.0.0.1", json!({})),
            mcs_slice(
                "echo",
                "west",
                "10.1.0.1",
                json!({"sluice.dev/weight": "30", "sluice.dev/draining": "true"}),
            ),
            mcs_slice("echo", "south", "10.2.0.1", json!({})),
        ];
        let imports = [import("echo", "127.60.0.1", "ClusterSetIP")];
        let c = build_all(&services, &slices, &imports, vec![peer("west")]);
        let names: Vec<&str> = c.services.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["shop/echo:http", "shop/echo:http (clusterset)"],
            "UDP ports get no listener"
        );

        let local = &c.services[0];
        assert_eq!(local.listen, "10.96.0.10:80".parse().unwrap());
        assert!(!local.exported);
        let addrs: Vec<String> = local
            .endpoints
            .iter()
            .map(|e| e.address.to_string())
            .collect();
        assert_eq!(addrs, ["10.0.0.1:8080", "10.0.0.2:8080"]);

        let vip = &c.services[1];
        assert_eq!(vip.listen, "127.60.0.1:80".parse().unwrap());
        assert!(vip.exported);
        // Ready endpoints only; south has no peer, so its endpoints are unreachable.
        let eps: Vec<(String, &str, Option<&str>, u32, bool)> = vip
            .endpoints
            .iter()
            .map(|e| {
                (
                    e.address.to_string(),
                    e.cluster.as_str(),
                    e.via.as_deref(),
                    e.weight,
                    e.draining,
                )
            })
            .collect();
        assert_eq!(
            eps,
            [
                (
                    "10.0.0.1:8080".to_string(),
                    "east",
                    None,
                    DEFAULT_WEIGHT * 1000,
                    false
                ),
                (
                    "10.1.0.1:8080".to_string(),
                    "west",
                    Some("west"),
                    30_000,
                    true
                ),
            ]
        );
    }

    /// An MCS slice of `source` with `n` ready endpoints.
    fn mcs_slice_of(source: &str, n: u8, annotations: serde_json::Value) -> Arc<EndpointSlice> {
        let endpoints: Vec<serde_json::Value> = (1..=n)
            .map(|i| json!({"addresses": [format!("10.{}.0.{i}", source.len())]}))
            .collect();
        obj(json!({
            "metadata": {"name": format!("echo-{source}"), "namespace": "shop",
                         "annotations": annotations,
                         "labels": {"multicluster.kubernetes.io/service-name": "echo",
                                    "multicluster.kubernetes.io/source-cluster": source,
                                    "endpointslice.kubernetes.io/managed-by": "sluice-mcs"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080}],
            "endpoints": endpoints,
        }))
    }

    /// Each cluster's summed endpoint weight, and the endpoints.
    fn cluster_weights(
        slices: &[Arc<EndpointSlice>],
    ) -> (BTreeMap<String, u64>, Vec<EndpointConfig>) {
        let imports = [import("echo", "127.60.0.1", "ClusterSetIP")];
        let c = build_all(&[], slices, &imports, vec![peer("west")]);
        let mut sums = BTreeMap::new();
        for e in &c.services[0].endpoints {
            *sums.entry(e.cluster.clone()).or_default() += u64::from(e.weight);
        }
        (sums, c.services[0].endpoints.clone())
    }

    #[test]
    fn a_cluster_weight_is_its_share_whatever_its_endpoint_count() {
        // One endpoint in east, three in west, equal weights: half the traffic each.
        let (sums, endpoints) = cluster_weights(&[
            mcs_slice_of("east", 1, json!({})),
            mcs_slice_of("west", 3, json!({})),
        ]);
        assert_eq!(endpoints.len(), 4);
        assert_eq!(sums["east"], 100_000);
        assert!((99_997..=100_000).contains(&sums["west"]), "{sums:?}");
        // 75 / 25 with the counts the other way round.
        let (sums, _) = cluster_weights(&[
            mcs_slice_of("east", 3, json!({"sluice.dev/weight": "25"})),
            mcs_slice_of("west", 1, json!({"sluice.dev/weight": "75"})),
        ]);
        let (e, w) = (sums["east"] as f64, sums["west"] as f64);
        assert!((w / (e + w) - 0.75).abs() < 0.001, "{sums:?}");
        // Weight 0 stays 0; a weight of 1 over many endpoints never rounds to 0.
        let (_, endpoints) = cluster_weights(&[
            mcs_slice_of("east", 2, json!({"sluice.dev/weight": "0"})),
            mcs_slice_of("west", 200, json!({"sluice.dev/weight": "1"})),
        ]);
        assert!(
            endpoints
                .iter()
                .filter(|e| e.cluster == "east")
                .all(|e| e.weight == 0)
        );
        assert!(
            endpoints
                .iter()
                .filter(|e| e.cluster == "west")
                .all(|e| e.weight == 5)
        );
    }

    #[test]
    fn traffic_follows_cluster_weights_not_endpoint_counts() {
        let (_, endpoints) = cluster_weights(&[
            mcs_slice_of("east", 1, json!({})),
            mcs_slice_of("west", 3, json!({})),
        ]);
        let b = crate::balance::Balancer::new(
            "echo",
            crate::metrics::ProxyMetrics::default(),
            &endpoints,
            &crate::tunnel::Tunnels::default(),
        );
        let picks = 20_000;
        let east = (0..picks)
            .filter(|_| b.pick(&[]).is_some_and(|e| e.cluster == "east"))
            .count();
        // Half (±3 %), not the quarter per-endpoint weights gave.
        assert!((9_400..10_600).contains(&east), "{east} of {picks} to east");
    }

    #[test]
    fn headless_imports_and_external_names_get_no_listener() {
        let external: Arc<Service> = obj(json!({
            "metadata": {"name": "ext", "namespace": "shop"},
            "spec": {"type": "ExternalName", "externalName": "example.com",
                     "ports": [{"port": 80}]},
        }));
        let imports = [import("db", "127.60.0.2", "Headless")];
        let c = build_all(&[external], &[], &imports, vec![]);
        assert!(c.services.is_empty(), "{:?}", c.services);
    }

    #[test]
    fn a_derived_service_leaves_its_address_to_the_import() {
        let derived: Arc<Service> = obj(json!({
            "metadata": {"name": "derived-abc", "namespace": "shop",
                         "labels": {"endpointslice.kubernetes.io/managed-by": "sluice-mcs",
                                    "multicluster.kubernetes.io/service-name": "echo"}},
            "spec": {"clusterIP": "10.96.0.99", "ports": [{"name": "http", "port": 80}]},
        }));
        let slices = [mcs_slice("echo", "west", "10.1.0.1", json!({}))];
        let imports = [import("echo", "10.96.0.99", "ClusterSetIP")];
        let c = build_all(&[derived], &slices, &imports, vec![peer("west")]);
        let names: Vec<&str> = c.services.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["shop/echo:http (clusterset)"]);
        assert_eq!(c.services[0].endpoints.len(), 1);
    }

    #[test]
    fn a_claimed_address_stays_with_the_first() {
        let services = [service("a", "10.96.0.10"), service("b", "10.96.0.10")];
        let c = build_all(&services, &[], &[], vec![]);
        assert_eq!(c.services.len(), 1);
        assert_eq!(c.services[0].name, "shop/a:http");
        assert!(c.validate().is_ok());
    }

    /// The cluster mode rebuilds one service at a time; the pieces must add up to the
    /// whole.
    #[test]
    fn per_service_pieces_add_up_to_the_whole() {
        let services = [service("a", "10.96.0.10"), service("b", "10.96.0.11")];
        let slices = [
            own_slice("a", &["10.0.0.1"]),
            own_slice("b", &["10.0.0.2"]),
            mcs_slice("b", "west", "10.1.0.2", json!({})),
        ];
        let imports = [import("b", "127.60.0.1", "ClusterSetIP")];
        let peers = vec![peer("west")];
        let whole = build_all(&services, &slices, &imports, peers.clone());
        let pieces: Vec<Vec<ServiceConfig>> = group(&services, &slices, &imports)
            .values()
            .map(|o| service_configs("east", &peers, o))
            .collect();
        assert_eq!(pieces.iter().map(Vec::len).collect::<Vec<_>>(), [1, 2]);
        let assembled = assemble(pieces.iter().map(Vec::as_slice), None, &peers);
        assert_eq!(assembled, whole);
    }

    #[test]
    fn prefer_close_comes_from_the_imports_traffic_distribution() {
        let imp = |td: Option<&str>| -> Arc<ServiceImport> {
            obj(json!({
                "metadata": {"name": "echo", "namespace": "shop"},
                "spec": {"type": "ClusterSetIP", "ips": ["127.60.0.1"],
                         "ports": [{"name": "http", "port": 80}],
                         "trafficDistribution": td},
            }))
        };
        for (td, want) in [
            (None, Locality::Any),
            (Some("PreferClose"), Locality::PreferClose),
            (Some("PreferSameZone"), Locality::PreferClose),
            (Some("SomethingElse"), Locality::Any),
        ] {
            let c = build_all(&[], &[], &[imp(td)], vec![]);
            assert_eq!(c.services[0].locality, want, "{td:?}");
        }
    }

    fn ingress(v: serde_json::Value) -> Ingress {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn ingress_rules_route_to_clusterset_vips_first() {
        let services = [
            service("echo", "10.96.0.10"),
            service("local", "10.96.0.11"),
        ];
        let imports = [import("echo", "127.60.0.1", "ClusterSetIP")];
        let configs = build_all(&services, &[], &imports, vec![]).services;
        let mut built: BTreeMap<ServiceKey, Vec<ServiceConfig>> = BTreeMap::new();
        for c in configs {
            let svc = c.name.split(['/', ':']).nth(1).unwrap().to_string();
            built
                .entry(ServiceKey::new("shop", &svc))
                .or_default()
                .push(c);
        }
        let web = ingress(json!({
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {
                "rules": [{"host": "shop.example", "http": {"paths": [
                    {"path": "/", "pathType": "Prefix",
                     "backend": {"service": {"name": "echo", "port": {"number": 80}}}},
                    {"path": "/local", "pathType": "Exact",
                     "backend": {"service": {"name": "local", "port": {"name": "http"}}}},
                    {"path": "/nope", "pathType": "Prefix",
                     "backend": {"service": {"name": "missing", "port": {"number": 80}}}},
                    {"path": "/wrong-port", "pathType": "Prefix",
                     "backend": {"service": {"name": "echo", "port": {"number": 81}}}},
                ]}}],
                "defaultBackend": {"service": {"name": "echo", "port": {"name": "http"}}},
            },
        }));
        let other = ingress(json!({
            "metadata": {"name": "other", "namespace": "shop"},
            "spec": {"ingressClassName": "nginx", "rules": [{"host": "x", "http": {"paths": [
                {"path": "/", "pathType": "Prefix",
                 "backend": {"service": {"name": "echo", "port": {"number": 80}}}}]}}]},
        }));
        let routes = ingress_routes([("shop", &web), ("shop", &other)], &built);
        let got: Vec<(&str, Option<&str>, PathType, &str)> = routes
            .iter()
            .map(|r| {
                (
                    r.host.as_str(),
                    r.path.as_deref(),
                    r.path_type,
                    r.service.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "shop.example",
                    Some("/"),
                    PathType::Prefix,
                    "shop/echo:http (clusterset)"
                ),
                (
                    "shop.example",
                    Some("/local"),
                    PathType::Exact,
                    "shop/local:http"
                ),
                ("", None, PathType::Prefix, "shop/echo:http (clusterset)"),
            ]
        );
        // A logical cluster's Ingress: only the hosts it was admitted for, no catch-all.
        let tenant = ingress(json!({
            "metadata": {"name": "grab", "namespace": "shop", "annotations": {
                "sluice.dev/logical-cluster": "root:b",
                "sluice.dev/ingress-hosts": "[\"shop.example\"]"}},
            "spec": {
                "rules": [
                    {"host": "payments-api.com", "http": {"paths": [{"path": "/", "pathType": "Prefix",
                     "backend": {"service": {"name": "echo", "port": {"number": 80}}}}]}},
                    {"host": "Shop.Example", "http": {"paths": [{"path": "/", "pathType": "Prefix",
                     "backend": {"service": {"name": "echo", "port": {"number": 80}}}}]}}],
                "defaultBackend": {"service": {"name": "echo", "port": {"name": "http"}}},
            },
        }));
        let hosts: Vec<String> = ingress_routes([("shop", &tenant)], &built)
            .into_iter()
            .map(|r| r.host)
            .collect();
        assert_eq!(hosts, ["Shop.Example"]);
    }
}
