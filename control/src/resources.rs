//! The catalog of served resource types: names for discovery, scope, subresources, and
//! the typed schema each one is validated against.

use std::sync::Arc;

use k8s_openapi::api::{apps::v1 as apps, coordination::v1 as coordination, core::v1 as core};
use k8s_openapi::api::{authentication::v1 as authentication, authorization::v1 as authorization};
use k8s_openapi::api::{autoscaling::v2 as autoscaling, batch::v1 as batch};
use k8s_openapi::api::{discovery::v1 as discovery, networking::v1 as networking};
use k8s_openapi::api::{
    policy::v1 as policy, rbac::v1 as rbac, scheduling::v1 as scheduling, storage::v1 as storage,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::conversion::Conversion;
use crate::errors::GroupResource;
use crate::jsonpath::JsonPath;
use crate::storage::ResourcePrefix;

/// A column of `kubectl get` for a custom resource.
#[derive(Clone, Debug)]
pub struct PrinterColumn {
    pub name: String,
    pub ty: String,
    pub priority: u8,
    pub path: JsonPath,
}

/// Where a custom resource keeps what its `scale` subresource shows.
#[derive(Clone, Debug)]
pub struct ScalePaths {
    pub spec_replicas: JsonPath,
    pub spec_replicas_field: Vec<String>,
    pub status_replicas: JsonPath,
    pub label_selector: Option<JsonPath>,
}

/// What a custom type needs beyond its names.
#[derive(Debug)]
pub struct CustomVersion {
    /// `openAPIV3Schema`; `None` accepts anything.
    pub schema: Option<Value>,
    pub printer_columns: Vec<PrinterColumn>,
    pub scale: Option<ScalePaths>,
    /// The version objects are stored in (conversion strategy `None`: only apiVersion changes).
    pub storage_version: String,
    /// The CRD's conversion webhook (strategy `Webhook`): objects change version through it.
    pub webhook: Option<Arc<crate::crd::conversion::ConversionWebhook>>,
    /// Its definition is labelled syncable: its objects travel with their namespace.
    pub syncable: bool,
}

/// Subresources a type serves besides the object itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subresource {
    Status,
    Scale,
    /// `serviceaccounts/token`: TokenRequest.
    Token,
    /// `pods/ephemeralcontainers`: the only way to add a debugging container to a Pod
    /// (`kubectl debug`).
    EphemeralContainers,
}

impl Subresource {
    pub fn name(self) -> &'static str {
        match self {
            Subresource::Status => "status",
            Subresource::Scale => "scale",
            Subresource::Token => "token",
            Subresource::EphemeralContainers => "ephemeralcontainers",
        }
    }

    /// The verbs discovery lists for it.
    pub fn verbs(self) -> &'static [&'static str] {
        match self {
            Subresource::Status | Subresource::Scale | Subresource::EphemeralContainers => {
                &["get", "patch", "update"]
            }
            Subresource::Token => &["create"],
        }
    }

    /// The `(group, version, kind)` it answers with, when not the type's own.
    pub fn response_kind(self) -> Option<(&'static str, &'static str, &'static str)> {
        match self {
            Subresource::Status | Subresource::EphemeralContainers => None,
            Subresource::Scale => Some(("autoscaling", "v1", "Scale")),
            Subresource::Token => Some(("authentication.k8s.io", "v1", "TokenRequest")),
        }
    }
}

/// The verbs of an ordinary stored type.
pub const CRUD_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The verbs of a type that is read, never written: the resource metrics, measured on each
/// read.
pub const READ_ONLY: &[&str] = &["get", "list"];

/// The verbs of a type that is only ever created and answered, never stored (the access
/// reviews).
pub const CREATE_ONLY: &[&str] = &["create"];

/// Where a type's schema comes from.
pub enum SchemaKind {
    /// A Rust type (k8s-openapi or sluice-api).
    Builtin {
        /// Adds this type's schema (and everything it references) to a generator.
        generate: fn(&mut SchemaGenerator) -> Schema,
        /// Typed decode: catches wrong value types (a string where an integer belongs).
        decode: fn(&Value) -> Result<(), String>,
    },
    /// A CustomResourceDefinition version.
    Custom(Arc<CustomVersion>),
}

/// One served resource type.
pub struct ResourceType {
    pub group: String,
    pub version: String,
    /// Plural, lower case: the URL segment.
    pub resource: String,
    pub kind: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub subresources: Vec<Subresource>,
    /// The OpenAPI definition name, e.g. `io.k8s.api.apps.v1.Deployment`.
    pub definition: String,
    pub schema: SchemaKind,
    pub prefix: ResourcePrefix,
    pub gr: GroupResource,
    /// What discovery says it serves: [`CRUD_VERBS`], or [`CREATE_ONLY`] for a review.
    pub verbs: &'static [&'static str],
    /// A built-in served in this version but stored in another: how the two convert.
    pub conversion: Option<&'static Conversion>,
}

impl ResourceType {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The apiVersion objects of this type are stored with.
    pub fn storage_api_version(&self) -> String {
        match self.custom() {
            Some(c) if c.storage_version != self.version => {
                format!("{}/{}", self.group, c.storage_version)
            }
            _ => self.api_version(),
        }
    }

    /// The webhook that converts objects of this (custom) type between the version they
    /// are stored in and this one; `None` when stored as served or converted by apiVersion.
    pub fn conversion_webhook(&self) -> Option<&Arc<crate::crd::conversion::ConversionWebhook>> {
        self.custom()
            .filter(|c| c.storage_version != self.version)
            .and_then(|c| c.webhook.as_ref())
    }

    pub fn custom(&self) -> Option<&CustomVersion> {
        match &self.schema {
            SchemaKind::Custom(c) => Some(c),
            SchemaKind::Builtin { .. } => None,
        }
    }

    pub fn has(&self, sub: Subresource) -> bool {
        self.subresources.contains(&sub)
    }

    /// The URL path of the group version: `api/v1` or `apis/apps/v1`.
    pub fn gv_path(&self) -> String {
        gv_path(&self.group, &self.version)
    }
}

pub fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

fn schema_of<T: JsonSchema>(g: &mut SchemaGenerator) -> Schema {
    g.subschema_for::<T>()
}

fn decode_as<T: DeserializeOwned>(v: &Value) -> Result<(), String> {
    T::deserialize(v).map(|_| ()).map_err(|e| e.to_string())
}

#[allow(clippy::too_many_arguments)]
fn rt<T: JsonSchema + DeserializeOwned>(
    group: &'static str,
    version: &'static str,
    resource: &'static str,
    kind: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    subresources: &'static [Subresource],
) -> ResourceType {
    ResourceType {
        group: group.to_string(),
        version: version.to_string(),
        resource: resource.to_string(),
        kind: kind.to_string(),
        singular: kind.to_lowercase(),
        namespaced,
        short_names: short_names.iter().map(|s| s.to_string()).collect(),
        categories: categories.iter().map(|s| s.to_string()).collect(),
        subresources: subresources.to_vec(),
        definition: T::schema_name().into_owned(),
        schema: SchemaKind::Builtin {
            generate: schema_of::<T>,
            decode: decode_as::<T>,
        },
        prefix: ResourcePrefix::new(group, resource),
        gr: GroupResource {
            group: group.to_string(),
            resource: resource.to_string(),
        },
        verbs: CRUD_VERBS,
        conversion: None,
    }
}

/// A built-in served as `group`/`version` and stored as `conversion` says: it shares the
/// stored type's keys (its objects are the same objects).
#[allow(clippy::too_many_arguments)]
fn converted<T: JsonSchema + DeserializeOwned>(
    group: &'static str,
    version: &'static str,
    resource: &'static str,
    kind: &'static str,
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    subresources: &'static [Subresource],
    conversion: &'static Conversion,
) -> ResourceType {
    ResourceType {
        prefix: ResourcePrefix::new(conversion.storage_group, resource),
        conversion: Some(conversion),
        ..rt::<T>(
            group,
            version,
            resource,
            kind,
            true,
            short_names,
            categories,
            subresources,
        )
    }
}

/// A type that is created and answered at once, never stored.
fn review<T: JsonSchema + DeserializeOwned>(
    group: &'static str,
    resource: &'static str,
    kind: &'static str,
    namespaced: bool,
) -> ResourceType {
    ResourceType {
        verbs: CREATE_ONLY,
        ..rt::<T>(group, "v1", resource, kind, namespaced, &[], &[], &[])
    }
}

/// A type that is measured on each read, never stored.
fn measured<T: JsonSchema + DeserializeOwned>(
    group: &'static str,
    version: &'static str,
    resource: &'static str,
    kind: &'static str,
) -> ResourceType {
    ResourceType {
        verbs: READ_ONLY,
        ..rt::<T>(group, version, resource, kind, true, &[], &[], &[])
    }
}

impl ResourceType {
    /// Whether objects of this type are answered rather than stored.
    pub fn is_review(&self) -> bool {
        self.verbs == CREATE_ONLY
    }
}

const RBAC: &str = crate::rbac::policy::GROUP;
const AUTHORIZATION: &str = "authorization.k8s.io";
const AUTHENTICATION: &str = "authentication.k8s.io";
const STATUS: &[Subresource] = &[Subresource::Status];
const STATUS_SCALE: &[Subresource] = &[Subresource::Status, Subresource::Scale];
const ALL: &[&str] = &["all"];

pub(crate) fn builtins() -> Vec<ResourceType> {
    use sluice_api::sluice as s;
    vec![
        rt::<core::Namespace>(
            "",
            "v1",
            "namespaces",
            "Namespace",
            false,
            &["ns"],
            &[],
            STATUS,
        ),
        rt::<core::Pod>(
            "",
            "v1",
            "pods",
            "Pod",
            true,
            &["po"],
            ALL,
            &[Subresource::Status, Subresource::EphemeralContainers],
        ),
        rt::<core::Service>("", "v1", "services", "Service", true, &["svc"], ALL, STATUS),
        rt::<core::Endpoints>("", "v1", "endpoints", "Endpoints", true, &["ep"], &[], &[]),
        rt::<core::ConfigMap>("", "v1", "configmaps", "ConfigMap", true, &["cm"], &[], &[]),
        rt::<core::Secret>("", "v1", "secrets", "Secret", true, &[], &[], &[]),
        rt::<core::ServiceAccount>(
            "",
            "v1",
            "serviceaccounts",
            "ServiceAccount",
            true,
            &["sa"],
            &[],
            &[Subresource::Token],
        ),
        rt::<rbac::Role>(RBAC, "v1", "roles", "Role", true, &[], &[], &[]),
        rt::<rbac::RoleBinding>(
            RBAC,
            "v1",
            "rolebindings",
            "RoleBinding",
            true,
            &[],
            &[],
            &[],
        ),
        rt::<rbac::ClusterRole>(
            RBAC,
            "v1",
            "clusterroles",
            "ClusterRole",
            false,
            &[],
            &[],
            &[],
        ),
        rt::<rbac::ClusterRoleBinding>(
            RBAC,
            "v1",
            "clusterrolebindings",
            "ClusterRoleBinding",
            false,
            &[],
            &[],
            &[],
        ),
        review::<authorization::SelfSubjectAccessReview>(
            AUTHORIZATION,
            "selfsubjectaccessreviews",
            "SelfSubjectAccessReview",
            false,
        ),
        review::<authorization::SelfSubjectRulesReview>(
            AUTHORIZATION,
            "selfsubjectrulesreviews",
            "SelfSubjectRulesReview",
            false,
        ),
        review::<authorization::SubjectAccessReview>(
            AUTHORIZATION,
            "subjectaccessreviews",
            "SubjectAccessReview",
            false,
        ),
        review::<authorization::LocalSubjectAccessReview>(
            AUTHORIZATION,
            "localsubjectaccessreviews",
            "LocalSubjectAccessReview",
            true,
        ),
        review::<authentication::SelfSubjectReview>(
            AUTHENTICATION,
            "selfsubjectreviews",
            "SelfSubjectReview",
            false,
        ),
        rt::<core::Event>("", "v1", "events", "Event", true, &["ev"], &[], &[]),
        rt::<core::Node>("", "v1", "nodes", "Node", false, &["no"], &[], STATUS),
        rt::<core::PersistentVolumeClaim>(
            "",
            "v1",
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            true,
            &["pvc"],
            &[],
            STATUS,
        ),
        rt::<apps::Deployment>(
            "apps",
            "v1",
            "deployments",
            "Deployment",
            true,
            &["deploy"],
            ALL,
            STATUS_SCALE,
        ),
        rt::<apps::ReplicaSet>(
            "apps",
            "v1",
            "replicasets",
            "ReplicaSet",
            true,
            &["rs"],
            ALL,
            STATUS_SCALE,
        ),
        rt::<apps::StatefulSet>(
            "apps",
            "v1",
            "statefulsets",
            "StatefulSet",
            true,
            &["sts"],
            ALL,
            STATUS_SCALE,
        ),
        rt::<apps::DaemonSet>(
            "apps",
            "v1",
            "daemonsets",
            "DaemonSet",
            true,
            &["ds"],
            ALL,
            STATUS,
        ),
        rt::<discovery::EndpointSlice>(
            "discovery.k8s.io",
            "v1",
            "endpointslices",
            "EndpointSlice",
            true,
            &[],
            &[],
            &[],
        ),
        rt::<networking::Ingress>(
            "networking.k8s.io",
            "v1",
            "ingresses",
            "Ingress",
            true,
            &["ing"],
            &[],
            STATUS,
        ),
        rt::<coordination::Lease>(
            "coordination.k8s.io",
            "v1",
            "leases",
            "Lease",
            true,
            &[],
            &[],
            &[],
        ),
        rt::<core::ReplicationController>(
            "",
            "v1",
            "replicationcontrollers",
            "ReplicationController",
            true,
            &["rc"],
            ALL,
            STATUS_SCALE,
        ),
        rt::<core::PodTemplate>("", "v1", "podtemplates", "PodTemplate", true, &[], &[], &[]),
        rt::<core::PersistentVolume>(
            "",
            "v1",
            "persistentvolumes",
            "PersistentVolume",
            false,
            &["pv"],
            &[],
            STATUS,
        ),
        rt::<core::LimitRange>(
            "",
            "v1",
            "limitranges",
            "LimitRange",
            true,
            &["limits"],
            &[],
            &[],
        ),
        rt::<core::ResourceQuota>(
            "",
            "v1",
            "resourcequotas",
            "ResourceQuota",
            true,
            &["quota"],
            &[],
            STATUS,
        ),
        rt::<batch::Job>("batch", "v1", "jobs", "Job", true, &[], ALL, STATUS),
        rt::<batch::CronJob>(
            "batch",
            "v1",
            "cronjobs",
            "CronJob",
            true,
            &["cj"],
            ALL,
            STATUS,
        ),
        rt::<autoscaling::HorizontalPodAutoscaler>(
            "autoscaling",
            "v2",
            "horizontalpodautoscalers",
            "HorizontalPodAutoscaler",
            true,
            &["hpa"],
            ALL,
            STATUS,
        ),
        converted::<k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler>(
            "autoscaling",
            "v1",
            "horizontalpodautoscalers",
            "HorizontalPodAutoscaler",
            &["hpa"],
            ALL,
            STATUS,
            &crate::conversion::hpa::HPA_V1,
        ),
        converted::<k8s_openapi::api::events::v1::Event>(
            "events.k8s.io",
            "v1",
            "events",
            "Event",
            &["ev"],
            &[],
            &[],
            &crate::conversion::events::EVENTS_V1,
        ),
        rt::<k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService>(
            "apiregistration.k8s.io",
            "v1",
            "apiservices",
            "APIService",
            false,
            &[],
            &["api-extensions"],
            STATUS,
        ),
        rt::<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration>(
            "admissionregistration.k8s.io",
            "v1",
            "validatingwebhookconfigurations",
            "ValidatingWebhookConfiguration",
            false,
            &[],
            &["api-extensions"],
            &[],
        ),
        rt::<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy>(
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicies",
            "ValidatingAdmissionPolicy",
            false,
            &[],
            &["api-extensions"],
            STATUS,
        ),
        rt::<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding>(
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicybindings",
            "ValidatingAdmissionPolicyBinding",
            false,
            &[],
            &["api-extensions"],
            &[],
        ),
        rt::<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration>(
            "admissionregistration.k8s.io",
            "v1",
            "mutatingwebhookconfigurations",
            "MutatingWebhookConfiguration",
            false,
            &[],
            &["api-extensions"],
            &[],
        ),
        rt::<policy::PodDisruptionBudget>(
            "policy",
            "v1",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            true,
            &["pdb"],
            &[],
            STATUS,
        ),
        rt::<networking::NetworkPolicy>(
            "networking.k8s.io",
            "v1",
            "networkpolicies",
            "NetworkPolicy",
            true,
            &["netpol"],
            &[],
            &[],
        ),
        rt::<networking::IngressClass>(
            "networking.k8s.io",
            "v1",
            "ingressclasses",
            "IngressClass",
            false,
            &[],
            &[],
            &[],
        ),
        rt::<storage::StorageClass>(
            "storage.k8s.io",
            "v1",
            "storageclasses",
            "StorageClass",
            false,
            &["sc"],
            &[],
            &[],
        ),
        rt::<scheduling::PriorityClass>(
            "scheduling.k8s.io",
            "v1",
            "priorityclasses",
            "PriorityClass",
            false,
            &["pc"],
            &[],
            &[],
        ),
        rt::<apiextensions::CustomResourceDefinition>(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
            &["crd", "crds"],
            &[],
            STATUS,
        ),
        measured::<sluice_api::metrics::PodMetrics>(
            sluice_api::metrics::GROUP,
            sluice_api::metrics::VERSION,
            "pods",
            "PodMetrics",
        ),
        rt::<s::Workspace>(
            s::GROUP,
            s::VERSION,
            "workspaces",
            "Workspace",
            false,
            &["ws"],
            &[],
            STATUS,
        ),
        rt::<s::Cluster>(
            s::GROUP,
            s::VERSION,
            "clusters",
            "Cluster",
            false,
            &[],
            &[],
            STATUS,
        ),
        rt::<s::Placement>(
            s::GROUP,
            s::VERSION,
            "placements",
            "Placement",
            false,
            &[],
            &[],
            STATUS,
        ),
    ]
}
