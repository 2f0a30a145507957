//! Which Services a cluster exports, and whether each export is valid (KEP-1645 `Valid`).
//!
//! KEP-1645 exports a Service only through a ServiceExport. Sluice adds implicit export:
//! every Service in a namespace Sluice placed is reachable from the whole clusterset
//! without the user writing anything, unless the Service opts out.

use crate::meta::{annotation, label};
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use sluice_api::mcs::{ServiceExport, ServiceImportType, is_managed};

use crate::model::{ClusterId, MemberSnapshot, ServiceKey};

/// Namespace label marking a namespace Sluice placed: its Services are exported implicitly.
pub const LABEL_LOGICAL_CLUSTER: &str = sluice_api::sync::LABEL_LOGICAL_CLUSTER;
/// Service annotation; `"false"` opts the Service out of implicit export. An explicit
/// ServiceExport still exports it: the user asked for both, and the object is the stronger
/// statement.
pub const ANNOTATION_EXPORT: &str = "sluice.dev/export";

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

/// Whether an export can contribute to a ServiceImport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Validity {
    /// The Service exists and maps to this import type.
    Valid(ServiceImportType),
    /// A ServiceExport without a Service of the same name.
    NoService,
    /// An ExternalName Service (or a type Kubernetes does not know): it has no endpoints.
    InvalidServiceType,
}

/// One service exported from one cluster, explicitly or implicitly.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Export<'a> {
    pub member: &'a MemberSnapshot,
    pub key: &'a ServiceKey,
    /// The ServiceExport object; `None` for an implicit export.
    pub object: Option<&'a ServiceExport>,
    pub service: Option<&'a Service>,
    pub validity: Validity,
}

/// A valid export: one that contributes endpoints and properties to the import.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Source<'a> {
    pub export: Export<'a>,
    pub service: &'a Service,
    pub r#type: ServiceImportType,
}

impl<'a> Export<'a> {
    pub fn cluster(&self) -> &'a ClusterId {
        &self.member.cluster
    }

    /// When the export began: the ServiceExport's creation, or for an implicit export the
    /// Service's (the Service is what is exported).
    pub fn created(&self) -> Option<&'a Time> {
        match self.object {
            Some(object) => object.metadata.creation_timestamp.as_ref(),
            None => self.service?.metadata.creation_timestamp.as_ref(),
        }
    }

    /// Oldest first; an unknown creation time counts as newest; ties go to the smaller
    /// cluster id, so every controller instance picks the same winner.
    pub fn age_cmp(&self, other: &Self) -> Ordering {
        let key = |e: &Self| (e.created().is_none(), e.created(), e.cluster());
        key(self).cmp(&key(other))
    }

    pub fn exported_labels(&self) -> &'a BTreeMap<String, String> {
        self.object
            .and_then(|o| o.spec.as_ref())
            .map_or(&NO_LABELS, |s| &s.exported_labels)
    }

    pub fn exported_annotations(&self) -> &'a BTreeMap<String, String> {
        self.object
            .and_then(|o| o.spec.as_ref())
            .map_or(&NO_LABELS, |s| &s.exported_annotations)
    }

    pub fn source(&self) -> Option<Source<'a>> {
        match self.validity {
            Validity::Valid(r#type) => Some(Source {
                export: *self,
                service: self.service?,
                r#type,
            }),
            Validity::NoService | Validity::InvalidServiceType => None,
        }
    }
}

impl<'a> Source<'a> {
    pub fn cluster(&self) -> &'a ClusterId {
        self.export.cluster()
    }
}

/// Every export of `member`, valid or not, in key order.
pub(crate) fn exports(member: &MemberSnapshot) -> Vec<Export<'_>> {
    let mut keys: BTreeSet<&ServiceKey> = member.exports.keys().collect();
    keys.extend(
        member
            .services
            .iter()
            .filter(|(key, svc)| implicitly_exported(member, key, svc))
            .map(|(key, _)| key),
    );
    keys.into_iter()
        .map(|key| {
            // A derived Service is Sluice's own, never an export.
            let service = member
                .services
                .get(key)
                .filter(|s| !is_managed(&s.metadata));
            Export {
                member,
                key,
                object: member.exports.get(key),
                service,
                validity: service.map_or(Validity::NoService, validity),
            }
        })
        .collect()
}

/// Sluice's implicit export: a Service in a placed namespace, not opted out. ExternalName
/// Services are skipped silently, since there is no ServiceExport to report on.
fn implicitly_exported(member: &MemberSnapshot, key: &ServiceKey, svc: &Service) -> bool {
    let placed = member
        .namespaces
        .get(&key.namespace)
        .is_some_and(|ns| label(&ns.metadata, LABEL_LOGICAL_CLUSTER).is_some());
    let opted_out = annotation(&svc.metadata, ANNOTATION_EXPORT)
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("false"));
    placed
        && !opted_out
        && !is_managed(&svc.metadata)
        && matches!(validity(svc), Validity::Valid(_))
}

/// KEP-1645's type mapping: ClusterIP, NodePort and LoadBalancer become ClusterSetIP,
/// `clusterIP: None` becomes Headless, ExternalName is invalid.
pub fn validity(svc: &Service) -> Validity {
    let spec = svc.spec.as_ref();
    let headless = spec.and_then(|s| s.cluster_ip.as_deref()) == Some("None");
    match spec.and_then(|s| s.type_.as_deref()).unwrap_or("ClusterIP") {
        "ClusterIP" if headless => Validity::Valid(ServiceImportType::Headless),
        "ClusterIP" | "NodePort" | "LoadBalancer" => {
            Validity::Valid(ServiceImportType::ClusterSetIP)
        }
        _ => Validity::InvalidServiceType,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ClusterName;
    use k8s_openapi::api::core::v1::{Namespace, ServiceSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn service(type_: &str, cluster_ip: Option<&str>) -> Service {
        Service {
            spec: Some(ServiceSpec {
                type_: Some(type_.into()),
                cluster_ip: cluster_ip.map(Into::into),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn type_mapping() {
        use ServiceImportType::*;
        assert_eq!(
            validity(&service("ClusterIP", None)),
            Validity::Valid(ClusterSetIP)
        );
        assert_eq!(
            validity(&service("ClusterIP", Some("None"))),
            Validity::Valid(Headless)
        );
        assert_eq!(
            validity(&service("NodePort", None)),
            Validity::Valid(ClusterSetIP)
        );
        assert_eq!(
            validity(&service("LoadBalancer", None)),
            Validity::Valid(ClusterSetIP)
        );
        assert_eq!(
            validity(&service("ExternalName", None)),
            Validity::InvalidServiceType
        );
        assert_eq!(validity(&Service::default()), Validity::Valid(ClusterSetIP));
    }

    #[test]
    fn implicit_export_needs_a_placed_namespace_and_no_opt_out() {
        let mut m =
            MemberSnapshot::new(ClusterName::new("east"), ClusterId::new("east").unwrap(), 0);
        let key = ServiceKey::new("shop", "echo");
        let opted_out = ServiceKey::new("shop", "private");
        let external = ServiceKey::new("shop", "ext");
        m.services.insert(key.clone(), service("ClusterIP", None));
        let mut private = service("ClusterIP", None);
        private.metadata.annotations = Some([(ANNOTATION_EXPORT.into(), "false".into())].into());
        m.services.insert(opted_out.clone(), private);
        m.services.insert(external, service("ExternalName", None));
        assert!(exports(&m).is_empty(), "namespace not placed");

        m.namespaces.insert(
            "shop".into(),
            Namespace {
                metadata: ObjectMeta {
                    labels: Some([(LABEL_LOGICAL_CLUSTER.into(), "root.shop".into())].into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        );
        let keys: Vec<_> = exports(&m).iter().map(|e| e.key.clone()).collect();
        assert_eq!(keys, vec![key]);

        m.exports
            .insert(opted_out.clone(), ServiceExport::default());
        let keys: Vec<_> = exports(&m).iter().map(|e| e.key.clone()).collect();
        assert!(
            keys.contains(&opted_out),
            "an explicit export beats the opt-out"
        );
    }
}
