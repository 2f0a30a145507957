//! Names through a cluster's DNS server, asked the way a Pod's resolver asks: from the Pod's
//! address, through its search path, with Kubernetes' `ndots:5`. The local clusters run Pods
//! as processes that share the machine's `/etc/resolv.conf`, so the node agent hands each
//! Pod what kubelet would write there as environment instead: `SLUICE_DNS_SERVER` (the
//! cluster's DNS server), `SLUICE_DNS_SEARCH` (`<ns>.svc.cluster.local svc.cluster.local
//! cluster.local`), and `POD_IP`, the address queries come from (the DNS server answers a
//! Pod that Sluice placed by its logical cluster).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_net::client::{Client, ClientHandle};
use hickory_net::runtime::TokioRuntimeProvider;
use hickory_net::udp::UdpClientStream;
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{DNSClass, Name, RData, RecordType};

/// The environment variable naming a Pod's DNS server (`host:port`).
pub const ENV_SERVER: &str = "SLUICE_DNS_SERVER";
/// The environment variable holding a Pod's search path (space-separated domains).
pub const ENV_SEARCH: &str = "SLUICE_DNS_SEARCH";

/// Names with fewer dots than this are tried with each search domain first (Kubernetes'
/// `options ndots:5`).
const NDOTS: usize = 5;

/// Why a name did not resolve.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("{0:?} is not a DNS name: {1}")]
    BadName(String, String),
    #[error("{0:?} has no address (tried {1})")]
    NotFound(String, String),
    #[error("asking {0} for {1:?}: {2}")]
    Query(SocketAddr, String, String),
}

/// A resolver of one DNS server, search path and source address.
#[derive(Clone, Debug)]
pub struct Resolver {
    pub server: SocketAddr,
    pub search: Vec<String>,
    /// The address queries come from (a Pod's); `None`: any.
    pub source: Option<IpAddr>,
}

impl Resolver {
    /// A resolver of `server` with no search path, from any address.
    pub fn new(server: SocketAddr) -> Self {
        Self {
            server,
            search: Vec::new(),
            source: None,
        }
    }

    /// A Pod's resolver, from its environment; `None` when it names no DNS server.
    pub fn from_env() -> Option<Self> {
        let server = std::env::var(ENV_SERVER).ok()?.parse().ok()?;
        let search = std::env::var(ENV_SEARCH)
            .map(|s| s.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default();
        let source = std::env::var("POD_IP").ok().and_then(|ip| ip.parse().ok());
        Some(Self {
            server,
            search,
            source,
        })
    }

    /// The names `name` is tried as, in order: with each search domain first when it has
    /// fewer than `ndots` dots and does not end in one, then as it is.
    pub fn candidates(&self, name: &str) -> Vec<String> {
        if let Some(absolute) = name.strip_suffix('.') {
            return vec![absolute.to_string()];
        }
        let mut out = Vec::new();
        if name.matches('.').count() < NDOTS {
            out.extend(self.search.iter().map(|s| format!("{name}.{s}")));
        }
        out.push(name.to_string());
        out
    }

    /// The IPv4 addresses of `name`: the first candidate that has any.
    pub async fn lookup(&self, name: &str) -> Result<Vec<IpAddr>, ResolveError> {
        let candidates = self.candidates(name);
        for c in &candidates {
            let found = self.query_a(c).await?;
            if !found.is_empty() {
                return Ok(found);
            }
        }
        Err(ResolveError::NotFound(
            name.to_string(),
            candidates.join(", "),
        ))
    }

    /// One A query; no address for NXDOMAIN and for an empty answer.
    async fn query_a(&self, name: &str) -> Result<Vec<IpAddr>, ResolveError> {
        let fqdn = Name::from_ascii(format!("{name}."))
            .map_err(|e| ResolveError::BadName(name.to_string(), e.to_string()))?;
        let bind = self.source.map(|ip| SocketAddr::new(ip, 0));
        let stream = UdpClientStream::builder(self.server, TokioRuntimeProvider::new())
            .with_timeout(Some(Duration::from_secs(2)))
            .with_bind_addr(bind)
            .build();
        let (mut client, bg) = Client::<TokioRuntimeProvider>::from_sender(stream);
        let bg = tokio::spawn(bg);
        let r = client.query(fqdn, DNSClass::IN, RecordType::A).await;
        bg.abort();
        let failed = |e: String| ResolveError::Query(self.server, name.to_string(), e);
        let message = r.map_err(|e| failed(e.to_string()))?.into_message();
        match message.metadata.response_code {
            ResponseCode::NoError | ResponseCode::NXDomain => {}
            other => return Err(failed(other.to_string())),
        }
        Ok(message
            .answers
            .iter()
            .filter_map(|a| match &a.data {
                RData::A(a) => Some(IpAddr::V4(a.0)),
                _ => None,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_paths_follow_ndots() {
        let r = Resolver {
            search: vec!["shop.svc.cluster.local".into(), "svc.cluster.local".into()],
            ..Resolver::new(([127, 0, 0, 1], 53).into())
        };
        assert_eq!(
            r.candidates("web"),
            ["web.shop.svc.cluster.local", "web.svc.cluster.local", "web"]
        );
        assert_eq!(
            r.candidates("web.shop.svc.cluster.local."),
            ["web.shop.svc.cluster.local"]
        );
        assert_eq!(
            r.candidates("a.b.c.d.e.f"),
            ["a.b.c.d.e.f"],
            "5 dots or more: as it is only"
        );
    }
}
