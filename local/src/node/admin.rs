//! The node agent's admin endpoint: `/metrics` (Prometheus) and `/readyz`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeLabels {
    pub probe: &'static str,
}

/// What the node agent counts.
#[derive(Debug, Default)]
pub struct NodeMetrics {
    pub pods: Gauge,
    pub container_starts: Counter,
    pub container_restarts: Counter,
    pub start_failures: Counter,
    pub probe_failures: Family<ProbeLabels, Counter>,
    pub ready: AtomicBool,
    /// The built-in controllers' reconciles (`sluice_node_controllers_reconciles_total`).
    pub controllers: sluice_kube::controller::ControllerMetrics,
    /// The volume reclaimer's reconciles (`sluice_node_reclaimer_reconciles_total`).
    pub reclaimer: sluice_kube::controller::ControllerMetrics,
}

impl NodeMetrics {
    fn registry(&self) -> Registry {
        let mut r = Registry::with_prefix("sluice_node");
        r.register("pods", "Pods running on this node", self.pods.clone());
        r.register(
            "container_starts",
            "Container processes started",
            self.container_starts.clone(),
        );
        r.register(
            "container_restarts",
            "Container restarts by restart policy",
            self.container_restarts.clone(),
        );
        r.register(
            "container_start_failures",
            "Containers that could not be started",
            self.start_failures.clone(),
        );
        r.register(
            "probe_failures",
            "Failed probe attempts by probe",
            self.probe_failures.clone(),
        );
        self.controllers
            .register(r.sub_registry_with_prefix("controllers"));
        self.reclaimer
            .register(r.sub_registry_with_prefix("reclaimer"));
        r
    }
}

/// What the node agent's admin endpoint shows.
struct NodeAdmin {
    registry: Registry,
    metrics: Arc<NodeMetrics>,
}

impl sluice_observe::AdminSource for NodeAdmin {
    fn registry(&self) -> &Registry {
        &self.registry
    }

    fn ready(&self) -> bool {
        self.metrics.ready.load(Ordering::Acquire)
    }
}

/// Serve `/metrics` and `/readyz` on `addr` until `shutdown` flips.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<NodeMetrics>,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<SocketAddr> {
    let admin = NodeAdmin {
        registry: metrics.registry(),
        metrics,
    };
    sluice_observe::serve(addr, Arc::new(admin), shutdown).await
}
