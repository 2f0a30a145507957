//! The proxy's configuration model: services (a listener each) and their endpoints.
//!
//! The same model is written by hand (`sluice proxy --config FILE`), built from flags (the
//! quick mode), and — in cluster mode — filled from Services, ServiceImports and MCS
//! EndpointSlices.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// Weight of an endpoint that does not say.
pub const DEFAULT_WEIGHT: u32 = 100;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProxyConfig {
    #[serde(default)]
    pub services: Vec<ServiceConfig>,
    /// Tunnels to other clusters' gateways and this cluster's gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel: Option<TunnelConfig>,
    /// North-south: an HTTP listener routing by Host to services.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<IngressConfig>,
}

/// mTLS identity and trust, the inbound gateway, and the peers reached through tunnels.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TunnelConfig {
    /// PEM certificate chain whose leaf carries `spiffe://<clusterset>/cluster/<name>/...`.
    pub cert: String,
    /// PEM private key.
    pub key: String,
    /// PEM files of trusted roots (several, during a CA rotation).
    pub trust_bundle: Vec<String>,
    /// Where this cluster's gateway listens: TCP (mTLS, HTTP/2 CONNECT) and UDP (QUIC)
    /// on the same port, 15443 by convention.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<SocketAddr>,
    #[serde(default)]
    pub peers: Vec<PeerConfig>,
}

/// Another cluster's gateway.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PeerConfig {
    /// The cluster name, as in its SPIFFE id and in endpoints' `via`.
    pub cluster: String,
    pub address: SocketAddr,
    #[serde(default)]
    pub transport: TunnelTransport,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TunnelTransport {
    /// mTLS over TCP, one HTTP/2 CONNECT stream per proxied connection.
    #[default]
    H2,
    /// QUIC, one bidirectional stream per proxied connection.
    Quic,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IngressConfig {
    pub listen: SocketAddr,
    #[serde(default)]
    pub routes: Vec<IngressRoute>,
}

/// Requests whose Host (port ignored, case-insensitive) is `host` and whose path matches
/// `path` go to `service`, as a networking.k8s.io/v1 Ingress rule says: `host` empty for
/// any host, `*.example.com` for one more label; among the routes of a host an `Exact`
/// path beats a `Prefix`, and a longer prefix a shorter one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IngressRoute {
    /// Empty (or absent): any host.
    #[serde(default)]
    pub host: String,
    /// `/` (everything) when absent.
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub path_type: PathType,
    /// The `name` of a service in this configuration.
    pub service: String,
}

/// How an ingress route's path matches a request's (Kubernetes' `pathType`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum PathType {
    /// By whole path elements: `/shop` matches `/shop`, `/shop/` and `/shop/cart`, not
    /// `/shopping`. `ImplementationSpecific` is taken as this.
    #[default]
    #[serde(alias = "ImplementationSpecific")]
    Prefix,
    /// The path itself only.
    Exact,
}

/// How a listener's traffic is understood.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AppProtocol {
    /// Bytes, balanced per connection.
    Tcp,
    /// HTTP/1.1 or HTTP/2 (prior knowledge), balanced per request; upstream speaks
    /// the client's version.
    Http,
    /// HTTP/2 cleartext both ways (also gRPC).
    H2c,
    Grpc,
    /// Look at the first bytes: HTTP if they are, TCP otherwise.
    #[default]
    Detect,
}

impl AppProtocol {
    /// From a Service port's `appProtocol`, else its name (`http`, `h2c`, `grpc`,
    /// `http-*`/`grpc-*` prefixes), as Istio and Linkerd read them; detection otherwise.
    pub fn from_port(app_protocol: Option<&str>, name: Option<&str>) -> Self {
        let pick = |s: &str| -> Option<Self> {
            let s = s.to_ascii_lowercase();
            let s = s.rsplit('/').next().unwrap_or(&s).to_string();
            match s.split('-').next().unwrap_or("") {
                "http" | "http1" | "http2" => Some(Self::Http),
                "h2c" => Some(Self::H2c),
                "grpc" => Some(Self::Grpc),
                "tcp" => Some(Self::Tcp),
                _ => None,
            }
        };
        app_protocol
            .and_then(pick)
            .or_else(|| name.and_then(pick))
            .unwrap_or(Self::Detect)
    }
}

impl std::str::FromStr for AppProtocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "tcp" => Ok(Self::Tcp),
            "http" => Ok(Self::Http),
            "h2c" => Ok(Self::H2c),
            "grpc" => Ok(Self::Grpc),
            "detect" => Ok(Self::Detect),
            other => Err(format!(
                "unknown protocol {other:?}: tcp, http, h2c, grpc or detect"
            )),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceConfig {
    /// `namespace/name` or any label; metrics carry it.
    pub name: String,
    pub listen: SocketAddr,
    #[serde(default)]
    pub protocol: AppProtocol,
    #[serde(default)]
    pub endpoints: Vec<EndpointConfig>,
    #[serde(default)]
    pub timeouts: Timeouts,
    /// Retries allowed on top of requests, as a fraction of the last 10 s of requests (plus
    /// a reserve of 10/s), so that retries cannot multiply load during an outage.
    #[serde(default = "default_retry_ratio")]
    pub retry_ratio: f64,
    /// Other clusters may reach this service's local endpoints through the gateway.
    #[serde(default)]
    pub exported: bool,
    /// Which endpoints come first: any (by weight and load), or this cluster's own.
    #[serde(default)]
    pub locality: Locality,
}

/// Where a service's requests go first: a Service's `trafficDistribution`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Locality {
    /// Every endpoint by its weight and load (Kubernetes' default).
    #[default]
    Any,
    /// `PreferClose`: endpoints reached directly (this cluster's own) take the traffic;
    /// remote ones take it only when no local endpoint serves, or every local one is
    /// overloaded ([`crate::balance::SPILL_IN_FLIGHT`] in flight).
    PreferClose,
}

impl Locality {
    /// From a Service's or ServiceImport's `trafficDistribution` (`PreferSameZone` is the
    /// newer name of `PreferClose`; `PreferSameNode` is closer still, and one cluster is
    /// the closest this proxy tells apart).
    pub fn from_traffic_distribution(value: Option<&str>) -> Self {
        match value {
            Some("PreferClose" | "PreferSameZone" | "PreferSameNode") => Self::PreferClose,
            _ => Self::Any,
        }
    }
}

fn default_retry_ratio() -> f64 {
    0.2
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Timeouts {
    /// Connecting to an endpoint (then the next one is tried).
    #[serde(default = "default_connect_ms")]
    pub connect_ms: u64,
    /// A whole HTTP request, until the response headers.
    #[serde(default = "default_request_ms")]
    pub request_ms: u64,
    /// How long a request that reached no endpoint waits for one to serve (a stateful
    /// move's write pause, a rollout's gap) before it fails; 0 fails it at once.
    #[serde(default = "default_hold_ms")]
    pub hold_ms: u64,
}

fn default_connect_ms() -> u64 {
    1_000
}

fn default_request_ms() -> u64 {
    15_000
}

fn default_hold_ms() -> u64 {
    10_000
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect_ms: default_connect_ms(),
            request_ms: default_request_ms(),
            hold_ms: default_hold_ms(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EndpointConfig {
    pub address: SocketAddr,
    /// Relative share of new requests/connections; 0 sends none.
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// No new requests or connections; open ones finish.
    #[serde(default)]
    pub draining: bool,
    /// The source cluster, for metrics and the drain gate.
    #[serde(default)]
    pub cluster: String,
    /// Reach the endpoint through this peer cluster's gateway (a `tunnel.peers` entry);
    /// unset: directly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
}

fn default_weight() -> u32 {
    DEFAULT_WEIGHT
}

impl EndpointConfig {
    pub fn new(address: SocketAddr) -> Self {
        Self {
            address,
            weight: DEFAULT_WEIGHT,
            draining: false,
            cluster: String::new(),
            via: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {0}: {1}")]
    Read(String, std::io::Error),
    #[error("{0}: {1}")]
    Parse(String, String),
    #[error("services {0:?} and {1:?} both listen on {2}")]
    DuplicateListener(String, String, SocketAddr),
    #[error("service {0:?}: endpoint {1} is reached via {2:?}, which is not a tunnel peer")]
    UnknownPeer(String, SocketAddr, String),
    #[error("ingress route for {0:?} names service {1:?}, which is not configured")]
    UnknownRoute(String, String),
    #[error("ingress listens on {0}, as service {1:?} does")]
    IngressListener(SocketAddr, String),
}

impl ProxyConfig {
    pub fn from_yaml(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let config: ProxyConfig = serde_saphyr::from_str(text)
            .map_err(|e| ConfigError::Parse(origin.to_string(), e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    pub fn from_file(path: &std::path::Path) -> Result<Self, ConfigError> {
        let origin = path.display().to_string();
        let text =
            std::fs::read_to_string(path).map_err(|e| ConfigError::Read(origin.clone(), e))?;
        Self::from_yaml(&text, &origin)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let peers: HashSet<&str> = self
            .tunnel
            .iter()
            .flat_map(|t| t.peers.iter().map(|p| p.cluster.as_str()))
            .collect();
        validate_services(&self.services, |p| peers.contains(p))?;
        if let Some(ingress) = &self.ingress {
            if let Some(s) = self
                .services
                .iter()
                .find(|s| s.listen == ingress.listen && s.listen.port() != 0)
            {
                return Err(ConfigError::IngressListener(ingress.listen, s.name.clone()));
            }
            for r in &ingress.routes {
                if !self.services.iter().any(|s| s.name == r.service) {
                    return Err(ConfigError::UnknownRoute(r.host.clone(), r.service.clone()));
                }
            }
        }
        Ok(())
    }
}

/// The checks on services alone: no two listen on one fixed address, and every tunnelled
/// endpoint names a peer (`is_peer`). Shared by a whole configuration and by a change to
/// some of its services.
pub fn validate_services(
    services: &[ServiceConfig],
    is_peer: impl Fn(&str) -> bool,
) -> Result<(), ConfigError> {
    let mut listeners: HashMap<SocketAddr, &str> = HashMap::new();
    for a in services {
        if a.listen.port() != 0
            && let Some(b) = listeners.insert(a.listen, &a.name)
        {
            return Err(ConfigError::DuplicateListener(
                b.to_string(),
                a.name.clone(),
                a.listen,
            ));
        }
        for e in &a.endpoints {
            if let Some(via) = &e.via
                && !is_peer(via)
            {
                return Err(ConfigError::UnknownPeer(
                    a.name.clone(),
                    e.address,
                    via.clone(),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_from_port() {
        assert_eq!(
            AppProtocol::from_port(Some("grpc"), None),
            AppProtocol::Grpc
        );
        assert_eq!(
            AppProtocol::from_port(None, Some("http-web")),
            AppProtocol::Http
        );
        assert_eq!(
            AppProtocol::from_port(Some("kubernetes.io/h2c"), None),
            AppProtocol::H2c
        );
        assert_eq!(
            AppProtocol::from_port(None, Some("https")),
            AppProtocol::Detect
        );
        assert_eq!(
            AppProtocol::from_port(None, Some("db")),
            AppProtocol::Detect
        );
    }

    #[test]
    fn yaml_round_trip_and_errors() {
        let c = ProxyConfig::from_yaml(
            "services:\n- name: web\n  listen: 127.0.0.1:8080\n  protocol: http\n  endpoints:\n  - address: 127.0.0.1:9000\n    weight: 50\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.services[0].endpoints[0].weight, 50);
        assert!(ProxyConfig::from_yaml("services: [{name: x}]", "t").is_err());
        assert!(ProxyConfig::from_yaml("servics: []", "t").is_err());
        let dup =
            "services:\n- {name: a, listen: '127.0.0.1:1'}\n- {name: b, listen: '127.0.0.1:1'}\n";
        assert!(matches!(
            ProxyConfig::from_yaml(dup, "t"),
            Err(ConfigError::DuplicateListener(..))
        ));
    }
}
