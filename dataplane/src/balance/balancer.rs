//! The endpoints of one service and the pick among them.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use super::endpoint::Endpoint;
use super::p2c;
use crate::config::{EndpointConfig, Locality};
use crate::metrics::ProxyMetrics;
use crate::tunnel::Tunnels;

/// Under `PreferClose`, a local endpoint with this many requests or connections in flight
/// counts as overloaded; when every local one is, new work spills over to remote ones.
pub const SPILL_IN_FLIGHT: u64 = 64;

/// The endpoints of one service.
#[derive(Debug)]
pub struct Balancer {
    service: String,
    metrics: ProxyMetrics,
    endpoints: RwLock<Arc<[Arc<Endpoint>]>>,
    /// `PreferClose`: endpoints reached directly come first.
    prefer_close: AtomicBool,
    /// Bumped on every update: requests held for an endpoint wait on it.
    changed: tokio::sync::watch::Sender<u64>,
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
            prefer_close: AtomicBool::new(false),
            changed: tokio::sync::watch::Sender::new(0),
        };
        b.update(configs, tunnels);
        b
    }

    /// Which endpoints come first (a service's `trafficDistribution`).
    pub fn set_locality(&self, locality: Locality) {
        self.prefer_close
            .store(locality == Locality::PreferClose, Ordering::Relaxed);
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
                    e.restore();
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
                e.remove();
            }
        }
        let mut w = self.endpoints.write().unwrap_or_else(|p| p.into_inner());
        *w = Arc::from(next);
        drop(w);
        self.changed.send_modify(|g| *g = g.wrapping_add(1));
    }

    /// A receiver that sees every update after this call: subscribe, then pick, then wait
    /// on it, and no update is missed between the pick and the wait.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// An endpoint for a new request or connection, not one of `tried`: serving (not
    /// draining, weight > 0), not ejected unless every candidate is. Under `PreferClose`,
    /// a local endpoint that is healthy and not overloaded, if there is one.
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
        if self.prefer_close.load(Ordering::Relaxed) {
            let close: Vec<&Arc<Endpoint>> =
                candidates.iter().copied().filter(|e| e.local).collect();
            if close.iter().any(|e| e.active() < SPILL_IN_FLIGHT) {
                return p2c::choose(&close, &mut rand::rng()).cloned();
            }
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

    /// Attempts, errors and latencies so far, per source cluster.
    pub fn tally_by_cluster(&self) -> Vec<(String, super::outcomes::Tally)> {
        let mut out: Vec<(String, super::outcomes::Tally)> = Vec::new();
        for e in self.endpoints().iter() {
            let t = e.outcomes.tally();
            match out.iter_mut().find(|(c, _)| *c == e.cluster) {
                Some((_, sum)) => sum.add(&t),
                None => out.push((e.cluster.clone(), t)),
            }
        }
        out
    }

    /// In-flight requests and open connections per source cluster whose every endpoint
    /// here drains (zero included): what a move's drain gate waits for. A cluster with
    /// one endpoint still serving is not draining as a whole (a rolling update there).
    pub fn draining_by_cluster(&self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64, bool)> = Vec::new();
        for e in self.endpoints().iter() {
            match out.iter_mut().find(|(c, _, _)| *c == e.cluster) {
                Some((_, n, all)) => {
                    *n += e.active();
                    *all &= e.draining();
                }
                None => out.push((e.cluster.clone(), e.active(), e.draining())),
            }
        }
        out.into_iter()
            .filter(|(_, _, all)| *all)
            .map(|(c, n, _)| (c, n))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

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
    fn only_clusters_draining_as_a_whole_report_their_live_traffic() {
        let at = |port: u16, cluster: &str, draining: bool| EndpointConfig {
            cluster: cluster.into(),
            ..ep(port, 100, draining)
        };
        let b = Balancer::new(
            "s",
            ProxyMetrics::default(),
            &[
                at(1, "east", false),
                at(2, "west", false),
                at(3, "west", false),
            ],
            &Tunnels::default(),
        );
        let held: Vec<_> = b.endpoints().iter().map(|e| e.start()).collect();
        assert!(b.draining_by_cluster().is_empty());
        // One of west's endpoints terminates (a rolling update): west still serves.
        b.update(
            &[
                at(1, "east", false),
                at(2, "west", true),
                at(3, "west", false),
            ],
            &Tunnels::default(),
        );
        assert!(b.draining_by_cluster().is_empty());
        b.update(
            &[
                at(1, "east", false),
                at(2, "west", true),
                at(3, "west", true),
            ],
            &Tunnels::default(),
        );
        assert_eq!(b.draining_by_cluster(), vec![("west".to_string(), 2)]);
        drop(held);
        assert_eq!(b.draining_by_cluster(), vec![("west".to_string(), 0)]);
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
    fn prefer_close_keeps_traffic_local_and_spills_when_local_cannot_take_it() {
        let remote = |port: u16| EndpointConfig {
            cluster: "west".into(),
            via: Some("west".into()),
            ..ep(port, 100, false)
        };
        let configs = [ep(1, 100, false), remote(2), remote(3)];
        let b = Balancer::new("s", ProxyMetrics::default(), &configs, &Tunnels::default());
        let local_share = |b: &Balancer| {
            (0..3_000)
                .filter(|_| b.pick(&[]).is_some_and(|e| e.local))
                .count()
        };
        // Without a preference the local endpoint gets its third.
        assert!((800..1_200).contains(&local_share(&b)));
        b.set_locality(Locality::PreferClose);
        assert_eq!(local_share(&b), 3_000);
        // Tried already (a retry): the next pick goes remote.
        assert!(!b.pick(&[([127, 0, 0, 1], 1).into()]).unwrap().local);
        // Overloaded: every local endpoint at the spill mark sends new work out.
        let local = b.endpoints().iter().find(|e| e.local).unwrap().clone();
        let held: Vec<_> = (0..SPILL_IN_FLIGHT).map(|_| local.start()).collect();
        assert!(local_share(&b) < 2_000);
        drop(held);
        assert_eq!(local_share(&b), 3_000);
        // Unhealthy: an ejected local endpoint sends everything out.
        for _ in 0..10 {
            local.failure(Duration::from_millis(1));
        }
        assert_eq!(local_share(&b), 0);
        // Draining (a move away from this cluster): remote takes it all.
        b.update(
            &[ep(4, 100, true), remote(2), remote(3)],
            &Tunnels::default(),
        );
        assert_eq!(local_share(&b), 0);
        // No remote endpoint left: local ones serve, whatever their load.
        b.update(&[ep(5, 100, false)], &Tunnels::default());
        assert_eq!(local_share(&b), 3_000);
        b.set_locality(Locality::Any);
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
