//! One endpoint of a service: its weight and draining state, in-flight count, latency
//! estimate and outlier history, and what a protocol layer attaches to it.

use std::any::Any;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use super::outcomes::Outcomes;
use super::{ewma, outlier};
use crate::config::EndpointConfig;
use crate::metrics::EndpointMetrics;
use crate::tunnel::Peer;

/// Latency assumed for an endpoint that has not answered yet.
const INITIAL_RTT: Duration = Duration::from_millis(1);

#[derive(Debug)]
struct Health {
    ewma: ewma::PeakEwma,
    outlier: outlier::Outlier,
}

/// One endpoint of a service.
#[derive(Debug)]
pub struct Endpoint {
    pub address: SocketAddr,
    pub cluster: String,
    weight: AtomicU32,
    draining: AtomicBool,
    removed: AtomicBool,
    /// In-flight requests (L7) or open connections (L4).
    active: AtomicU64,
    health: Mutex<Health>,
    pub metrics: EndpointMetrics,
    /// Attempts, errors and latencies, for a move's health check.
    pub outcomes: Outcomes,
    /// State a protocol layer keeps for this endpoint (the HTTP layer's connection
    /// pools), opaque here: dropped when the endpoint drains, so that idle connections
    /// close while in-flight requests finish on theirs.
    attached: RwLock<Option<Arc<dyn Any + Send + Sync>>>,
    /// The peer cluster whose gateway leads to this endpoint; `None`: reached directly.
    pub via: Option<Arc<Peer>>,
    /// In this cluster (the configuration names no gateway): what `PreferClose` prefers.
    pub local: bool,
}

impl Endpoint {
    pub(super) fn new(
        c: &EndpointConfig,
        via: Option<Arc<Peer>>,
        metrics: EndpointMetrics,
    ) -> Self {
        Self {
            address: c.address,
            local: c.via.is_none(),
            via,
            cluster: c.cluster.clone(),
            weight: AtomicU32::new(c.weight),
            draining: AtomicBool::new(c.draining),
            removed: AtomicBool::new(false),
            active: AtomicU64::new(0),
            health: Mutex::new(Health {
                ewma: ewma::PeakEwma::new(INITIAL_RTT),
                outlier: outlier::Outlier::default(),
            }),
            metrics,
            outcomes: Outcomes::default(),
            attached: RwLock::new(None),
        }
    }

    pub fn weight(&self) -> u32 {
        self.weight.load(Ordering::Relaxed)
    }

    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed) || self.removed.load(Ordering::Relaxed)
    }

    pub fn active(&self) -> u64 {
        self.active.load(Ordering::Relaxed)
    }

    /// Load: latency estimate × (in-flight + 1). Weights act in the draw (p2c), not
    /// here, or they would count twice.
    pub fn load(&self) -> f64 {
        let ewma = self
            .health
            .lock()
            .map(|h| h.ewma.estimate_ns())
            .unwrap_or(f64::MAX);
        ewma * (self.active() as f64 + 1.0)
    }

    /// Ejected by outlier detection, or behind a gateway that does not answer.
    pub(super) fn ejected(&self, now: Instant) -> bool {
        if self.via.as_ref().is_some_and(|p| !p.is_up()) {
            return true;
        }
        self.health
            .lock()
            .map(|h| h.outlier.ejected(now))
            .unwrap_or(false)
    }

    /// Count one request or connection as in flight until the guard drops.
    pub fn start(self: &Arc<Self>) -> ActiveGuard {
        self.active.fetch_add(1, Ordering::Relaxed);
        self.metrics.active.inc();
        self.metrics.requests.inc();
        ActiveGuard(self.clone())
    }

    pub fn success(&self, rtt: Duration) {
        self.metrics.latency.observe(rtt.as_secs_f64());
        self.outcomes.answered(rtt);
        if let Ok(mut h) = self.health.lock() {
            h.ewma.observe(rtt);
            h.outlier.success();
            h.outlier.recovered(Instant::now());
        }
    }

    /// A failed attempt; ejects the endpoint after enough of them in a row.
    pub fn failure(&self, rtt: Duration) {
        self.outcomes.failed();
        if let Ok(mut h) = self.health.lock() {
            // A failure is slow for balancing purposes, however fast it came.
            h.ewma.observe(rtt.max(Duration::from_millis(100)));
            if h.outlier.failure(Instant::now()) {
                self.metrics.ejections.inc();
                tracing::info!(endpoint = %self.address, "ejected after consecutive failures");
            }
        }
    }

    pub(super) fn apply(&self, c: &EndpointConfig) {
        self.weight.store(c.weight, Ordering::Relaxed);
        let was = self.draining.swap(c.draining, Ordering::Relaxed);
        if c.draining && !was {
            self.detach();
        }
    }

    /// Stop serving: removed from its service (drained for good).
    pub(super) fn remove(&self) {
        self.removed.store(true, Ordering::Relaxed);
        self.detach();
    }

    /// Serve again: back in its service's configuration.
    pub(super) fn restore(&self) {
        self.removed.store(false, Ordering::Relaxed);
    }

    /// The attachment of type `T`, made by `make` when there is none (or one of
    /// another type).
    pub fn attached<T: Any + Send + Sync>(&self, make: impl FnOnce() -> T) -> Arc<T> {
        if let Ok(slot) = self.attached.read()
            && let Some(a) = slot.as_ref()
            && let Ok(t) = a.clone().downcast::<T>()
        {
            return t;
        }
        let mut slot = self.attached.write().unwrap_or_else(|p| p.into_inner());
        if let Some(a) = slot.as_ref()
            && let Ok(t) = a.clone().downcast::<T>()
        {
            return t;
        }
        let t = Arc::new(make());
        *slot = Some(t.clone());
        t
    }

    fn detach(&self) {
        if let Ok(mut slot) = self.attached.write() {
            *slot = None;
        }
    }
}

/// In flight on an endpoint until dropped.
pub struct ActiveGuard(Arc<Endpoint>);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
        self.0.metrics.active.dec();
    }
}
