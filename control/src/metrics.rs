//! Prometheus metrics of the API server.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub verb: &'static str,
    pub resource: String,
    pub code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabels {
    pub verb: &'static str,
    pub resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    pub resource: String,
}

/// The API server's metrics; register once with [`ApiMetrics::register`].
#[derive(Clone)]
pub struct ApiMetrics {
    pub requests: Family<RequestLabels, Counter>,
    pub latency: Family<VerbLabels, Histogram>,
    pub open_watches: Family<ResourceLabels, Gauge>,
    pub storage_objects: Gauge,
    pub storage_revision: Gauge,
}

impl Default for ApiMetrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            latency: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0001, 2.0, 18))
            }),
            open_watches: Family::default(),
            storage_objects: Gauge::default(),
            storage_revision: Gauge::default(),
        }
    }
}

impl ApiMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "requests",
            "API requests by verb, resource and HTTP code",
            self.requests.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "API request latency by verb and resource",
            self.latency.clone(),
        );
        registry.register(
            "open_watches",
            "Watches currently open, by resource",
            self.open_watches.clone(),
        );
        registry.register(
            "storage_objects",
            "Objects in storage",
            self.storage_objects.clone(),
        );
        registry.register(
            "storage_revision",
            "Current storage revision",
            self.storage_revision.clone(),
        );
    }
}

/// Render a registry in the Prometheus text format.
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, registry).is_err() {
        out.clear();
    }
    out
}
