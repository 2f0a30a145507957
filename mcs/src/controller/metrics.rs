//! What the MCS controller counts beyond the runtime's reconciles (`sluice_mcs_reconciles_total{outcome}`,
//! `..._reconcile_duration_seconds`, `..._queue_depth`, `..._failing_keys`): full rounds, the
//! services a partial one covers, writes and failures, live members.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Debug, Clone)]
pub struct McsMetrics {
    /// Rounds over every service (the rest cover only the services that changed).
    pub full_rounds: Counter,
    pub round_services: Histogram,
    pub writes: Counter,
    pub write_errors: Counter,
    pub alive: Gauge,
}

impl Default for McsMetrics {
    fn default() -> Self {
        Self {
            full_rounds: Counter::default(),
            // 1 .. 32768 services.
            round_services: Histogram::new(exponential_buckets(1.0, 2.0, 16)),
            writes: Counter::default(),
            write_errors: Counter::default(),
            alive: Gauge::default(),
        }
    }
}

impl McsMetrics {
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "full_reconciles",
            "Rounds over every service (after membership, lease, namespace changes or a re-list)",
            self.full_rounds.clone(),
        );
        r.register(
            "reconcile_services",
            "Services covered by one partial round",
            self.round_services.clone(),
        );
        r.register(
            "writes",
            "Objects created, updated or deleted in member clusters",
            self.writes.clone(),
        );
        r.register("write_errors", "Failed writes", self.write_errors.clone());
        r.register(
            "members_alive",
            "Member clusters whose lease is current",
            self.alive.clone(),
        );
    }

    /// One round over `services` services (`None`: all of them).
    pub fn observe_round(&self, services: Option<usize>) {
        match services {
            None => {
                self.full_rounds.inc();
            }
            Some(n) => self.round_services.observe(n as f64),
        }
    }
}
