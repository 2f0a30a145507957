//! What the placement controllers did, for `/metrics`: how many passes ran and why, how
//! long each took, and how many wakes found nothing to do. An idle fleet shows as wakes
//! without passes.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// What made a pass run.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Trigger {
    /// An object placement reads changed.
    Change,
    /// A syncer's heartbeat began or ended (a renewal alone runs none).
    Heartbeat,
    /// Traffic shifts somewhere: its next step is due.
    Shift,
    /// The last pass failed a write.
    Retry,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TriggerLabels {
    pub trigger: Trigger,
}

/// The placement controllers' metrics; register once with [`PlacementMetrics::register`].
#[derive(Clone)]
pub struct PlacementMetrics {
    pub passes: Family<TriggerLabels, Counter>,
    pub pass_seconds: Histogram,
    /// Heartbeat renewals and expiry checks that changed no cluster's readiness.
    pub quiet_wakes: Counter,
    /// Namespaces decided, summed over passes (per pass: this over `passes`).
    pub namespaces: Counter,
}

impl Default for PlacementMetrics {
    fn default() -> Self {
        Self {
            passes: Family::default(),
            pass_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            quiet_wakes: Counter::default(),
            namespaces: Counter::default(),
        }
    }
}

impl PlacementMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "passes",
            "Placement passes, by what made them run",
            self.passes.clone(),
        );
        registry.register(
            "pass_duration_seconds",
            "How long a placement pass took",
            self.pass_seconds.clone(),
        );
        registry.register(
            "quiet_wakes",
            "Heartbeat renewals and expiry checks that changed no cluster's readiness, so ran no pass",
            self.quiet_wakes.clone(),
        );
        registry.register(
            "namespaces_decided",
            "Namespaces decided, summed over passes",
            self.namespaces.clone(),
        );
    }

    pub(crate) fn pass(&self, trigger: Trigger) {
        self.passes.get_or_create(&TriggerLabels { trigger }).inc();
    }
}
