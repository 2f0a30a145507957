//! Endpoints and the balancer that picks among them.
//!
//! The set of endpoints is swapped whole on a configuration change (readers clone an
//! `Arc` and never wait for a writer); an endpoint that stays keeps its state (latency
//! estimate, outlier history, open connections) across changes.

pub mod ewma;
pub mod outlier;
pub mod p2c;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::config::EndpointConfig;
use crate::metrics::{EndpointMetrics, ProxyMetrics};
use crate::tunnel::Tunnels;
use crate::tunnel::pool::Peer;

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
    /// The upstream HTTP connection pool; dropped when the endpoint drains, so that its
    /// idle connections close while in-flight requests finish on theirs.
    pub pool: RwLock<Option<crate::http::Pool>>,
    /// The peer cluster whose gateway leads to this endpoint; `None`: reached directly.
    pub via: Option<Arc<Peer>>,
}

impl Endpoint {
    fn new(c: &EndpointConfig, via: Option<Arc<Peer>>, metrics: EndpointMetrics) -> Self {
        Self {
            address: c.address,
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
            pool: RwLock::new(None),
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
    fn ejected(&self, now: Instant) -> bool {
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
        if let Ok(mut h) = self.health.lock() {
            h.ewma.observe(rtt);
            h.outlier.success();
            h.outlier.recovered(Instant::now());
        }
    }

    /// A failed attempt; ejects the endpoint after enough of them in a row.
    pub fn failure(&self, rtt: Duration) {
        if let Ok(mut h) = self.health.lock() {
            // A failure is slow for balancing purposes, however fast it came.
            h.ewma.observe(rtt.max(Duration::from_millis(100)));
            if h.outlier.failure(Instant::now()) {
                self.metrics.ejections.inc();
                tracing::info!(endpoint = %self.address, "ejected after consecutive failures");
            }
        }
    }

    fn apply(&self, c: &EndpointConfig) {
        self.weight.store(c.weight, Ordering::Relaxed);
        let was = self.draining.swap(c.draining, Ordering::Relaxed);
        if c.draining && !was {
            self.drop_pool();
        }
    }

    fn drop_pool(&self) {
        if let Ok(mut p) = self.pool.write() {
            *p = None;
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

/// The endpoints of one service.
#[derive(Debug)]
pub struct Balancer {
    service: String,
    metrics: ProxyMetrics,
    endpoints: RwLock<Arc<[Arc<Endpoint>]>>,
}

impl Balancer {
    pub fn new(
        service: &str,
        metrics: ProxyMetrics,
        configs: &[EndpointConfig],
        tunnels: &Tunnels,
    ) -> Self {
        let b = Self {
            service: service.to_string(),
            metrics,
            endpoints: RwLock::new(Arc::from(Vec::new())),
        };
        b.update(configs, tunnels);
        b
    }

    pub fn endpoints(&self) -> Arc<[Arc<Endpoint>]> {
        self.endpoints
            .read()
            .map(|e| e.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// Apply a new endpoint list: same address (and path) keeps its state; gone ones
    /// drain.
    pub fn update(&self, configs: &[EndpointConfig], tunnels: &Tunnels) {
        let old = self.endpoints();
        let mut next: Vec<Arc<Endpoint>> = Vec::with_capacity(configs.len());
        for c in configs {
            let via = c.via.as_deref().and_then(|p| tunnels.peer(p));
            let same_path = |e: &Endpoint| match (&e.via, &via) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            };
            match old
                .iter()
                .find(|e| e.address == c.address && e.cluster == c.cluster && same_path(e))
            {
                Some(e) => {
                    e.apply(c);
                    e.removed.store(false, Ordering::Relaxed);
                    next.push(e.clone());
                }
                None => next.push(Arc::new(Endpoint::new(
                    c,
                    via,
                    self.metrics.endpoint(&self.service, &c.cluster),
                ))),
            }
        }
        for e in old.iter() {
            if !next.iter().any(|n| Arc::ptr_eq(n, e)) {
                e.removed.store(true, Ordering::Relaxed);
                e.drop_pool();
            }
        }
        let mut w = self.endpoints.write().unwrap_or_else(|p| p.into_inner());
        *w = Arc::from(next);
    }

    /// An endpoint for a new request or connection, not one of `tried`: serving (not
    /// draining, weight > 0), not ejected unless every candidate is.
    pub fn pick(&self, tried: &[SocketAddr]) -> Option<Arc<Endpoint>> {
        let all = self.endpoints();
        let now = Instant::now();
        let mut candidates: Vec<&Arc<Endpoint>> = all
            .iter()
            .filter(|e| !e.draining() && e.weight() > 0 && !tried.contains(&e.address))
            .collect();
        // Ejected endpoints drop out, unless that would leave none.
        if candidates.iter().any(|e| !e.ejected(now)) {
            candidates.retain(|e| !e.ejected(now));
        }
        p2c::choose(&candidates, &mut rand::rng()).cloned()
    }

    /// In-flight requests and open connections per source cluster (the drain gate).
    pub fn active_by_cluster(&self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = Vec::new();
        for e in self.endpoints().iter() {
            match out.iter_mut().find(|(c, _)| *c == e.cluster) {
                Some((_, n)) => *n += e.active(),
                None => out.push((e.cluster.clone(), e.active())),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(port: u16, weight: u32, draining: bool) -> EndpointConfig {
        EndpointConfig {
            address: ([127, 0, 0, 1], port).into(),
            weight,
            draining,
            cluster: "east".into(),
            via: None,
        }
    }

    #[test]
    fn weights_set_the_shares() {
        let b = Balancer::new(
            "s",
            ProxyMetrics::default(),
            &[ep(1, 90, false), ep(2, 10, false)],
            &Tunnels::default(),
        );
        let mut first = 0;
        for _ in 0..10_000 {
            if b.pick(&[]).unwrap().address.port() == 1 {
                first += 1;
            }
        }
        assert!((8_500..9_700).contains(&first), "{first}");
    }

    #[test]
    fn draining_and_zero_weight_get_nothing_and_state_survives_updates() {
        let b = Balancer::new(
            "s",
            ProxyMetrics::default(),
            &[ep(1, 100, false), ep(2, 0, false)],
            &Tunnels::default(),
        );
        let kept = b.pick(&[]).unwrap();
        let _g = kept.start();
        b.update(&[ep(1, 100, true), ep(3, 100, false)], &Tunnels::default());
        for _ in 0..100 {
            assert_eq!(b.pick(&[]).unwrap().address.port(), 3);
        }
        assert_eq!(b.endpoints()[0].active(), 1, "same endpoint object kept");
        assert!(b.pick(&[([127, 0, 0, 1], 3).into()]).is_none());
    }

    #[test]
    fn ejection_never_takes_the_last_endpoints() {
        let b = Balancer::new(
            "s",
            ProxyMetrics::default(),
            &[ep(1, 100, false)],
            &Tunnels::default(),
        );
        let e = b.pick(&[]).unwrap();
        for _ in 0..10 {
            e.failure(Duration::from_millis(1));
        }
        assert!(b.pick(&[]).is_some());
    }
}
