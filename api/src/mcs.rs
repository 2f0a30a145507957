//! Multi-Cluster Services types (KEP-1645, `multicluster.x-k8s.io`) and the About API's
//! `ClusterProperty` (KEP-2149, `about.k8s.io`).
//!
//! The structs are what controllers and the DNS server read and write through kube-rs;
//! [`crds`] gives the same types as CustomResourceDefinitions, which the Sluice API server
//! serves built in and `sluice mcs crds` prints for real clusters.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::SessionAffinityConfig;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub const GROUP: &str = "multicluster.x-k8s.io";
/// The storage version; `v1alpha1` is served with the same schema.
pub const VERSION: &str = "v1beta1";
pub const ABOUT_GROUP: &str = "about.k8s.io";
pub const ABOUT_VERSION: &str = "v1beta1";

/// EndpointSlice label naming the ServiceImport a slice belongs to.
pub const LABEL_SERVICE_NAME: &str = "multicluster.kubernetes.io/service-name";
/// EndpointSlice label naming the cluster the endpoints come from.
pub const LABEL_SOURCE_CLUSTER: &str = "multicluster.kubernetes.io/source-cluster";
/// EndpointSlice label naming the controller that wrote it.
pub const LABEL_MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
/// Sluice's value of [`LABEL_MANAGED_BY`].
pub const MANAGED_BY: &str = "sluice-mcs";
/// ClusterProperty holding this cluster's id.
/// The label Kubernetes puts on a Service's own EndpointSlices.
pub const LABEL_KUBE_SERVICE_NAME: &str = "kubernetes.io/service-name";
/// Service annotation (copied to the source's MCS slices): the source cluster's share of the
/// service's traffic, a non-negative integer, relative to the other clusters' weights.
pub const ANNOTATION_WEIGHT: &str = "sluice.dev/weight";
/// Service annotation (copied to the source's MCS slices): `"true"` while the source cluster's
/// endpoints are being drained: no new connections or requests go to them.
pub const ANNOTATION_DRAINING: &str = "sluice.dev/draining";
/// The weight of a cluster whose Service states none (or an unreadable one).
pub const DEFAULT_WEIGHT: u32 = 100;
pub const CLUSTER_ID_PROPERTY: &str = "cluster.clusterset.k8s.io";
/// The name older implementations (and the DNS specification) use for the cluster id.
pub const LEGACY_CLUSTER_ID_PROPERTY: &str = "id.k8s.io";
/// ClusterProperty holding the clusterset's name; present only while a member.
pub const CLUSTERSET_PROPERTY: &str = "clusterset.k8s.io";

/// `ServiceImport.spec.type`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ServiceImportType {
    #[default]
    ClusterSetIP,
    Headless,
}

/// Declares that the Service with the same namespace/name is exported to the clusterset.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceExport {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<ServiceExportSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ServiceExportStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceExportSpec {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub exported_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub exported_annotations: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceExportStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A service reachable across the clusterset, as seen from one cluster.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceImport {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: ServiceImportSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ServiceImportStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceImportSpec {
    #[serde(default)]
    pub ports: Vec<ServicePort>,
    /// The VIPs (ClusterSetIP), in the order of `ip_families`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<String>,
    #[serde(default)]
    pub r#type: ServiceImportType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity_config: Option<SessionAffinityConfig>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_families: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_traffic_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_distribution: Option<String>,
}

/// A port of a ServiceImport: a Service port without `targetPort`/`nodePort`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServicePort {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_protocol: Option<String>,
    pub port: i32,
}

impl ServicePort {
    /// `TCP` when unset, as for Service ports.
    pub fn protocol(&self) -> &str {
        self.protocol.as_deref().unwrap_or("TCP")
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceImportStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterStatus {
    pub cluster: String,
}

/// A cluster-scoped property of a cluster: its id, its clusterset membership.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ClusterProperty {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: ClusterPropertySpec,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterPropertySpec {
    pub value: String,
}

resource!(
    ServiceExport,
    "multicluster.x-k8s.io",
    "v1beta1",
    "ServiceExport",
    "serviceexports",
    k8s_openapi::NamespaceResourceScope
);
resource!(
    ServiceImport,
    "multicluster.x-k8s.io",
    "v1beta1",
    "ServiceImport",
    "serviceimports",
    k8s_openapi::NamespaceResourceScope
);
resource!(
    ClusterProperty,
    "about.k8s.io",
    "v1beta1",
    "ClusterProperty",
    "clusterproperties",
    k8s_openapi::ClusterResourceScope
);

fn condition_list() -> Value {
    json!({
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "required": ["type", "status", "lastTransitionTime", "reason", "message"],
            "properties": {
                "type": {"type": "string", "maxLength": 316},
                "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
                "lastTransitionTime": {"type": "string", "format": "date-time"},
                "reason": {"type": "string", "maxLength": 1024},
                "message": {"type": "string", "maxLength": 32768}
            }
        }
    })
}

fn string_map() -> Value {
    json!({"type": "object", "additionalProperties": {"type": "string"}})
}

fn object_meta() -> Value {
    json!({"type": "object"})
}

fn service_export_schema() -> Value {
    json!({
        "type": "object",
        "description": "ServiceExport declares that the Service with the same name and namespace as this export should be consumable from other clusters.",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": object_meta(),
            "spec": {
                "type": "object",
                "properties": {
                    "exportedLabels": string_map(),
                    "exportedAnnotations": string_map()
                }
            },
            "status": {
                "type": "object",
                "properties": {"conditions": condition_list()}
            }
        }
    })
}

fn service_import_schema() -> Value {
    json!({
        "type": "object",
        "description": "ServiceImport describes a service imported from clusters in a ClusterSet.",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": object_meta(),
            "spec": {
                "type": "object",
                "required": ["ports", "type"],
                "properties": {
                    "ports": {
                        "type": "array",
                        "x-kubernetes-list-type": "atomic",
                        "items": {
                            "type": "object",
                            "required": ["port"],
                            "properties": {
                                "name": {"type": "string"},
                                "protocol": {"type": "string", "enum": ["TCP", "UDP", "SCTP"], "default": "TCP"},
                                "appProtocol": {"type": "string"},
                                "port": {"type": "integer", "format": "int32", "minimum": 1, "maximum": 65535}
                            }
                        }
                    },
                    "ips": {"type": "array", "maxItems": 2, "items": {"type": "string"}},
                    "type": {"type": "string", "enum": ["ClusterSetIP", "Headless"]},
                    "sessionAffinity": {"type": "string", "enum": ["ClientIP", "None"]},
                    "sessionAffinityConfig": {
                        "type": "object",
                        "properties": {
                            "clientIP": {
                                "type": "object",
                                "properties": {"timeoutSeconds": {"type": "integer", "format": "int32"}}
                            }
                        }
                    },
                    "ipFamilies": {
                        "type": "array",
                        "maxItems": 2,
                        "items": {"type": "string", "enum": ["IPv4", "IPv6"]}
                    },
                    "internalTrafficPolicy": {"type": "string", "enum": ["Cluster", "Local"]},
                    "trafficDistribution": {"type": "string"}
                }
            },
            "status": {
                "type": "object",
                "properties": {
                    "clusters": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["cluster"],
                        "items": {
                            "type": "object",
                            "required": ["cluster"],
                            "properties": {"cluster": {"type": "string"}}
                        }
                    },
                    "conditions": condition_list()
                }
            }
        }
    })
}

fn cluster_property_schema() -> Value {
    json!({
        "type": "object",
        "description": "ClusterProperty is a property of this cluster, such as its id (cluster.clusterset.k8s.io) or clusterset membership (clusterset.k8s.io).",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": object_meta(),
            "spec": {
                "type": "object",
                "required": ["value"],
                "properties": {
                    "value": {"type": "string", "minLength": 1, "maxLength": 128000}
                }
            }
        },
        "required": ["spec"]
    })
}

struct CrdNames {
    group: &'static str,
    plural: &'static str,
    kind: &'static str,
    short: &'static [&'static str],
    namespaced: bool,
    versions: &'static [&'static str],
    storage: &'static str,
    status: bool,
}

fn crd(n: CrdNames, schema: Value, columns: Value) -> Value {
    let versions: Vec<Value> = n
        .versions
        .iter()
        .map(|v| {
            let mut version = json!({
                "name": v,
                "served": true,
                "storage": *v == n.storage,
                "schema": {"openAPIV3Schema": schema.clone()},
                "additionalPrinterColumns": columns.clone(),
            });
            if n.status {
                version["subresources"] = json!({"status": {}});
            }
            version
        })
        .collect();
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{}.{}", n.plural, n.group)},
        "spec": {
            "group": n.group,
            "scope": if n.namespaced { "Namespaced" } else { "Cluster" },
            "names": {
                "plural": n.plural,
                "singular": n.kind.to_lowercase(),
                "kind": n.kind,
                "listKind": format!("{}List", n.kind),
                "shortNames": n.short,
            },
            "versions": versions,
        }
    })
}

/// ServiceExport, ServiceImport and ClusterProperty as CustomResourceDefinitions
/// (`apiextensions.k8s.io/v1`), each served as `v1alpha1` and `v1beta1` (storage).
pub fn crds() -> Vec<Value> {
    let age = json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"});
    vec![
        crd(
            CrdNames {
                group: GROUP,
                plural: "serviceexports",
                kind: "ServiceExport",
                short: &["svcex"],
                namespaced: true,
                versions: &["v1alpha1", "v1beta1"],
                storage: VERSION,
                status: true,
            },
            service_export_schema(),
            json!([age]),
        ),
        crd(
            CrdNames {
                group: GROUP,
                plural: "serviceimports",
                kind: "ServiceImport",
                short: &["svcim"],
                namespaced: true,
                versions: &["v1alpha1", "v1beta1"],
                storage: VERSION,
                status: true,
            },
            service_import_schema(),
            json!([
                {"name": "Type", "type": "string", "jsonPath": ".spec.type", "description": "The type of this ServiceImport"},
                {"name": "IP", "type": "string", "jsonPath": ".spec.ips", "description": "The VIP for this ServiceImport"},
                age
            ]),
        ),
        crd(
            CrdNames {
                group: ABOUT_GROUP,
                plural: "clusterproperties",
                kind: "ClusterProperty",
                short: &["clusterproperty"],
                namespaced: false,
                versions: &["v1alpha1", "v1beta1"],
                storage: ABOUT_VERSION,
                status: false,
            },
            cluster_property_schema(),
            json!([
                {"name": "value", "type": "string", "jsonPath": ".spec.value"},
                age
            ]),
        ),
    ]
}

fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

/// Whether an object was written by Sluice's MCS controller
/// (`endpointslice.kubernetes.io/managed-by: sluice-mcs`): only those may be deleted by it.
pub fn is_managed(meta: &ObjectMeta) -> bool {
    label(meta, LABEL_MANAGED_BY) == Some(MANAGED_BY)
}

/// The service an MCS EndpointSlice or a derived Service belongs to (label
/// `multicluster.kubernetes.io/service-name`).
pub fn mcs_service(meta: &ObjectMeta) -> Option<crate::ServiceKey> {
    Some(crate::ServiceKey::new(
        meta.namespace.clone()?,
        label(meta, LABEL_SERVICE_NAME)?,
    ))
}

/// The service an EndpointSlice belongs to: `kubernetes.io/service-name` for a Service's
/// own slices, `multicluster.kubernetes.io/service-name` for MCS ones.
pub fn slice_service(
    s: &k8s_openapi::api::discovery::v1::EndpointSlice,
) -> Option<crate::ServiceKey> {
    if is_managed(&s.metadata) {
        return mcs_service(&s.metadata);
    }
    Some(crate::ServiceKey::new(
        s.metadata.namespace.clone()?,
        label(&s.metadata, LABEL_KUBE_SERVICE_NAME)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_crd_has_one_storage_version() {
        for crd in crds() {
            let versions = crd["spec"]["versions"].as_array().unwrap();
            assert_eq!(versions.iter().filter(|v| v["storage"] == true).count(), 1);
            assert_eq!(versions.len(), 2);
        }
    }

    #[test]
    fn import_round_trips_through_serde() {
        let v = json!({
            "metadata": {"name": "echo", "namespace": "shop"},
            "spec": {"type": "Headless", "ports": [{"name": "http", "port": 8080}]}
        });
        let si: ServiceImport = serde_json::from_value(v).unwrap();
        assert_eq!(si.spec.r#type, ServiceImportType::Headless);
        assert_eq!(si.spec.ports[0].protocol(), "TCP");
    }
}
