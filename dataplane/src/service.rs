//! A service as the proxy runs it: its balancer, protocol, timeouts and retry budget.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use http::Version;

use crate::balance::Balancer;
use crate::budget::RetryBudget;
use crate::config::{AppProtocol, ServiceConfig};
use crate::metrics::ProxyMetrics;
use crate::tunnel::Tunnels;

pub struct Service {
    pub name: String,
    pub protocol: AppProtocol,
    pub balancer: Balancer,
    pub metrics: ProxyMetrics,
    pub budget: RetryBudget,
    /// Read on every request: atomics, not a lock.
    connect_ms: AtomicU64,
    request_ms: AtomicU64,
    hold_ms: AtomicU64,
    /// Requests waiting for an endpoint now (held by the HTTP path).
    pub(crate) held: AtomicUsize,
}

impl Service {
    pub fn new(c: &ServiceConfig, metrics: ProxyMetrics, tunnels: &Tunnels) -> Self {
        let balancer = Balancer::new(&c.name, metrics.clone(), &c.endpoints, tunnels);
        balancer.set_locality(c.locality);
        Self {
            name: c.name.clone(),
            protocol: c.protocol,
            balancer,
            metrics,
            budget: RetryBudget::new(c.retry_ratio),
            connect_ms: AtomicU64::new(c.timeouts.connect_ms),
            request_ms: AtomicU64::new(c.timeouts.request_ms),
            hold_ms: AtomicU64::new(c.timeouts.hold_ms),
            held: AtomicUsize::new(0),
        }
    }

    /// Apply what can change without rebinding: endpoints, locality, timeouts, the retry
    /// ratio.
    pub fn update(&self, c: &ServiceConfig, tunnels: &Tunnels) {
        self.balancer.update(&c.endpoints, tunnels);
        self.balancer.set_locality(c.locality);
        self.connect_ms
            .store(c.timeouts.connect_ms, Ordering::Relaxed);
        self.request_ms
            .store(c.timeouts.request_ms, Ordering::Relaxed);
        self.hold_ms.store(c.timeouts.hold_ms, Ordering::Relaxed);
        self.budget.set_ratio(c.retry_ratio);
    }

    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_ms.load(Ordering::Relaxed))
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_ms.load(Ordering::Relaxed))
    }

    /// How long a request with no endpoint to try waits for one.
    pub fn hold_timeout(&self) -> Duration {
        Duration::from_millis(self.hold_ms.load(Ordering::Relaxed))
    }

    /// Whether clients speak HTTP/2 only (h2c and gRPC services).
    pub fn h2_only(&self) -> bool {
        matches!(self.protocol, AppProtocol::H2c | AppProtocol::Grpc)
    }

    /// Whether upstream requests use HTTP/2: always for h2c/gRPC services, else the
    /// client's version.
    pub fn upstream_h2(&self, downstream: Version) -> bool {
        self.h2_only() || downstream == Version::HTTP_2
    }
}
