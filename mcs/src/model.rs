//! The controller's view of the clusterset: one snapshot per member cluster, and the keys
//! that name things in it.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sluice_api::mcs::{ServiceExport, ServiceImport};
use sluice_api::sluice::ImportVips;

use crate::names;
pub use sluice_api::names::{ClusterName, ServiceKey};

/// The longest cluster id accepted: the id is written as the value of the
/// `multicluster.kubernetes.io/source-cluster` label, and label values hold at most 63.
pub const MAX_CLUSTER_ID_LEN: usize = 63;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    #[error(
        "cluster id {0:?} is not a DNS-1123 subdomain of at most {MAX_CLUSTER_ID_LEN} characters"
    )]
    InvalidClusterId(String),
}

/// A cluster's MCS id (ClusterProperty `cluster.clusterset.k8s.io`): unique in the
/// clusterset, the value of every `source-cluster` label and `status.clusters` entry.
///
/// Only valid ids can be built, so everything downstream can put one in a label or a DNS
/// name without checking again.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClusterId(String);

impl ClusterId {
    pub fn new(id: impl Into<String>) -> Result<Self, ModelError> {
        let id = id.into();
        if id.len() <= MAX_CLUSTER_ID_LEN && names::is_dns1123_subdomain(&id) {
            Ok(Self(id))
        } else {
            Err(ModelError::InvalidClusterId(id))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for ClusterId {
    type Err = ModelError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl fmt::Display for ClusterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Namespace and name of an MCS EndpointSlice.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SliceKey {
    pub namespace: String,
    pub name: String,
}

impl SliceKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    pub fn from_meta(meta: &ObjectMeta) -> Option<Self> {
        Some(Self::new(meta.namespace.clone()?, meta.name.clone()?))
    }
}

impl fmt::Display for SliceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Which services a reconcile covers. The controller reconciles only the services whose
/// objects changed since the last round, and everything after a membership change, a
/// lease expiry, a namespace change or a re-list; a round's cost then follows the size of
/// the change, not of the clusterset.
pub type Scope = sluice_kube::Scope<ServiceKey>;

/// What the controller currently sees in one member cluster: all of it, or only the
/// services of a [`Scope`] (namespaces are always complete).
#[derive(Clone, Debug)]
pub struct MemberSnapshot {
    /// The `Cluster` object this member comes from; orders members when ids collide.
    pub name: ClusterName,
    pub cluster: ClusterId,
    /// The cluster's index in the clusterset: its VIPs come from `127.(60+index).0.0/16`.
    pub index: u8,
    /// Whether this cluster's ClusterSetIP imports get VIPs from that range or from
    /// derived Services ([`crate::derived`]).
    pub import_vips: ImportVips,
    /// False once the cluster's lease expired: it neither exports nor imports, and its
    /// endpoints disappear everywhere.
    pub alive: bool,
    pub namespaces: BTreeMap<String, Namespace>,
    /// Services by their own key, derived Services (Sluice's, labelled) included.
    pub services: BTreeMap<ServiceKey, Service>,
    pub exports: BTreeMap<ServiceKey, ServiceExport>,
    /// Each Service's own EndpointSlices (label `kubernetes.io/service-name`), not MCS ones.
    pub slices: BTreeMap<ServiceKey, Vec<EndpointSlice>>,
    /// The ServiceImports present now: they keep VIPs stable across controller restarts
    /// and conditions' transition times stable across reconciles.
    pub imports: BTreeMap<ServiceKey, ServiceImport>,
}

impl MemberSnapshot {
    /// An alive member with nothing in it yet.
    pub fn new(name: ClusterName, cluster: ClusterId, index: u8) -> Self {
        Self {
            name,
            cluster,
            index,
            import_vips: ImportVips::Sluice,
            alive: true,
            namespaces: BTreeMap::new(),
            services: BTreeMap::new(),
            exports: BTreeMap::new(),
            slices: BTreeMap::new(),
            imports: BTreeMap::new(),
        }
    }

    /// Whether objects can be created in `namespace`: it exists and is not being deleted
    /// (the API server refuses creates in a terminating namespace).
    pub fn namespace_usable(&self, namespace: &str) -> bool {
        self.namespaces
            .get(namespace)
            .is_some_and(|ns| ns.metadata.deletion_timestamp.is_none())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_ids_must_fit_a_label_value() {
        assert!(ClusterId::new("east").is_ok());
        assert!(ClusterId::new("east.eu-1").is_ok());
        assert!(ClusterId::new("East").is_err());
        assert!(ClusterId::new("").is_err());
        assert!(ClusterId::new("a".repeat(63)).is_ok());
        assert!(ClusterId::new("a".repeat(64)).is_err());
        assert_eq!(
            "west".parse::<ClusterId>().map(|c| c.to_string()),
            Ok("west".to_string())
        );
    }

    #[test]
    fn keys_from_metadata() {
        let meta = ObjectMeta {
            namespace: Some("shop".into()),
            name: Some("echo".into()),
            ..Default::default()
        };
        assert_eq!(
            ServiceKey::from_meta(&meta),
            Some(ServiceKey::new("shop", "echo"))
        );
        assert_eq!(ServiceKey::from_meta(&ObjectMeta::default()), None);
        assert_eq!(ServiceKey::new("shop", "echo").to_string(), "shop/echo");
    }

    #[test]
    fn scopes_widen() {
        let mut s = Scope::default();
        assert!(s.is_empty());
        s.insert(ServiceKey::new("shop", "a"));
        assert!(s.contains(&ServiceKey::new("shop", "a")));
        assert!(!s.contains(&ServiceKey::new("shop", "b")));
        s.extend(Scope::Keys([ServiceKey::new("shop", "b")].into()));
        assert_eq!(s.len(), Some(2));
        s.extend(Scope::All);
        assert!(s.is_all() && s.contains(&ServiceKey::new("x", "y")));
        s.insert(ServiceKey::new("shop", "c"));
        assert_eq!(s, Scope::All);
    }
}
