//! What the DNS server counts: queries by type, rcode and zone; latency; cache hits.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::model::Model;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueryLabels {
    pub qtype: &'static str,
    pub rcode: &'static str,
    /// `clusterset`, `cluster`, `forward`, or `none` (refused / malformed).
    pub zone: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

#[derive(Debug)]
pub struct DnsMetrics {
    pub queries: Family<QueryLabels, Counter>,
    pub latency: Histogram,
    pub cache_hits: Counter,
    pub cache_misses: Counter,
    /// UDP queries answered from a remembered answer ([`crate::memo`]).
    pub remembered: Counter,
    pub forward_failures: Counter,
    pub objects: Family<KindLabels, Gauge>,
    pub synced: Gauge,
}

impl Default for DnsMetrics {
    fn default() -> Self {
        Self {
            queries: Family::default(),
            // 10 µs .. ~80 ms: local answers sit at the bottom, forwarded ones higher.
            latency: Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
                0.00001, 2.0, 14,
            )),
            cache_hits: Counter::default(),
            cache_misses: Counter::default(),
            remembered: Counter::default(),
            forward_failures: Counter::default(),
            objects: Family::default(),
            synced: Gauge::default(),
        }
    }
}

impl DnsMetrics {
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "queries",
            "Queries answered, by type, response code and zone",
            self.queries.clone(),
        );
        r.register(
            "query_duration_seconds",
            "Time from a parsed query to its response being handed to the socket",
            self.latency.clone(),
        );
        r.register(
            "cache_hits",
            "Forwarded queries answered from the cache",
            self.cache_hits.clone(),
        );
        r.register(
            "cache_misses",
            "Forwarded queries sent upstream",
            self.cache_misses.clone(),
        );
        r.register(
            "remembered_answers",
            "UDP queries answered from an answer remembered since the model last changed",
            self.remembered.clone(),
        );
        r.register(
            "forward_failures",
            "Forwarded queries the upstream did not answer",
            self.forward_failures.clone(),
        );
        r.register(
            "objects",
            "Objects held by the informers, by kind",
            self.objects.clone(),
        );
        r.register(
            "synced",
            "1 once every informer has listed",
            self.synced.clone(),
        );
    }

    pub fn record_objects(&self, model: &Model) {
        for (kind, n) in model.counts() {
            self.objects
                .get_or_create(&KindLabels { kind })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }
}
