//! What the controller counts: rounds, their duration, writes and failures, live members.

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Debug, Clone)]
pub struct ControllerMetrics {
    pub rounds: Counter,
    pub failed_rounds: Counter,
    /// Rounds over every service (the rest cover only the services that changed).
    pub full_rounds: Counter,
    pub round_services: Histogram,
    pub round_seconds: Histogram,
    pub writes: Counter,
    pub write_errors: Counter,
    pub alive: Gauge,
}

impl Default for ControllerMetrics {
    fn default() -> Self {
        Self {
            rounds: Counter::default(),
            failed_rounds: Counter::default(),
            full_rounds: Counter::default(),
            // 1 .. 32768 services.
            round_services: Histogram::new(exponential_buckets(1.0, 2.0, 16)),
            // 100 µs .. ~6.5 s.
            round_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 17)),
            writes: Counter::default(),
            write_errors: Counter::default(),
            alive: Gauge::default(),
        }
    }
}

impl ControllerMetrics {
    pub fn register(&self, r: &mut Registry) {
        r.register("reconciles", "Reconcile rounds", self.rounds.clone());
        r.register(
            "reconcile_failures",
            "Rounds in which a write failed (retried)",
            self.failed_rounds.clone(),
        );
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
            "reconcile_duration_seconds",
            "Snapshot, reconcile and writes of one round",
            self.round_seconds.clone(),
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
    pub fn observe_round(&self, took: Duration, failed: bool, services: Option<usize>) {
        self.rounds.inc();
        match services {
            None => {
                self.full_rounds.inc();
            }
            Some(n) => self.round_services.observe(n as f64),
        }
        if failed {
            self.failed_rounds.inc();
        }
        self.round_seconds.observe(took.as_secs_f64());
    }
}
