//! The server's shared state. Handlers only read it (and write through the store).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use prometheus_client::registry::Registry;
use sluice_api::LogicalClusterPath;

use crate::auth::Authenticator;
use crate::crd::registry::CrdRegistry;
use crate::errors::{ApiError, ApiResult, GroupResource};
use crate::metrics::ApiMetrics;
use crate::request::ClusterScope;
use crate::catalog::Catalog;
use crate::schema::SchemaSet;
use crate::schema::served::OpenApiCache;
use crate::storage::{ResourcePrefix, Store};

/// Request limits.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest accepted request body (kube-apiserver: 3 MiB).
    pub max_body: usize,
    /// Longest watch when the client does not ask for less.
    pub max_watch_seconds: u64,
    /// Interval of watch bookmarks.
    pub bookmark_seconds: u64,
    /// Shortest ServiceAccount token a TokenRequest may ask for (kube-apiserver: 10 min).
    pub min_token_seconds: i64,
    /// Longest one; longer requests are shortened, with a warning.
    pub max_token_seconds: i64,
    /// How long a client may take to send a request's head, and to send anything at all
    /// on a new connection (kube-apiserver's `ReadHeaderTimeout`: 32 s); an idle HTTP/1.1
    /// connection is closed after it too.
    pub header_read_timeout: std::time::Duration,
    /// Most connections served at once; more wait in the listen queue.
    pub max_connections: usize,
    /// Most requests one HTTP/2 connection may have open at once (kube-apiserver: 250).
    pub max_streams_per_connection: u32,
    /// How tenants' requests share the server.
    pub fairness: crate::fairness::FairnessLimits,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body: 3 * 1024 * 1024,
            max_watch_seconds: 1800,
            bookmark_seconds: 10,
            min_token_seconds: 600,
            max_token_seconds: 48 * 3600,
            header_read_timeout: std::time::Duration::from_secs(32),
            max_connections: 4096,
            max_streams_per_connection: 250,
            fairness: Default::default(),
        }
    }
}

pub struct ApiState {
    pub store: Store,
    /// Tenants' requests' share of the server.
    pub fairness: crate::fairness::Fairness,
    /// Per-logical-cluster catalogs (built-ins plus that cluster's CRDs).
    pub crds: CrdRegistry,
    pub schemas: &'static SchemaSet,
    pub openapi: OpenApiCache,
    pub metrics: ApiMetrics,
    pub registry: Registry,
    pub auth: Authenticator,
    pub limits: Limits,
    pub ready: AtomicBool,
    /// Work for the garbage collector.
    pub gc: crate::controllers::gc::GcQueue,
    /// Per-resource admission hooks of the object pipeline.
    pub hooks: crate::pipeline::hooks::Hooks,
    /// Service ClusterIP allocation (single-cluster mode only).
    pub ips: Option<Arc<crate::single_cluster::IpAllocator>>,
    /// Where a local cluster's node agent writes container logs.
    pub pod_logs_dir: Option<std::path::PathBuf>,
    /// One JSON line per request, when configured.
    pub audit: Option<crate::audit::AuditLog>,
    /// How the control plane reaches into a cluster, through its syncer (mutual TLS, a
    /// per-cluster identity on both ends).
    pub agents: crate::agent_client::AgentClient,
    /// RBAC: every logical cluster's policy.
    pub rbac: crate::rbac::Authorizer,
    /// The installation's key for downstream namespace names.
    pub downstream_names: crate::downstream_names::DownstreamNames,
}

pub type SharedState = Arc<ApiState>;

fn workspaces() -> &'static ResourcePrefix {
    static P: std::sync::OnceLock<ResourcePrefix> = std::sync::OnceLock::new();
    P.get_or_init(|| ResourcePrefix::new(sluice_api::sluice::GROUP, "workspaces"))
}

impl ApiState {
    /// The logical-cluster annotation stamped on `cluster`'s objects; none in single-cluster
    /// mode (a physical cluster's API server adds nothing kube-apiserver does not).
    pub fn annotation_for<'a>(
        &self,
        cluster: &'a sluice_api::LogicalClusterPath,
    ) -> Option<&'a sluice_api::LogicalClusterPath> {
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

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
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
