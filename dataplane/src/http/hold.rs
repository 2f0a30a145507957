//! Holding a request while its service has no endpoint to try, instead of failing it.
//!
//! A stateful move has a write pause (the app stopped on the old cluster, not yet Ready on
//! the new one), and a `Recreate` rollout a gap like it: for a moment no endpoint serves.
//! A request that may still be sent — it reached no endpoint yet, or it may be retried —
//! waits for the service's endpoints to change and is then sent, as a client retrying would
//! have been. The wait is bounded in time (the service's `holdMs`) and in number
//! ([`MAX_HELD`] per service): past either, the client gets the 503 it would have had at
//! once.

use std::sync::atomic::Ordering;
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::service::Service;

/// Requests one service holds at most; the next one fails at once. A held request keeps
/// its head (and, on the lean path, a body of at most the lean limit), so this bounds the
/// memory holding costs.
pub const MAX_HELD: usize = 1024;

/// One held request: counted on the service while it lives.
pub struct Held<'a> {
    svc: &'a Service,
    gauge: Gauge,
    until: Instant,
    since: Instant,
    outcome: &'static str,
}

impl<'a> Held<'a> {
    /// Start holding a request on `svc`; `None` when the service holds none (`holdMs` 0)
    /// or already holds [`MAX_HELD`].
    pub fn start(svc: &'a Service) -> Option<Self> {
        let timeout = svc.hold_timeout();
        if timeout.is_zero() {
            return None;
        }
        let admitted = svc
            .held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_HELD).then_some(n + 1)
            })
            .is_ok();
        if !admitted {
            svc.metrics.hold(&svc.name, "refused");
            return None;
        }
        let gauge = svc.metrics.held(&svc.name);
        gauge.inc();
        let since = Instant::now();
        tracing::debug!(service = %svc.name, ?timeout, "no endpoint to try: holding the request");
        Some(Self {
            svc,
            gauge,
            until: since + timeout,
            since,
            outcome: "expired",
        })
    }

    /// Wait for the next change of the service's endpoints, or until `or_at`; false when
    /// the hold's time ran out first.
    pub async fn wait(&self, changes: &mut watch::Receiver<u64>, or_at: Option<Instant>) -> bool {
        let until = or_at.map_or(self.until, |t| t.min(self.until));
        match tokio::time::timeout_at(until, changes.changed()).await {
            Ok(changed) => changed.is_ok(),
            Err(_) => Instant::now() < self.until,
        }
    }

    /// An endpoint came in time.
    pub fn served(mut self) {
        self.outcome = "served";
    }

    /// How long the request has been held.
    pub fn elapsed(&self) -> Duration {
        self.since.elapsed()
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.svc.held.fetch_sub(1, Ordering::AcqRel);
        self.gauge.dec();
        self.svc.metrics.hold(&self.svc.name, self.outcome);
        tracing::debug!(
            service = %self.svc.name,
            outcome = self.outcome,
            held_ms = self.since.elapsed().as_millis() as u64,
            "hold ended"
        );
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::config::{ServiceConfig, Timeouts};
    use crate::metrics::ProxyMetrics;
    use crate::tunnel::Tunnels;

    fn service(hold_ms: u64) -> Service {
        let c = ServiceConfig {
            name: "shop/web".into(),
            listen: "127.0.0.1:0".parse().unwrap(),
            protocol: Default::default(),
            endpoints: vec![],
            timeouts: Timeouts {
                hold_ms,
                ..Timeouts::default()
            },
            retry_ratio: 0.2,
            exported: false,
            locality: Default::default(),
        };
        Service::new(&c, ProxyMetrics::default(), &Tunnels::default())
    }

    #[test]
    fn a_service_holds_at_most_max_held_requests() {
        let svc = service(10_000);
        let held: Vec<Held> = (0..MAX_HELD).map(|_| Held::start(&svc).unwrap()).collect();
        assert!(Held::start(&svc).is_none(), "one more than the bound");
        drop(held);
        assert_eq!(svc.held.load(Ordering::Acquire), 0);
        assert!(Held::start(&svc).is_some(), "room again");
    }

    #[test]
    fn hold_ms_zero_holds_nothing() {
        assert!(Held::start(&service(0)).is_none());
    }

    #[tokio::test]
    async fn a_hold_ends_with_a_change_or_its_time() {
        let svc = service(100);
        let mut changes = svc.balancer.changes();
        let held = Held::start(&svc).unwrap();
        svc.balancer.update(&[], &Tunnels::default());
        assert!(held.wait(&mut changes, None).await, "a change wakes it");
        let soon = Instant::now() + Duration::from_millis(10);
        assert!(
            held.wait(&mut changes, Some(soon)).await,
            "its own time wakes it"
        );
        assert!(
            !held.wait(&mut changes, None).await,
            "no change: the hold's time runs out"
        );
        assert!(held.elapsed() >= Duration::from_millis(100));
    }
}
