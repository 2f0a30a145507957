//! What the object pipeline and its admission hooks work with: the store, the catalogs
//! and schemas, request limits, RBAC policy, the allocators of derived names and
//! addresses, and the garbage collector's inbox. Hooks see only this, not the server.

use std::sync::Arc;

use sluice_api::LogicalClusterPath;

use crate::catalog::Catalog;
use crate::crd::registry::CrdRegistry;
use crate::errors::{ApiError, ApiResult, GroupResource};
use crate::request::ClusterScope;
use crate::schema::SchemaSet;
use crate::storage::{ResourcePrefix, Store};

use super::limits::Limits;

/// The state of the write path.
pub struct WriteState {
    pub store: Store,
    /// Per-logical-cluster catalogs (built-ins plus that cluster's CRDs).
    pub crds: CrdRegistry,
    pub schemas: &'static SchemaSet,
    pub limits: Limits,
    /// Work for the garbage collector.
    pub gc: crate::controllers::gc_queue::GcQueue,
    /// Service ClusterIP allocation (single-cluster mode only).
    pub ips: Option<Arc<crate::single_cluster::IpAllocator>>,
    /// RBAC: every logical cluster's policy.
    pub rbac: crate::rbac::Authorizer,
    /// The installation's key for downstream namespace names.
    pub downstream_names: crate::downstream_names::DownstreamNames,
    /// Namespaces parsed once per revision, for the writes in them.
    pub parsed_namespaces: super::namespaces::ParsedNamespaces,
}

fn workspaces() -> &'static ResourcePrefix {
    static P: std::sync::OnceLock<ResourcePrefix> = std::sync::OnceLock::new();
    P.get_or_init(|| ResourcePrefix::new(sluice_api::sluice::GROUP, "workspaces"))
}

impl WriteState {
    /// The logical-cluster annotation stamped on `cluster`'s objects; none in single-cluster
    /// mode (a physical cluster's API server adds nothing kube-apiserver does not).
    pub fn annotation_for<'a>(
        &self,
        cluster: &'a LogicalClusterPath,
    ) -> Option<&'a LogicalClusterPath> {
        self.ips.is_none().then_some(cluster)
    }

    /// The types served to a request: a cluster's catalog; for a wildcard, the built-ins
    /// and every custom type some logical cluster defines.
    pub fn catalog_for(&self, scope: &ClusterScope) -> Arc<Catalog> {
        match scope {
            ClusterScope::One(c) => self.crds.catalog(c),
            ClusterScope::Wildcard => self.crds.wildcard(),
        }
    }

    /// Namespace `namespace` of `cluster` as stored now, parsed.
    pub fn namespace(
        &self,
        cluster: &LogicalClusterPath,
        namespace: &str,
    ) -> Option<Arc<serde_json::Value>> {
        self.parsed_namespaces.get(&self.store, cluster, namespace)
    }

    /// A logical cluster exists when it is `root` or a live Workspace names it in its parent.
    pub fn cluster_exists(&self, cluster: &LogicalClusterPath) -> ApiResult<()> {
        let mut current = cluster.clone();
        while let Some((parent, name)) = current.parent() {
            let key = workspaces().key(&parent, None, name);
            if self.store.get(&key).is_none() {
                return Err(ApiError::NotFound {
                    gr: GroupResource {
                        group: sluice_api::sluice::GROUP.into(),
                        resource: "logicalclusters".into(),
                    },
                    name: cluster.to_string(),
                });
            }
            current = parent;
        }
        Ok(())
    }
}
