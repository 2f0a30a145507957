//! Names several parts share: a Service's key (namespace and name; by MCS namespace
//! sameness also the key of its ServiceExport and ServiceImport in every cluster) and the
//! name of a physical cluster in Sluice's registry.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The name of a `Cluster` object in Sluice's registry. Usually equal to the cluster id, but
/// not always (`spec.clusterId`), and errors are reported on the `Cluster` object.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct ClusterName(String);

impl ClusterName {
    pub fn new(name: impl Into<String>) -> Self {
        Self(name.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ClusterName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Namespace and name of a Service; by namespace sameness also of its ServiceExport and
/// ServiceImport in every cluster.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceKey {
    pub namespace: String,
    pub name: String,
}

impl ServiceKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key of a namespaced object; `None` when its metadata lacks either part.
    pub fn from_meta(meta: &ObjectMeta) -> Option<Self> {
        Some(Self::new(meta.namespace.clone()?, meta.name.clone()?))
    }
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}
