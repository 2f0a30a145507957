//! One service's exports merged into the properties of its ServiceImport.
//!
//! KEP-1645: properties that cannot be merged come from the oldest export, and every export
//! is told about the conflict. Ports are the exception: the import carries their union, and
//! a port that clashes with an older export's port is left out (so it routes only to the
//! clusters that expose it the way the import does). Exports whose port sets differ are in
//! conflict even when the union is clean, as the MCS conformance suite requires.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use k8s_openapi::api::core::v1::ServicePort as K8sServicePort;
use sluice_api::mcs::{ServiceImportSpec, ServiceImportType, ServicePort};

use crate::export::Source;
use crate::model::ClusterId;
use crate::names::truncate;

/// Longest rendering of one conflicting value in a message: exported annotations can be big.
const MAX_VALUE_LEN: usize = 120;
/// Kubernetes' default `sessionAffinityConfig.clientIP.timeoutSeconds`.
const DEFAULT_AFFINITY_TIMEOUT: i32 = 10800;

/// A property whose value differs between exports. The order is the order of reasons in
/// the `Conflict` condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConflictKind {
    Port,
    Type,
    SessionAffinity,
    SessionAffinityConfig,
    Labels,
    Annotations,
    InternalTrafficPolicy,
    TrafficDistribution,
    IpFamily,
}

impl ConflictKind {
    /// The `Conflict` condition reason (KEP-1645).
    pub fn reason(self) -> &'static str {
        match self {
            Self::Port => "PortConflict",
            Self::Type => "TypeConflict",
            Self::SessionAffinity => "SessionAffinityConflict",
            Self::SessionAffinityConfig => "SessionAffinityConfigConflict",
            Self::Labels => "LabelsConflict",
            Self::Annotations => "AnnotationsConflict",
            Self::InternalTrafficPolicy => "InternalTrafficPolicyConflict",
            Self::TrafficDistribution => "TrafficDistributionConflict",
            Self::IpFamily => "IPFamilyConflict",
        }
    }

    /// The field the message names.
    pub fn field(self) -> &'static str {
        match self {
            Self::Port => "ports",
            Self::Type => "type",
            Self::SessionAffinity => "sessionAffinity",
            Self::SessionAffinityConfig => "sessionAffinityConfig",
            Self::Labels => "exportedLabels",
            Self::Annotations => "exportedAnnotations",
            Self::InternalTrafficPolicy => "internalTrafficPolicy",
            Self::TrafficDistribution => "trafficDistribution",
            Self::IpFamily => "ipFamilies",
        }
    }
}

/// The conflicts of one service, identical on each of its exports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    pub kinds: BTreeSet<ConflictKind>,
    pub message: String,
}

impl Conflict {
    /// The comma-joined reasons of the `Conflict=True` condition.
    pub fn reason(&self) -> String {
        let reasons: Vec<&str> = self.kinds.iter().map(|k| k.reason()).collect();
        reasons.join(",")
    }
}

/// The merged view of one service.
#[derive(Clone, Debug)]
pub(crate) struct Merged<'a> {
    /// Everything but the VIP, which depends on the importing cluster.
    pub spec: ServiceImportSpec,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// The contributing clusters, sorted (`status.clusters`).
    pub clusters: Vec<ClusterId>,
    pub conflict: Option<Conflict>,
    /// Per source cluster, the Service ports that made it into the import: its MCS
    /// EndpointSlices list exactly these.
    pub ports: Contributed<'a>,
}

/// Per source cluster, the Service ports it contributes to the import.
pub(crate) type Contributed<'a> = BTreeMap<&'a ClusterId, Vec<&'a K8sServicePort>>;

/// Merges `sources`, sorted oldest first. `incumbent` is the type of the ServiceImport that
/// exists now, if any: it is kept while some export still offers it, because switching
/// between a VIP and pod addresses breaks the clients of the service, and KEP-1645 says a
/// new conflict must not disturb traffic. `None` when there is no source.
pub(crate) fn merge<'a>(
    sources: &[Source<'a>],
    incumbent: Option<ServiceImportType>,
) -> Option<Merged<'a>> {
    let (winner, _) = sources.split_first()?;
    let mut details = Details::default();

    let r#type = match incumbent {
        Some(t) if sources.iter().any(|s| s.r#type == t) => t,
        _ => winner.r#type,
    };
    details.differ(
        sources,
        ConflictKind::Type,
        &r#type,
        |s| s.r#type,
        |t| format!("{t:?}"),
    );
    if r#type != winner.r#type {
        details.note(
            ConflictKind::Type,
            format!(
                "the ServiceImport keeps its type {type:?} so that its traffic is not disturbed",
                type = r#type
            ),
        );
    }

    let (ports, contributed) = union_ports(sources, &mut details);

    let winner_affinity = session_affinity(winner);
    details.differ(
        sources,
        ConflictKind::SessionAffinity,
        &winner_affinity,
        session_affinity,
        Clone::clone,
    );
    // The timeout only matters between exports that agree on ClientIP affinity; any other
    // difference is already a SessionAffinityConflict.
    let same_affinity: Vec<Source<'a>> = sources
        .iter()
        .filter(|s| session_affinity(s) == winner_affinity)
        .copied()
        .collect();
    let winner_timeout = affinity_timeout(winner);
    details.differ(
        &same_affinity,
        ConflictKind::SessionAffinityConfig,
        &winner_timeout,
        affinity_timeout,
        |t| t.map_or_else(|| "none".into(), |t| format!("clientIP.timeoutSeconds={t}")),
    );
    details.differ(
        sources,
        ConflictKind::Labels,
        winner.export.exported_labels(),
        |s| s.export.exported_labels(),
        show_map,
    );
    details.differ(
        sources,
        ConflictKind::Annotations,
        winner.export.exported_annotations(),
        |s| s.export.exported_annotations(),
        show_map,
    );
    let winner_policy = internal_traffic_policy(winner);
    details.differ(
        sources,
        ConflictKind::InternalTrafficPolicy,
        &winner_policy,
        internal_traffic_policy,
        Clone::clone,
    );
    let winner_distribution = traffic_distribution(winner);
    details.differ(
        sources,
        ConflictKind::TrafficDistribution,
        &winner_distribution,
        traffic_distribution,
        |d| d.clone().unwrap_or_else(|| "unset".into()),
    );
    // An export that does not state its families (older API servers) agrees with any.
    let winner_families = ip_families(winner);
    if let Some(w) = &winner_families {
        let dissent: Vec<_> = sources
            .iter()
            .skip(1)
            .filter_map(|s| Some((s, ip_families(s)?)))
            .filter(|(_, f)| f != w)
            .map(|(s, f)| (s.cluster(), f.join(",")))
            .collect();
        details.push_dissent(ConflictKind::IpFamily, &dissent, &w.join(","));
    }

    let spec = winner.service.spec.as_ref();
    let mut clusters: Vec<ClusterId> = sources.iter().map(|s| s.cluster().clone()).collect();
    clusters.sort();
    clusters.dedup();
    Some(Merged {
        spec: ServiceImportSpec {
            ports,
            ips: Vec::new(),
            r#type,
            session_affinity: spec.and_then(|s| s.session_affinity.clone()),
            session_affinity_config: spec.and_then(|s| s.session_affinity_config.clone()),
            ip_families: winner_families.unwrap_or_default(),
            internal_traffic_policy: spec.and_then(|s| s.internal_traffic_policy.clone()),
            traffic_distribution: spec.and_then(|s| s.traffic_distribution.clone()),
        },
        labels: winner.export.exported_labels().clone(),
        annotations: winner.export.exported_annotations().clone(),
        clusters,
        conflict: details.into_conflict(winner),
        ports: contributed,
    })
}

/// The union of the sources' ports, oldest first: merged by name, then by (protocol, port).
/// A port whose name or (protocol, port) is already taken by a different port is left out.
fn union_ports<'a>(
    sources: &[Source<'a>],
    details: &mut Details,
) -> (Vec<ServicePort>, Contributed<'a>) {
    let mut union: Vec<ServicePort> = Vec::new();
    let mut contributed = Contributed::new();
    for source in sources {
        let own = contributed.entry(source.cluster()).or_default();
        let service_ports = source.service.spec.as_ref().and_then(|s| s.ports.as_ref());
        for k8s_port in service_ports.into_iter().flatten() {
            let port = import_port(k8s_port);
            let by_name = union.iter().find(|p| p.name == port.name);
            let by_number = union
                .iter()
                .find(|p| p.protocol() == port.protocol() && p.port == port.port);
            match (by_name, by_number) {
                (None, None) => {
                    own.push(k8s_port);
                    union.push(port);
                }
                (Some(same), _) if same.protocol() == port.protocol() && same.port == port.port => {
                    own.push(k8s_port);
                    if same.app_protocol != port.app_protocol {
                        details.note(
                            ConflictKind::Port,
                            format!(
                                "{} of cluster {} has appProtocol {}, the ServiceImport {}",
                                show_port(&port),
                                source.cluster(),
                                port.app_protocol.as_deref().unwrap_or("unset"),
                                same.app_protocol.as_deref().unwrap_or("unset"),
                            ),
                        );
                    }
                }
                (Some(taken), _) | (None, Some(taken)) => details.note(
                    ConflictKind::Port,
                    format!(
                        "{} of cluster {} clashes with {} and is left out",
                        show_port(&port),
                        source.cluster(),
                        show_port(taken)
                    ),
                ),
            }
        }
    }
    // As the MCS conformance suite (v0.5.0) requires: the import carries the union, and an
    // export that lacks some of its ports is in conflict (traffic to such a port can only
    // reach the clusters that expose it).
    for source in sources {
        let own: Vec<ServicePort> = contributed
            .get(source.cluster())
            .into_iter()
            .flatten()
            .map(|p| import_port(p))
            .collect();
        for missing in union.iter().filter(|u| {
            !own.iter()
                .any(|p| p.name == u.name && p.protocol() == u.protocol() && p.port == u.port)
        }) {
            details.note(
                ConflictKind::Port,
                format!(
                    "cluster {} does not export {} of the ServiceImport",
                    source.cluster(),
                    show_port(missing)
                ),
            );
        }
    }
    (union, contributed)
}

/// A Service port as a ServiceImport port: the service port number, not the target port.
/// An empty name is no name, and the protocol is spelled out so ports compare plainly.
pub(crate) fn import_port(p: &K8sServicePort) -> ServicePort {
    ServicePort {
        name: p.name.clone().filter(|n| !n.is_empty()),
        protocol: Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
        app_protocol: p.app_protocol.clone(),
        port: p.port,
    }
}

fn show_port(p: &ServicePort) -> String {
    match &p.name {
        Some(name) => format!("port {name:?} {}/{}", p.port, p.protocol()),
        None => format!("unnamed port {}/{}", p.port, p.protocol()),
    }
}

fn session_affinity(s: &Source<'_>) -> String {
    let spec = s.service.spec.as_ref();
    spec.and_then(|s| s.session_affinity.clone())
        .unwrap_or_else(|| "None".into())
}

/// The effective client-IP affinity timeout: only meaningful with `ClientIP` affinity.
fn affinity_timeout(s: &Source<'_>) -> Option<i32> {
    if session_affinity(s) != "ClientIP" {
        return None;
    }
    let timeout = s
        .service
        .spec
        .as_ref()
        .and_then(|s| s.session_affinity_config.as_ref())
        .and_then(|c| c.client_ip.as_ref())
        .and_then(|c| c.timeout_seconds);
    Some(timeout.unwrap_or(DEFAULT_AFFINITY_TIMEOUT))
}

fn internal_traffic_policy(s: &Source<'_>) -> String {
    let spec = s.service.spec.as_ref();
    spec.and_then(|s| s.internal_traffic_policy.clone())
        .unwrap_or_else(|| "Cluster".into())
}

fn traffic_distribution(s: &Source<'_>) -> Option<String> {
    s.service
        .spec
        .as_ref()
        .and_then(|s| s.traffic_distribution.clone())
}

fn ip_families(s: &Source<'_>) -> Option<Vec<String>> {
    s.service
        .spec
        .as_ref()
        .and_then(|s| s.ip_families.clone())
        .filter(|f| !f.is_empty())
}

fn show_map(m: &BTreeMap<String, String>) -> String {
    let inner: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{{{}}}", inner.join(", "))
}

/// What differs, per kind, in the order found.
#[derive(Default)]
struct Details {
    notes: BTreeMap<ConflictKind, Vec<String>>,
}

impl Details {
    fn note(&mut self, kind: ConflictKind, text: String) {
        self.notes.entry(kind).or_default().push(text);
    }

    /// Notes every source after the winner whose value differs from `chosen`.
    fn differ<'a, T: PartialEq + ?Sized, V: std::borrow::Borrow<T>>(
        &mut self,
        sources: &[Source<'a>],
        kind: ConflictKind,
        chosen: &T,
        value: impl Fn(&Source<'a>) -> V,
        show: impl Fn(&T) -> String,
    ) {
        let dissent: Vec<_> = sources
            .iter()
            .map(|s| (s, value(s)))
            .filter(|(_, v)| v.borrow() != chosen)
            .map(|(s, v)| (s.cluster(), show(v.borrow())))
            .collect();
        self.push_dissent(kind, &dissent, &show(chosen));
    }

    fn push_dissent(&mut self, kind: ConflictKind, dissent: &[(&ClusterId, String)], chosen: &str) {
        if dissent.is_empty() {
            return;
        }
        let mut text = String::new();
        for (i, (cluster, value)) in dissent.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            let _ = write!(text, "{sep}cluster {cluster} has {}", clip(value));
        }
        let _ = write!(text, "; the ServiceImport has {}", clip(chosen));
        self.note(kind, text);
    }

    fn into_conflict(self, winner: &Source<'_>) -> Option<Conflict> {
        if self.notes.is_empty() {
            return None;
        }
        let fields: Vec<String> = self
            .notes
            .iter()
            .map(|(kind, notes)| format!("{} ({})", kind.field(), notes.join("; ")))
            .collect();
        let created = winner.export.created().map_or_else(
            || "creation time unknown".into(),
            |t| format!("created {}", t.0),
        );
        let message = format!(
            "conflicting {}: resolved by the oldest export, from cluster {} ({created})",
            fields.join(", "),
            winner.cluster(),
        );
        Some(Conflict {
            kinds: self.notes.into_keys().collect(),
            message,
        })
    }
}

fn clip(value: &str) -> String {
    truncate(value.to_string(), MAX_VALUE_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_in_kep_order() {
        let c = Conflict {
            kinds: [
                ConflictKind::IpFamily,
                ConflictKind::Port,
                ConflictKind::Type,
            ]
            .into(),
            message: String::new(),
        };
        assert_eq!(c.reason(), "PortConflict,TypeConflict,IPFamilyConflict");
    }

    #[test]
    fn import_ports_spell_out_defaults() {
        let p = K8sServicePort {
            name: Some(String::new()),
            port: 80,
            ..Default::default()
        };
        let ip = import_port(&p);
        assert_eq!(ip.name, None);
        assert_eq!(ip.protocol.as_deref(), Some("TCP"));
        assert_eq!(ip.port, 80);
    }
}
