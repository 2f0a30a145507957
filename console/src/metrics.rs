//! The console's own counts, on its `/metrics`: pictures made and their cost, pages
//! following, dataplanes that could not be read, actions by result.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    /// `move`, `cordon`, `uncordon` or `drain`.
    pub action: &'static str,
    /// `done`, `refused` (the API server said no) or `invalid`.
    pub result: &'static str,
}

pub struct Metrics {
    pub registry: Registry,
    pub snapshots: Counter,
    pub snapshot_seconds: Histogram,
    pub snapshot_bytes: Gauge,
    pub pages: Gauge,
    pub scrape_errors: Counter,
    pub actions: Family<ActionLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("sluice_console");
        let snapshots = Counter::default();
        let snapshot_seconds = Histogram::new(exponential_buckets(0.00005, 2.0, 16));
        let snapshot_bytes = Gauge::default();
        let pages = Gauge::default();
        let scrape_errors = Counter::default();
        let actions = Family::<ActionLabels, Counter>::default();
        registry.register(
            "snapshots",
            "Pictures made and sent to the pages",
            snapshots.clone(),
        );
        registry.register(
            "snapshot_duration_seconds",
            "Time to make a picture from the watched objects and the traffic history",
            snapshot_seconds.clone(),
        );
        registry.register(
            "snapshot_bytes",
            "Size of the last picture's JSON",
            snapshot_bytes.clone(),
        );
        registry.register(
            "pages",
            "Pages following the live picture now",
            pages.clone(),
        );
        registry.register(
            "scrape_errors",
            "Dataplane /metrics reads that failed",
            scrape_errors.clone(),
        );
        registry.register(
            "actions",
            "Actions asked for from the page, by result",
            actions.clone(),
        );
        Self {
            registry,
            snapshots,
            snapshot_seconds,
            snapshot_bytes,
            pages,
            scrape_errors,
            actions,
        }
    }
}
