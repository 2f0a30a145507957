//! What the proxy counts, per service and source cluster. Handles for an endpoint's
//! series are looked up once, when the endpoint appears, not per request.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::reason::Reason;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    pub service: String,
    pub cluster: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub service: String,
    pub cluster: String,
    /// [`Reason::label`].
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DirectionLabels {
    pub service: String,
    pub cluster: String,
    /// `to_endpoint` or `to_client`.
    pub direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServiceLabels {
    pub service: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HoldLabels {
    pub service: String,
    /// `served` (an endpoint came in time), `expired` or `refused` (too many held).
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GoawayLabels {
    pub service: String,
    /// The RFC 9113 error code sent, e.g. `ENHANCE_YOUR_CALM` (rapid reset, a header
    /// flood) or `PROTOCOL_ERROR`.
    pub reason: &'static str,
}

fn latency_histogram() -> Histogram {
    // 50 µs .. ~13 s.
    Histogram::new(exponential_buckets(0.00005, 2.0, 18))
}

type HistogramFamily = Family<EndpointLabels, Histogram, fn() -> Histogram>;

#[derive(Debug, Clone)]
pub struct ProxyMetrics {
    pub requests: Family<EndpointLabels, Counter>,
    pub failures: Family<FailureLabels, Counter>,
    pub retries: Family<ServiceLabels, Counter>,
    pub latency: HistogramFamily,
    pub active: Family<EndpointLabels, Gauge>,
    pub bytes: Family<DirectionLabels, Counter>,
    pub ejections: Family<EndpointLabels, Counter>,
    pub holds: Family<HoldLabels, Counter>,
    pub held: Family<ServiceLabels, Gauge>,
    pub goaways: Family<GoawayLabels, Counter>,
    pub reloads: Counter,
}

impl Default for ProxyMetrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            failures: Family::default(),
            retries: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            active: Family::default(),
            bytes: Family::default(),
            ejections: Family::default(),
            holds: Family::default(),
            held: Family::default(),
            goaways: Family::default(),
            reloads: Counter::default(),
        }
    }
}

impl ProxyMetrics {
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "requests",
            "Requests (L7) or connections (L4) sent to an endpoint, by service and source cluster",
            self.requests.clone(),
        );
        r.register(
            "failures",
            "Failed attempts by reason; a retried attempt counts here and in retries",
            self.failures.clone(),
        );
        r.register(
            "retries",
            "Attempts retried on another endpoint",
            self.retries.clone(),
        );
        r.register(
            "request_duration_seconds",
            "Time to response headers (L7) or to connect (L4)",
            self.latency.clone(),
        );
        r.register(
            "active",
            "In-flight requests and open connections; the drain gate waits for 0",
            self.active.clone(),
        );
        r.register("bytes", "Bytes proxied by direction", self.bytes.clone());
        r.register(
            "ejections",
            "Times outlier detection ejected an endpoint",
            self.ejections.clone(),
        );
        r.register(
            "holds",
            "Requests held while their service had no endpoint to try, by how the hold ended",
            self.holds.clone(),
        );
        r.register(
            "held",
            "Requests waiting for an endpoint now",
            self.held.clone(),
        );
        r.register(
            "h2_goaways",
            "Client HTTP/2 connections the proxy ended for the client's errors, by the code sent",
            self.goaways.clone(),
        );
        r.register(
            "config_reloads",
            "Configurations applied",
            self.reloads.clone(),
        );
        r.register(
            "busy_poll_seconds",
            "Time the pollers ran instead of sleeping (--poll-upstream-us, --busy-poll-us)",
            crate::busy_poll::spin_seconds(),
        );
    }

    pub fn failure(&self, service: &str, cluster: &str, reason: Reason) {
        self.failures
            .get_or_create(&FailureLabels {
                service: service.to_string(),
                cluster: cluster.to_string(),
                reason: reason.label(),
            })
            .inc();
    }

    pub fn retry(&self, service: &str) {
        self.retries
            .get_or_create(&ServiceLabels {
                service: service.to_string(),
            })
            .inc();
    }

    /// A hold on `service` ended with `outcome`.
    pub fn hold(&self, service: &str, outcome: &'static str) {
        self.holds
            .get_or_create(&HoldLabels {
                service: service.to_string(),
                outcome,
            })
            .inc();
    }

    /// A client's HTTP/2 connection to `service` was ended with GOAWAY `reason`.
    pub fn goaway(&self, service: &str, reason: &'static str) {
        self.goaways
            .get_or_create(&GoawayLabels {
                service: service.to_string(),
                reason,
            })
            .inc();
    }

    /// The gauge of requests held on `service` now.
    pub fn held(&self, service: &str) -> Gauge {
        self.held
            .get_or_create(&ServiceLabels {
                service: service.to_string(),
            })
            .clone()
    }

    /// The series of one endpoint.
    pub fn endpoint(&self, service: &str, cluster: &str) -> EndpointMetrics {
        let l = EndpointLabels {
            service: service.to_string(),
            cluster: cluster.to_string(),
        };
        let dir = |direction| DirectionLabels {
            service: service.to_string(),
            cluster: cluster.to_string(),
            direction,
        };
        // One statement per family: a `get_or_create` guard lives to the end of its
        // statement, and a second lookup in the same family would wait for it.
        let requests = self.requests.get_or_create(&l).clone();
        let latency = self.latency.get_or_create(&l).clone();
        let active = self.active.get_or_create(&l).clone();
        let to_endpoint = self.bytes.get_or_create(&dir("to_endpoint")).clone();
        let to_client = self.bytes.get_or_create(&dir("to_client")).clone();
        let ejections = self.ejections.get_or_create(&l).clone();
        EndpointMetrics {
            requests,
            latency,
            active,
            to_endpoint,
            to_client,
            ejections,
        }
    }
}

/// Handles to one endpoint's series (clones share the underlying values).
#[derive(Debug, Clone)]
pub struct EndpointMetrics {
    pub requests: Counter,
    pub latency: Histogram,
    pub active: Gauge,
    pub to_endpoint: Counter,
    pub to_client: Counter,
    pub ejections: Counter,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PeerLabels {
    pub peer: String,
    /// `h2` (mTLS over TCP, HTTP/2 CONNECT) or `quic`.
    pub transport: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PeerFailureLabels {
    pub peer: String,
    pub transport: &'static str,
    /// [`Reason::label`].
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GatewayLabels {
    pub transport: &'static str,
    /// The client's cluster, from its SPIFFE id.
    pub source_cluster: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RejectLabels {
    pub transport: &'static str,
    /// [`Reason::label`]: `handshake` (untrusted, expired, not TLS), `not_exported`,
    /// `bad_request`, `unreachable`, `method`.
    pub reason: &'static str,
}

/// Tunnels: outbound (to peers' gateways) and inbound (this cluster's gateway).
#[derive(Debug, Clone, Default)]
pub struct TunnelMetrics {
    pub streams: Family<PeerLabels, Counter>,
    pub connections: Family<PeerLabels, Gauge>,
    pub peer_up: Family<PeerLabels, Gauge>,
    /// The smallest packet size MTU discovery settled on among a peer's QUIC connections.
    pub path_mtu: Family<PeerLabels, Gauge>,
    pub open_failures: Family<PeerFailureLabels, Counter>,
    pub gateway_streams: Family<GatewayLabels, Counter>,
    pub gateway_active: Family<GatewayLabels, Gauge>,
    pub gateway_rejected: Family<RejectLabels, Counter>,
}

impl TunnelMetrics {
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "tunnel_streams",
            "Streams opened to a peer's gateway",
            self.streams.clone(),
        );
        r.register(
            "tunnel_connections",
            "Open tunnel connections to a peer's gateway",
            self.connections.clone(),
        );
        r.register(
            "tunnel_peer_up",
            "1 while a peer's gateway answers keepalives",
            self.peer_up.clone(),
        );
        r.register(
            "tunnel_path_mtu_bytes",
            "UDP payload size QUIC's MTU discovery settled on toward a peer's gateway (the smallest among its connections)",
            self.path_mtu.clone(),
        );
        r.register(
            "tunnel_open_failures",
            "Streams that could not be opened, by reason",
            self.open_failures.clone(),
        );
        r.register(
            "gateway_streams",
            "Streams the gateway forwarded, by source cluster",
            self.gateway_streams.clone(),
        );
        r.register(
            "gateway_active",
            "Streams the gateway is forwarding now",
            self.gateway_active.clone(),
        );
        r.register(
            "gateway_rejected",
            "Connections and streams the gateway refused, by reason",
            self.gateway_rejected.clone(),
        );
    }

    pub fn open_failure(&self, peer: &str, transport: &'static str, reason: Reason) {
        self.open_failures
            .get_or_create(&PeerFailureLabels {
                peer: peer.to_string(),
                transport,
                reason: reason.label(),
            })
            .inc();
    }

    pub fn rejected(&self, transport: &'static str, reason: Reason) {
        self.gateway_rejected
            .get_or_create(&RejectLabels {
                transport,
                reason: reason.label(),
            })
            .inc();
    }
}
