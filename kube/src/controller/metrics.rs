//! What a controller did, for `/metrics`: reconciles by result, how long each took, how
//! many keys wait and how many failed in a row somewhere. An idle controller shows as no
//! reconciles and an empty queue.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// How a reconcile ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Outcome {
    /// Done; the key waits for its next change.
    Settled,
    /// Done; the key asked to be looked at again after a while.
    Requeued,
    /// Failed: the key is retried with backoff.
    Failed,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: Outcome,
}

/// One controller's metrics; register with [`ControllerMetrics::register`] under the
/// controller's prefix.
#[derive(Clone, Debug)]
pub struct ControllerMetrics {
    pub reconciles: Family<OutcomeLabels, Counter>,
    pub duration: Histogram,
    /// Keys waiting (due now or later).
    pub queued: Gauge,
    /// Keys failing now (their backoff running).
    pub failing: Gauge,
}

impl Default for ControllerMetrics {
    fn default() -> Self {
        Self {
            reconciles: Family::default(),
            duration: Histogram::new(exponential_buckets(0.0001, 2.0, 18)),
            queued: Gauge::default(),
            failing: Gauge::default(),
        }
    }
}

impl ControllerMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "reconciles",
            "Reconciles of one key, by how they ended",
            self.reconciles.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "How long one key's reconcile took",
            self.duration.clone(),
        );
        registry.register(
            "queue_depth",
            "Keys waiting to be reconciled (due now or later)",
            self.queued.clone(),
        );
        registry.register(
            "failing_keys",
            "Keys whose last reconcile failed (retried with backoff)",
            self.failing.clone(),
        );
    }

    pub(crate) fn ended(&self, outcome: Outcome, seconds: f64) {
        self.reconciles
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
        self.duration.observe(seconds);
    }
}
