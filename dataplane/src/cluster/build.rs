//! From Kubernetes objects to the proxy's configuration: the cluster mode's one pure
//! step, so every rule here is tested with plain values.
//!
//! - Every Service with a ClusterIP gets a listener per TCP port on `clusterIP:port`
//!   (kube-proxy's role in a local cluster), balanced over the endpoints of its own
//!   EndpointSlices.
//! - Every ClusterSetIP ServiceImport gets a listener per TCP port on `VIP:port`, balanced
//!   over the MCS EndpointSlices of every source cluster that exposes that port: local
//!   endpoints directly, remote ones through their cluster's gateway. Each source's
//!   `sluice.dev/weight` is the weight of each of its endpoints, and `sluice.dev/draining`
//!   drains them all.
//! - The gateway admits the local endpoints of imports (exported services), nothing else.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Service, ServicePort};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use sluice_api::mcs::{LABEL_SERVICE_NAME, LABEL_SOURCE_CLUSTER, ServiceImport, ServiceImportType};
use sluice_mcs::meta::{LABEL_KUBE_SERVICE_NAME, annotation, label};
use sluice_mcs::{ANNOTATION_DRAINING, ANNOTATION_WEIGHT, is_managed};

use crate::config::{
    AppProtocol, DEFAULT_WEIGHT, EndpointConfig, PeerConfig, ProxyConfig, ServiceConfig,
    TunnelConfig,
};

/// What the configuration is built from.
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
    Some(ServiceConfig {
        name: format!(
            "{}/{}:{}",
            svc.metadata.namespace.as_deref().unwrap_or(""),
            svc.metadata.name.as_deref().unwrap_or(""),
            if pname.is_empty() {
                port.to_string()
            } else {
                pname.to_string()
            }
        ),
        listen: SocketAddr::new(ip, port),
        protocol: AppProtocol::from_port(p.app_protocol.as_deref(), p.name.as_deref()),
        endpoints,
        timeouts: Default::default(),
        retry_ratio: 0.2,
        exported: false,
    })
}

pub fn build(inputs: Inputs<'_>) -> ProxyConfig {
    let peer_known = |c: &str| inputs.peers.iter().any(|p| p.cluster == c);
    // Own slices by (namespace, service); MCS slices by (namespace, import).
    let mut own: BTreeMap<(&str, &str), Vec<&EndpointSlice>> = BTreeMap::new();
    let mut mcs: BTreeMap<(&str, &str), Vec<&EndpointSlice>> = BTreeMap::new();
    for s in inputs.slices {
        let Some(ns) = s.metadata.namespace.as_deref() else {
            continue;
        };
        if is_managed(&s.metadata) {
            if let Some(name) = label(&s.metadata, LABEL_SERVICE_NAME) {
                mcs.entry((ns, name)).or_default().push(s);
            }
        } else if let Some(name) = label(&s.metadata, LABEL_KUBE_SERVICE_NAME) {
            own.entry((ns, name)).or_default().push(s);
        }
    }
    let mut services = Vec::new();
    for svc in inputs.services {
        let (Some(ns), Some(name), Some(spec)) = (
            svc.metadata.namespace.as_deref(),
            svc.metadata.name.as_deref(),
            svc.spec.as_ref(),
        ) else {
            continue;
        };
        if spec.type_.as_deref() == Some("ExternalName") {
            continue;
        }
        let slices = own.get(&(ns, name)).map(Vec::as_slice).unwrap_or(&[]);
        for p in spec.ports.iter().flatten() {
            if !tcp(p.protocol.as_deref()) {
                continue;
            }
            services.extend(local_service(svc, p, slices, inputs.cluster));
        }
    }
    for imp in inputs.imports {
        let (Some(ns), Some(name)) = (
            imp.metadata.namespace.as_deref(),
            imp.metadata.name.as_deref(),
        ) else {
            continue;
        };
        if imp.spec.r#type != ServiceImportType::ClusterSetIP {
            continue;
        }
        let Some(vip) = imp
            .spec
            .ips
            .first()
            .and_then(|ip| ip.parse::<IpAddr>().ok())
        else {
            continue;
        };
        let slices = mcs.get(&(ns, name)).map(Vec::as_slice).unwrap_or(&[]);
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
                let local = source == inputs.cluster;
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
            services.push(ServiceConfig {
                name: format!(
                    "{ns}/{name}:{} (clusterset)",
                    if pname.is_empty() {
                        port.to_string()
                    } else {
                        pname.to_string()
                    }
                ),
                listen: SocketAddr::new(vip, port),
                protocol: AppProtocol::from_port(p.app_protocol.as_deref(), p.name.as_deref()),
                endpoints,
                timeouts: Default::default(),
                retry_ratio: 0.2,
                exported: true,
            });
        }
    }
    // Two objects claiming one address (a stale import, a reused ClusterIP): the first
    // keeps it, so one bad object cannot take the whole configuration down.
    let mut seen = std::collections::HashSet::new();
    services.retain(|s| seen.insert(s.listen));
    let tunnel = inputs.tunnel.map(|mut t| {
        t.peers = inputs.peers.clone();
        t
    });
    ProxyConfig {
        services,
        tunnel,
        ingress: None,
    }
}
