//! The MCS EndpointSlices of one source cluster's export: what every importing cluster needs
//! to reach that cluster's endpoints of the service.
//!
//! The endpoints are mirrored from the Service's own EndpointSlices, conditions included,
//! so consumers see terminating endpoints and can drain them. Ports are those the source
//! contributes to the ServiceImport, with the endpoint (target) port numbers: an import
//! port a cluster does not expose is absent from its slices, so traffic to that port only
//! goes to the clusters that have it.
//!
//! Slices are grouped by address family and by port mapping (a named `targetPort` can
//! resolve differently per pod, and one slice has one port list), then cut at
//! [`MAX_ENDPOINTS_PER_SLICE`]. In the usual case that is one slice per (service, source
//! cluster, family), named after those.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort as K8sServicePort};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sluice_api::mcs::{LABEL_MANAGED_BY, LABEL_SERVICE_NAME, LABEL_SOURCE_CLUSTER, MANAGED_BY};

use crate::export::Source;
use crate::model::{ClusterId, ServiceKey};
use crate::names::{sanitize_prefix, stable_hash};

pub use sluice_api::mcs::{ANNOTATION_DRAINING, ANNOTATION_WEIGHT, DEFAULT_WEIGHT};
/// The API server's limit on endpoints per EndpointSlice. Mirrored slices use all of it:
/// fewer, larger objects to write to every cluster.
pub const MAX_ENDPOINTS_PER_SLICE: usize = 1000;
/// Longest readable prefix of a slice name; the hash after it keeps names unique.
const MAX_NAME_PREFIX: usize = 100;

/// The name of a source cluster's MCS EndpointSlice: `<service>-<cluster>-<hash>`, the
/// hash over namespace, service, cluster, family and (after the first) the slice's ordinal.
/// Always a DNS-1123 subdomain of at most 253 characters, whatever the inputs.
pub fn slice_name(
    service: &ServiceKey,
    cluster: &ClusterId,
    family: &str,
    ordinal: usize,
) -> String {
    let ordinal_text = ordinal.to_string();
    let mut parts = vec![
        service.namespace.as_str(),
        service.name.as_str(),
        cluster.as_str(),
        family,
    ];
    if ordinal > 0 {
        parts.push(&ordinal_text);
    }
    let hash = format!("{:016x}", stable_hash(&parts));
    let prefix = sanitize_prefix(&format!("{}-{}", service.name, cluster), MAX_NAME_PREFIX);
    if prefix.is_empty() {
        hash
    } else {
        format!("{prefix}-{hash}")
    }
}

/// The source's traffic weight: the Service's `sluice.dev/weight`, [`DEFAULT_WEIGHT`] when
/// absent or not a non-negative integer.
pub fn weight(svc: &Service) -> u32 {
    annotation(svc, ANNOTATION_WEIGHT)
        .and_then(|w| w.trim().parse().ok())
        .unwrap_or(DEFAULT_WEIGHT)
}

/// Whether the source is draining: the Service's `sluice.dev/draining` is `"true"`.
pub fn draining(svc: &Service) -> bool {
    annotation(svc, ANNOTATION_DRAINING).is_some_and(|d| d.trim().eq_ignore_ascii_case("true"))
}

fn annotation<'a>(svc: &'a Service, key: &str) -> Option<&'a str> {
    crate::meta::annotation(&svc.metadata, key)
}

/// A slice port: name, protocol, appProtocol, endpoint port number.
type PortSig = (String, String, Option<String>, i32);

/// The MCS EndpointSlices for `source`, listing only `ports` (the Service ports it
/// contributes to the import). Empty when the source has no endpoints.
pub(crate) fn build(source: &Source<'_>, ports: &[&K8sServicePort]) -> Vec<EndpointSlice> {
    let key = source.export.key;
    let cluster = source.cluster();
    let own = source
        .export
        .member
        .slices
        .get(key)
        .map_or(&[][..], Vec::as_slice);

    let mut groups: BTreeMap<(&str, Vec<PortSig>), Vec<Endpoint>> = BTreeMap::new();
    for slice in own {
        let family = slice.address_type.as_str();
        // FQDN slices are deprecated and name nothing a remote cluster could dial.
        if family != "IPv4" && family != "IPv6" {
            continue;
        }
        let sig: Vec<PortSig> = ports.iter().filter_map(|p| resolve(p, slice)).collect();
        groups.entry((family, sig)).or_default().extend(
            slice
                .endpoints
                .iter()
                .flatten()
                .filter(|e| !e.addresses.is_empty())
                .map(mirror),
        );
    }

    let labels = BTreeMap::from([
        (LABEL_SERVICE_NAME.to_string(), key.name.clone()),
        (LABEL_SOURCE_CLUSTER.to_string(), cluster.to_string()),
        (LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
    ]);
    let annotations = BTreeMap::from([
        (
            ANNOTATION_WEIGHT.to_string(),
            weight(source.service).to_string(),
        ),
        (
            ANNOTATION_DRAINING.to_string(),
            draining(source.service).to_string(),
        ),
    ]);

    let mut ordinals: BTreeMap<&str, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for ((family, sig), mut endpoints) in groups {
        // Sorted and deduplicated so that the same endpoints always give the same objects
        // (own slices may briefly list an endpoint twice while it moves between them).
        endpoints.sort_by(|a, b| a.addresses.cmp(&b.addresses));
        endpoints.dedup_by(|a, b| a.addresses == b.addresses);
        let slice_ports: Vec<EndpointPort> = sig
            .into_iter()
            .map(|(name, protocol, app_protocol, port)| EndpointPort {
                name: Some(name),
                protocol: Some(protocol),
                app_protocol,
                port: Some(port),
            })
            .collect();
        for chunk in endpoints.chunks(MAX_ENDPOINTS_PER_SLICE) {
            let ordinal = ordinals.entry(family).or_default();
            out.push(EndpointSlice {
                metadata: ObjectMeta {
                    name: Some(slice_name(key, cluster, family, *ordinal)),
                    namespace: Some(key.namespace.clone()),
                    labels: Some(labels.clone()),
                    annotations: Some(annotations.clone()),
                    ..Default::default()
                },
                address_type: family.to_string(),
                endpoints: Some(chunk.to_vec()),
                ports: Some(slice_ports.clone()),
            });
            *ordinal += 1;
        }
    }
    out
}

/// The endpoint port of service port `p` in one of the Service's own slices: the number the
/// slice lists under the port's name, else the numeric `targetPort` (or the port itself).
/// `None` when a named `targetPort` is not resolved there.
fn resolve(p: &K8sServicePort, slice: &EndpointSlice) -> Option<PortSig> {
    let name = p.name.as_deref().unwrap_or("");
    let protocol = p.protocol.as_deref().unwrap_or("TCP");
    let listed = slice
        .ports
        .iter()
        .flatten()
        .find(|sp| {
            sp.name.as_deref().unwrap_or("") == name
                && sp.protocol.as_deref().unwrap_or("TCP") == protocol
        })
        .and_then(|sp| sp.port);
    let number = listed.or(match &p.target_port {
        None => Some(p.port),
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(_)) => None,
    })?;
    Some((
        name.to_string(),
        protocol.to_string(),
        p.app_protocol.clone(),
        number,
    ))
}

/// An endpoint as a remote cluster sees it: no `targetRef` (the Pod is not in that
/// cluster) and no topology hints (they are about the source cluster's zones).
fn mirror(e: &Endpoint) -> Endpoint {
    Endpoint {
        addresses: e.addresses.clone(),
        conditions: e.conditions.clone(),
        hostname: e.hostname.clone(),
        node_name: e.node_name.clone(),
        zone: e.zone.clone(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::is_dns1123_subdomain;

    #[test]
    fn names_are_valid_and_distinct() {
        let key = ServiceKey::new("shop", "echo");
        let east = ClusterId::new("east").unwrap();
        let a = slice_name(&key, &east, "IPv4", 0);
        assert!(a.starts_with("echo-east-"), "{a}");
        assert!(is_dns1123_subdomain(&a));
        assert_ne!(a, slice_name(&key, &east, "IPv6", 0));
        assert_ne!(a, slice_name(&key, &east, "IPv4", 1));
        assert_ne!(
            a,
            slice_name(&ServiceKey::new("other", "echo"), &east, "IPv4", 0)
        );
        assert_eq!(a, slice_name(&key, &east, "IPv4", 0));
    }

    #[test]
    fn names_at_the_limits() {
        let long_ns = "n".repeat(63);
        let svc63 = format!("s{}", "x".repeat(62));
        let id = ClusterId::new(format!("c.{}", "y".repeat(61))).unwrap();
        let name = slice_name(&ServiceKey::new(&long_ns, &svc63), &id, "IPv6", 7);
        assert!(name.len() <= 253);
        assert!(is_dns1123_subdomain(&name), "{name}");

        // Not a valid Service name, but it must not produce an invalid object name.
        let weird = ServiceKey::new(&long_ns, format!("{}.-", "Z".repeat(252)));
        let name = slice_name(&weird, &id, "IPv4", 0);
        assert!(is_dns1123_subdomain(&name), "{name}");
        let name = slice_name(&ServiceKey::new("a", "--"), &id, "IPv4", 0);
        assert!(is_dns1123_subdomain(&name), "{name}");
    }

    #[test]
    fn weight_and_draining_annotations() {
        let mut svc = Service::default();
        assert_eq!(weight(&svc), DEFAULT_WEIGHT);
        assert!(!draining(&svc));
        for (value, expected) in [
            ("25", 25),
            (" 0 ", 0),
            ("-3", 100),
            ("1.5", 100),
            ("x", 100),
        ] {
            svc.metadata.annotations = Some([(ANNOTATION_WEIGHT.into(), value.into())].into());
            assert_eq!(weight(&svc), expected, "{value}");
        }
        svc.metadata.annotations = Some([(ANNOTATION_DRAINING.into(), "true".into())].into());
        assert!(draining(&svc));
        svc.metadata.annotations = Some([(ANNOTATION_DRAINING.into(), "yes".into())].into());
        assert!(!draining(&svc));
    }

    #[test]
    fn ports_resolve_from_own_slices_then_target_port() {
        let named = K8sServicePort {
            name: Some("http".into()),
            port: 80,
            target_port: Some(IntOrString::String("web".into())),
            ..Default::default()
        };
        let numeric = K8sServicePort {
            name: Some("tcp".into()),
            port: 9000,
            target_port: Some(IntOrString::Int(9001)),
            ..Default::default()
        };
        let empty = EndpointSlice::default();
        assert_eq!(resolve(&named, &empty), None);
        assert_eq!(
            resolve(&numeric, &empty),
            Some(("tcp".into(), "TCP".into(), None, 9001))
        );
        let own = EndpointSlice {
            ports: Some(vec![EndpointPort {
                name: Some("http".into()),
                protocol: Some("TCP".into()),
                port: Some(8080),
                ..Default::default()
            }]),
            ..Default::default()
        };
        assert_eq!(
            resolve(&named, &own),
            Some(("http".into(), "TCP".into(), None, 8080))
        );
    }
}
