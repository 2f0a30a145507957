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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    pub webhook: String,
    pub phase: &'static str,
    /// `allowed`, `denied` or `error`.
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookNameLabels {
    pub webhook: String,
    pub phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    pub policy: String,
    /// `admit`, `deny` or `warn_or_audit`.
    pub result: &'static str,
}

/// The API server's metrics; register once with [`ApiMetrics::register`].
#[derive(Clone)]
pub struct ApiMetrics {
    pub requests: Family<RequestLabels, Counter>,
    pub latency: Family<VerbLabels, Histogram>,
    pub open_watches: Family<ResourceLabels, Gauge>,
    pub storage_objects: Gauge,
    pub storage_revision: Gauge,
    /// Admission webhook calls by webhook, phase and result.
    pub webhook_calls: Family<WebhookLabels, Counter>,
    pub webhook_latency: Family<WebhookNameLabels, Histogram>,
    /// ValidatingAdmissionPolicy evaluations by policy and result.
    pub policy_evaluations: Family<PolicyLabels, Counter>,
    pub policy_latency: Histogram,
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
            webhook_calls: Family::default(),
            webhook_latency: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0005, 2.0, 16))
            }),
            policy_evaluations: Family::default(),
            policy_latency: Histogram::new(exponential_buckets(0.000005, 2.0, 18)),
        }
    }
}

impl ApiMetrics {
    /// One admission webhook call and how long it took.
    pub fn record_webhook(
        &self,
        webhook: &str,
        phase: &'static str,
        result: &'static str,
        took: std::time::Duration,
    ) {
        self.webhook_calls
            .get_or_create(&WebhookLabels {
                webhook: webhook.to_string(),
                phase,
                result,
            })
            .inc();
        self.webhook_latency
            .get_or_create(&WebhookNameLabels {
                webhook: webhook.to_string(),
                phase,
            })
            .observe(took.as_secs_f64());
    }

    /// One binding of a ValidatingAdmissionPolicy evaluated, and how long it took.
    pub fn record_policy(&self, policy: &str, result: &'static str, took: std::time::Duration) {
        self.policy_evaluations
            .get_or_create(&PolicyLabels {
                policy: policy.to_string(),
                result,
            })
            .inc();
        self.policy_latency.observe(took.as_secs_f64());
    }

    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "admission_policy_evaluations",
            "ValidatingAdmissionPolicy evaluations (one per matching binding) by policy and result (admit, deny, warn_or_audit)",
            self.policy_evaluations.clone(),
        );
        registry.register(
            "admission_policy_duration_seconds",
            "How long evaluating one ValidatingAdmissionPolicy binding took",
            self.policy_latency.clone(),
        );
        registry.register(
            "admission_webhook_calls",
            "Admission and conversion webhook calls by webhook, phase (mutating, validating, conversion) and result (allowed, denied, converted, error)",
            self.webhook_calls.clone(),
        );
        registry.register(
            "admission_webhook_duration_seconds",
            "How long admission webhook calls took, by webhook and phase",
            self.webhook_latency.clone(),
        );
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
