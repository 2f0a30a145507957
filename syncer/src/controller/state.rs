//! What every part of the syncer shares: its configuration, the control plane it reads
//! and reports to, and its state apart from the loop (metrics, readiness, the refusals it
//! reported, the namespace map).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use sluice_api::{ClusterName, LogicalClusterPath};
use sluice_kube::Roots;
use sluice_kube::controller::ControllerMetrics;

use crate::metrics::SyncMetrics;
use crate::sources::Sources;

/// What a syncer syncs: from the control plane (its configuration, with any URL of the
/// server: the syncer reads through `/clusters/*` and reports status to each logical
/// cluster) to one physical cluster.
pub struct Config {
    pub upstream: kube::Config,
    pub downstream: kube::Client,
    pub cluster: ClusterName,
    /// The URL of this syncer's log endpoint ([`crate::logs`]), published on its heartbeat
    /// Lease; `None`: `kubectl logs` upstream cannot reach this cluster's pods.
    pub logs_url: Option<String>,
    /// The image the claim movers run: the local clusters' built-in `sluice/mover`, or the
    /// `sluice` image (whose entrypoint is the binary: the movers' args then start with
    /// `mover`).
    pub mover_image: String,
}

/// Why the syncer stopped before it was told to.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("the stop signal's sender is gone")]
    Orphaned,
    #[error("the control plane's client: {0}")]
    Client(#[from] sluice_kube::ClientError),
}

/// The control plane: every logical cluster through the wildcard, and each one to write to.
pub struct Upstream {
    roots: Roots,
    pub wildcard: kube::Client,
}

impl Upstream {
    pub fn new(config: kube::Config) -> Result<Self, SyncError> {
        let roots = Roots::new(config, "/clusters/");
        let wildcard = roots.at("/clusters/*")?;
        Ok(Self { roots, wildcard })
    }

    /// A client of logical cluster `path`.
    pub fn at(&self, path: &LogicalClusterPath) -> Result<kube::Client, SyncError> {
        Ok(self.roots.at(&format!("/clusters/{path}"))?)
    }
}

/// A refused object: kind, downstream namespace, name.
pub type Refusal = (&'static str, String, String);

/// A syncer's state apart from its loop: metrics and readiness, for the admin endpoint.
pub struct Syncer {
    pub metrics: SyncMetrics,
    /// The reconciles of its controller (`sluice_syncer_reconciles_total{outcome}`, ...).
    pub controller: ControllerMetrics,
    registry: prometheus_client::registry::Registry,
    /// Every informer listed and every namespace reconciled once since.
    ready: AtomicBool,
    /// Objects the cluster refused, with what it said (reported once per message).
    refusals: Mutex<BTreeMap<Refusal, String>>,
    /// Which upstream namespace each downstream namespace holds.
    pub sources: Sources,
}

impl sluice_observe::AdminSource for Syncer {
    fn registry(&self) -> &prometheus_client::registry::Registry {
        &self.registry
    }

    fn ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
}

impl Syncer {
    pub fn new() -> Arc<Self> {
        let metrics = SyncMetrics::default();
        let controller = ControllerMetrics::default();
        let mut registry = prometheus_client::registry::Registry::with_prefix("sluice_syncer");
        metrics.register(&mut registry);
        controller.register(&mut registry);
        let sources = Sources::new(metrics.namespace_conflicts.clone());
        Arc::new(Self {
            sources,
            metrics,
            controller,
            registry,
            ready: AtomicBool::new(false),
            refusals: Default::default(),
        })
    }

    pub fn refusals(&self) -> MutexGuard<'_, BTreeMap<Refusal, String>> {
        self.refusals.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }
}

/// The syncer's two sides and its counts: what every reconcile reads config from and
/// writes through.
pub struct Sides {
    pub syncer: Arc<Syncer>,
    pub config: Config,
    pub upstream: Upstream,
}
