//! Cross-cluster tunnels: this cluster's east-west gateway (inbound) and pooled tunnels
//! to other clusters' gateways (outbound).
//!
//! Two transports carry the same thing, one proxied connection per stream:
//! - `h2`: mTLS over TCP, one HTTP/2 CONNECT stream per connection (as Istio's HBONE);
//! - `quic`: QUIC (quinn), one bidirectional stream per connection, opened with the
//!   preamble in [`frame`].
//!
//! Both ends verify each other against the trust bundle and SPIFFE ids ([`identity`]).
//! The gateway forwards only to endpoints of exported services ([`gateway`]); the client
//! side keeps a few connections per peer with a cap on streams each, and keepalives that
//! notice a dead peer within [`KEEPALIVE`] + [`KEEPALIVE_TIMEOUT`] ([`pool`]).

pub mod ca;
pub mod frame;
pub mod gateway;
pub mod identity;
pub mod pool;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::config::{PeerConfig, TunnelConfig, TunnelTransport};
use crate::metrics::TunnelMetrics;
use identity::{Identity, IdentityError, TrustBundle};

pub const ALPN_H2: &[u8] = b"h2";
pub const ALPN_QUIC: &[u8] = b"sluice-tunnel/1";
/// Streams one tunnel connection carries at most; more open another connection.
pub const STREAMS_PER_CONNECTION: u32 = 100;
/// Connections kept to one peer at most.
pub const CONNECTIONS_PER_PEER: usize = 4;
/// Idle connections are probed this often (HTTP/2 PING, QUIC PING)...
pub const KEEPALIVE: Duration = Duration::from_millis(200);
/// ...and declared dead when no answer comes within this.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_millis(400);
/// TCP connect plus TLS or QUIC handshake, and a stream's verdict.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);
/// Flow-control windows: large enough for bulk transfers at loopback speed.
const STREAM_WINDOW: u32 = 4 * 1024 * 1024;
const CONNECTION_WINDOW: u32 = 16 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    #[error("connecting to gateway {0}: {1}")]
    Connect(SocketAddr, std::io::Error),
    #[error("handshake with gateway {0}: {1}")]
    Handshake(SocketAddr, String),
    #[error("gateway {0} refused {1}: not an endpoint of an exported service")]
    NotExported(SocketAddr, SocketAddr),
    #[error("gateway {0} could not reach {1}: {2}")]
    Unreachable(SocketAddr, SocketAddr, String),
    #[error("tunnel to gateway {0}: {1}")]
    Protocol(SocketAddr, String),
    #[error("gateway {0} did not answer within {HANDSHAKE_TIMEOUT:?}")]
    Timeout(SocketAddr),
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error("binding the gateway on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
}

impl TunnelError {
    /// The metrics label.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Connect(..) => "connect",
            Self::Handshake(..) => "handshake",
            Self::NotExported(..) => "not_exported",
            Self::Unreachable(..) => "unreachable",
            Self::Protocol(..) => "protocol",
            Self::Timeout(_) => "timeout",
            Self::Identity(_) | Self::Bind(..) => "config",
        }
    }
}

impl From<TunnelError> for std::io::Error {
    fn from(e: TunnelError) -> Self {
        let kind = match e {
            TunnelError::Timeout(_) => std::io::ErrorKind::TimedOut,
            _ => std::io::ErrorKind::ConnectionRefused,
        };
        std::io::Error::new(kind, e)
    }
}

enum StreamIo {
    H2(TokioIo<Upgraded>),
    Quic(tokio::io::Join<quinn::RecvStream, quinn::SendStream>),
}

/// One proxied connection through a peer's gateway; counts against its tunnel
/// connection's stream cap until dropped.
pub struct TunnelStream {
    io: StreamIo,
    _guard: pool::StreamGuard,
}

impl AsyncRead for TunnelStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match &mut self.get_mut().io {
            StreamIo::H2(io) => Pin::new(io).poll_read(cx, buf),
            StreamIo::Quic(io) => Pin::new(io).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for TunnelStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match &mut self.get_mut().io {
            StreamIo::H2(io) => Pin::new(io).poll_write(cx, buf),
            StreamIo::Quic(io) => Pin::new(io).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match &mut self.get_mut().io {
            StreamIo::H2(io) => Pin::new(io).poll_flush(cx),
            StreamIo::Quic(io) => Pin::new(io).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match &mut self.get_mut().io {
            StreamIo::H2(io) => Pin::new(io).poll_shutdown(cx),
            StreamIo::Quic(io) => Pin::new(io).poll_shutdown(cx),
        }
    }
}

/// Endpoints the gateway may forward to, counted by how many exported listeners name each
/// (the same endpoint can back a ClusterIP and a clusterset VIP), so that a change to one
/// service adjusts only its own endpoints.
#[derive(Clone, Default)]
pub struct Allowlist(Arc<RwLock<HashMap<SocketAddr, u32>>>);

impl Allowlist {
    /// Replace the whole list.
    pub fn set(&self, addrs: impl IntoIterator<Item = SocketAddr>) {
        let mut counts = HashMap::new();
        for a in addrs {
            *counts.entry(a).or_insert(0) += 1;
        }
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = counts;
    }

    /// Count `added` in and `removed` out (each once per listener naming it).
    pub fn adjust(
        &self,
        removed: impl IntoIterator<Item = SocketAddr>,
        added: impl IntoIterator<Item = SocketAddr>,
    ) {
        let mut w = self.0.write().unwrap_or_else(|p| p.into_inner());
        for a in added {
            *w.entry(a).or_insert(0) += 1;
        }
        for a in removed {
            if let Some(n) = w.get_mut(&a) {
                *n -= 1;
                if *n == 0 {
                    w.remove(&a);
                }
            }
        }
    }

    pub fn contains(&self, addr: &SocketAddr) -> bool {
        self.0
            .read()
            .map(|s| s.contains_key(addr))
            .unwrap_or_else(|p| p.into_inner().contains_key(addr))
    }
}

/// The loaded identity and trust bundle, and the files they came from: paths with size
/// and modification time, so a reload (in cluster mode, every endpoint change) costs a
/// `stat` per file, and only rotated files are read again.
struct Loaded {
    files: Vec<FileStamp>,
    identity: Identity,
    bundle: TrustBundle,
}

#[derive(PartialEq)]
struct FileStamp {
    path: String,
    len: u64,
    modified: Option<std::time::SystemTime>,
}

fn tls_files(c: &TunnelConfig) -> impl Iterator<Item = &String> {
    [&c.cert, &c.key].into_iter().chain(c.trust_bundle.iter())
}

fn stamps(c: &TunnelConfig) -> Result<Vec<FileStamp>, IdentityError> {
    tls_files(c)
        .map(|p| {
            let m = std::fs::metadata(p).map_err(|e| IdentityError::Read(p.clone(), e))?;
            Ok(FileStamp {
                path: p.clone(),
                len: m.len(),
                modified: m.modified().ok(),
            })
        })
        .collect()
}

fn load(c: &TunnelConfig) -> Result<(Identity, TrustBundle), IdentityError> {
    Ok((
        Identity::from_files(&c.cert, &c.key)?,
        TrustBundle::from_files(&c.trust_bundle)?,
    ))
}

#[derive(Default)]
struct State {
    loaded: Option<Loaded>,
    peers: HashMap<String, (PeerConfig, Arc<pool::Peer>)>,
    gateway: Option<gateway::Gateway>,
}

/// The proxy's tunnels: the gateway and the peers. A reload changes only what changed:
/// new certificate files reload the gateway's TLS in place (same sockets) and renew every
/// peer; a peer whose entry is unchanged keeps its connections.
#[derive(Default)]
pub struct Tunnels {
    pub metrics: TunnelMetrics,
    pub allow: Allowlist,
    state: Mutex<State>,
}

impl Tunnels {
    /// Returns whether the set of peer handles changed (balancers holding peers must
    /// then be updated even where their endpoints did not change).
    pub fn apply(&self, config: Option<&TunnelConfig>) -> Result<bool, TunnelError> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let Some(config) = config else {
            if let Some(g) = state.gateway.take() {
                g.stop();
            }
            let had_peers = !state.peers.is_empty();
            *state = State::default();
            return Ok(had_peers);
        };
        let files = stamps(config)?;
        let (identity, bundle, same_identity) = match &state.loaded {
            Some(l) if l.files == files => (l.identity.clone(), l.bundle.clone(), true),
            _ => {
                let (identity, bundle) = load(config)?;
                (identity, bundle, false)
            }
        };
        // Build everything new before changing anything, so an error leaves the old.
        let mut peers = HashMap::new();
        let mut replaced = state.peers.len() != config.peers.len();
        for p in &config.peers {
            let kept = state
                .peers
                .get(&p.cluster)
                .filter(|(old, _)| same_identity && old == p)
                .map(|(_, peer)| peer.clone());
            let peer = match kept {
                Some(peer) => peer,
                None => {
                    replaced = true;
                    pool::Peer::new(p, &identity, &bundle, self.metrics.clone())?
                }
            };
            peers.insert(p.cluster.clone(), (p.clone(), peer));
        }
        match (config.gateway, state.gateway.as_ref()) {
            (None, _) => {
                if let Some(g) = state.gateway.take() {
                    g.stop();
                }
            }
            (Some(listen), Some(g)) if g.listen == listen => {
                if !same_identity {
                    g.reload(&identity, &bundle)?;
                }
            }
            (Some(listen), _) => {
                let fresh = gateway::Gateway::start(
                    listen,
                    &identity,
                    &bundle,
                    self.allow.clone(),
                    self.metrics.clone(),
                )?;
                if let Some(old) = state.gateway.replace(fresh) {
                    old.stop();
                }
            }
        }
        state.peers = peers;
        state.loaded = Some(Loaded {
            files,
            identity,
            bundle,
        });
        Ok(replaced)
    }

    pub fn peer(&self, cluster: &str) -> Option<Arc<pool::Peer>> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.peers.get(cluster).map(|(_, p)| p.clone())
    }

    /// Where the gateway listens (TCP and UDP), once bound.
    pub fn gateway_addr(&self) -> Option<SocketAddr> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.gateway.as_ref().map(|g| g.addr)
    }

    /// Peers and whether each answers, for `/config_dump`.
    pub fn dump(&self) -> serde_json::Value {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let peers: Vec<serde_json::Value> = state
            .peers
            .values()
            .map(|(_, p)| {
                serde_json::json!({
                    "cluster": p.cluster, "address": p.address, "transport": p.transport,
                    "up": p.is_up(), "connections": p.connections(),
                })
            })
            .collect();
        serde_json::json!({
            "identity": state.loaded.as_ref().map(|l| l.identity.id.to_string()),
            "trustRoots": state.loaded.as_ref().map(|l| l.bundle.len()),
            "gateway": state.gateway.as_ref().map(|g| g.addr),
            "peers": peers,
        })
    }
}

/// Transport names as metrics label them.
pub fn transport_label(t: TunnelTransport) -> &'static str {
    match t {
        TunnelTransport::H2 => "h2",
        TunnelTransport::Quic => "quic",
    }
}
