//! The server's shared state, in two parts: what the write path needs (`write_state`),
//! and around it what only the server needs. Handlers read it and write through the
//! pipeline.

mod limits;
pub mod namespaces;
pub mod write_state;

pub use limits::Limits;
pub use write_state::WriteState;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use prometheus_client::registry::Registry;

use crate::auth::Authenticator;
use crate::metrics::ApiMetrics;
use crate::schema::served::OpenApiCache;

/// The API server's shared state: what the object pipeline and its hooks need
/// ([`WriteState`], which this derefs to), and what only the server needs — request
/// fairness, authentication, metrics, audit, the path into clusters — with the hooks.
pub struct ApiState {
    /// What writes read and write with.
    pub write: WriteState,
    /// Tenants' requests' share of the server.
    pub fairness: crate::fairness::Fairness,
    pub openapi: OpenApiCache,
    pub metrics: ApiMetrics,
    pub registry: Registry,
    pub auth: Authenticator,
    pub ready: AtomicBool,
    /// Per-resource admission hooks of the object pipeline.
    pub hooks: crate::pipeline::hooks::Hooks,
    /// Where a local cluster's node agent writes container logs.
    pub pod_logs_dir: Option<std::path::PathBuf>,
    /// A local cluster's node agent streaming socket (`pods/exec`, `attach`, `portforward`).
    pub node_streaming: Option<std::path::PathBuf>,
    /// One JSON line per request, when configured.
    pub audit: Option<crate::audit::AuditLog>,
    /// How the control plane reaches into a cluster, through its syncer (mutual TLS, a
    /// per-cluster identity on both ends).
    pub agents: crate::agent_client::AgentClient,
    /// Connections to admission webhooks kept between calls.
    pub webhook_connections: crate::webhooks::pool::Pool,
}

pub type SharedState = Arc<ApiState>;

impl std::ops::Deref for ApiState {
    type Target = WriteState;
    fn deref(&self) -> &WriteState {
        &self.write
    }
}

impl ApiState {
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
}
