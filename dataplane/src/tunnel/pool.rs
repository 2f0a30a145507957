//! Outbound tunnels to one peer cluster's gateway.
//!
//! A peer keeps up to [`CONNECTIONS_PER_PEER`] connections and puts at most
//! [`STREAMS_PER_CONNECTION`] streams on each, so one connection's head-of-line blocking
//! or loss costs a bounded share of traffic. A background probe keeps one connection open
//! even when idle; its keepalives mark the peer down within
//! [`KEEPALIVE`] + [`KEEPALIVE_TIMEOUT`] of the peer going silent, and the balancer then
//! stops choosing endpoints behind it.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use prometheus_client::metrics::gauge::Gauge;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::error::TunnelError;
use super::frame::{self, Verdict};
use super::h2_stream::{H2Stream, keepalive};
use super::identity::{Identity, TrustBundle, client_config};
use super::transport::{
    ALPN_H2, ALPN_QUIC, CONNECTION_WINDOW, CONNECTIONS_PER_PEER, HANDSHAKE_TIMEOUT, MAX_FRAME,
    SEND_BUFFER, STREAM_WINDOW, STREAMS_PER_CONNECTION, quic_transport, transport_label,
};
use crate::config::{PeerConfig, TunnelTransport};
use crate::metrics::{PeerLabels, TunnelMetrics};

/// How often the probe checks that a connection is open.
const PROBE_INTERVAL: Duration = Duration::from_millis(100);

enum Client {
    H2(tokio_rustls::TlsConnector),
    Quic(quinn::Endpoint, quinn::ClientConfig),
}

enum ConnKind {
    H2(h2::client::SendRequest<Bytes>),
    Quic(quinn::Connection),
}

struct Conn {
    kind: ConnKind,
    streams: AtomicU32,
    closed: AtomicBool,
}

impl Conn {
    fn alive(&self) -> bool {
        !self.closed.load(Ordering::Relaxed)
            && match &self.kind {
                // Set by the connection's task when it ends (`lost`).
                ConnKind::H2(_) => true,
                ConnKind::Quic(c) => c.close_reason().is_none(),
            }
    }

    /// The UDP payload size a QUIC connection's MTU discovery settled on.
    fn path_mtu(&self) -> Option<u16> {
        match &self.kind {
            ConnKind::H2(_) => None,
            ConnKind::Quic(c) => Some(c.stats().path.current_mtu),
        }
    }
}

/// Holds a stream's place on its connection.
pub struct StreamGuard(Arc<Conn>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Tunnels to one peer cluster's gateway.
pub struct Peer {
    pub cluster: String,
    pub address: SocketAddr,
    pub transport: TunnelTransport,
    client: Client,
    conns: tokio::sync::Mutex<Vec<Arc<Conn>>>,
    up: AtomicBool,
    metrics: TunnelMetrics,
    labels: PeerLabels,
    open_conns: Gauge,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer")
            .field("cluster", &self.cluster)
            .field("address", &self.address)
            .field("transport", &self.transport)
            .field("up", &self.is_up())
            .finish()
    }
}

impl Peer {
    /// The peer and its probe (which ends when the peer is dropped).
    pub fn new(
        c: &PeerConfig,
        identity: &Identity,
        bundle: &TrustBundle,
        metrics: TunnelMetrics,
    ) -> Result<Arc<Self>, TunnelError> {
        let client = match c.transport {
            TunnelTransport::H2 => {
                let tls = client_config(identity, bundle, &c.cluster, ALPN_H2)?;
                Client::H2(tokio_rustls::TlsConnector::from(Arc::new(tls)))
            }
            TunnelTransport::Quic => {
                let tls = client_config(identity, bundle, &c.cluster, ALPN_QUIC)?;
                let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
                    .map_err(|e| TunnelError::Handshake(c.address, e.to_string()))?;
                let mut config = quinn::ClientConfig::new(Arc::new(crypto));
                config.transport_config(Arc::new(quic_transport()));
                let local: SocketAddr = if c.address.is_ipv4() {
                    ([0, 0, 0, 0], 0).into()
                } else {
                    (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
                };
                let endpoint = quinn::Endpoint::client(local)
                    .map_err(|e| TunnelError::Connect(c.address, e))?;
                Client::Quic(endpoint, config)
            }
        };
        let labels = PeerLabels {
            peer: c.cluster.clone(),
            transport: transport_label(c.transport),
        };
        let open_conns = metrics.connections.get_or_create(&labels).clone();
        let peer = Arc::new(Self {
            cluster: c.cluster.clone(),
            address: c.address,
            transport: c.transport,
            client,
            conns: tokio::sync::Mutex::new(Vec::new()),
            up: AtomicBool::new(false),
            metrics,
            labels,
            open_conns,
        });
        tokio::spawn(probe(Arc::downgrade(&peer)));
        Ok(peer)
    }

    /// Whether the peer's gateway answered its last probe or keepalive.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    pub fn connections(&self) -> usize {
        self.conns.try_lock().map(|c| c.len()).unwrap_or(0)
    }

    fn set_up(&self, up: bool) {
        if self.up.swap(up, Ordering::Relaxed) != up {
            tracing::info!(peer = %self.cluster, gateway = %self.address, up, "tunnel peer state");
        }
        self.metrics
            .peer_up
            .get_or_create(&self.labels)
            .set(i64::from(up));
    }

    /// Open a stream to `target` (an endpoint in the peer cluster). The gateway's verdict
    /// is awaited, so a refused stream is an error here, before any byte of the proxied
    /// connection was sent: callers retry it elsewhere.
    pub async fn open(self: &Arc<Self>, target: SocketAddr) -> Result<TunnelStream, TunnelError> {
        let result = self.open_inner(target).await;
        match &result {
            Ok(_) => {
                self.metrics.streams.get_or_create(&self.labels).inc();
            }
            Err(e) => self
                .metrics
                .open_failure(&self.cluster, self.labels.transport, e.reason()),
        }
        result
    }

    async fn open_inner(self: &Arc<Self>, target: SocketAddr) -> Result<TunnelStream, TunnelError> {
        let conn = self.connection().await?;
        conn.streams.fetch_add(1, Ordering::Relaxed);
        let guard = StreamGuard(conn.clone());
        let gateway = self.address;
        let io = match &conn.kind {
            ConnKind::H2(send) => {
                let send = send.clone();
                let opened = tokio::time::timeout(HANDSHAKE_TIMEOUT, async {
                    let proto = |e: h2::Error| TunnelError::Protocol(gateway, e.to_string());
                    let mut send = send.ready().await.map_err(proto)?;
                    let req = Request::builder()
                        .method(Method::CONNECT)
                        .uri(target.to_string())
                        .body(())
                        .map_err(|e| TunnelError::Protocol(gateway, e.to_string()))?;
                    let (response, stream) = send.send_request(req, false).map_err(proto)?;
                    let response = response.await.map_err(proto)?;
                    match response.status() {
                        StatusCode::OK => Ok(H2Stream::new(stream, response.into_body())),
                        StatusCode::FORBIDDEN => Err(TunnelError::NotExported(gateway, target)),
                        s => Err(TunnelError::Unreachable(gateway, target, s.to_string())),
                    }
                })
                .await
                .map_err(|_| TunnelError::Timeout(gateway))??;
                StreamIo::H2(opened)
            }
            ConnKind::Quic(c) => {
                let opened = tokio::time::timeout(HANDSHAKE_TIMEOUT, async {
                    let proto =
                        |e: &dyn std::fmt::Display| TunnelError::Protocol(gateway, e.to_string());
                    let (mut send, mut recv) = c.open_bi().await.map_err(|e| proto(&e))?;
                    frame::write_request(&mut send, target)
                        .await
                        .map_err(|e| proto(&e))?;
                    let (verdict, msg) = frame::read_verdict(&mut recv)
                        .await
                        .map_err(|e| proto(&e))?;
                    match verdict {
                        Verdict::Connected => Ok(tokio::io::join(recv, send)),
                        Verdict::NotExported => Err(TunnelError::NotExported(gateway, target)),
                        Verdict::Unreachable => Err(TunnelError::Unreachable(gateway, target, msg)),
                        Verdict::BadRequest => Err(TunnelError::Protocol(gateway, msg)),
                    }
                })
                .await
                .map_err(|_| TunnelError::Timeout(gateway))??;
                StreamIo::Quic(opened)
            }
        };
        Ok(TunnelStream { io, _guard: guard })
    }

    /// A connection with room for a stream: the least loaded open one under the cap, a
    /// new one while under the connection limit, else the least loaded.
    async fn connection(self: &Arc<Self>) -> Result<Arc<Conn>, TunnelError> {
        let mut conns = self.conns.lock().await;
        self.prune(&mut conns);
        let least = conns
            .iter()
            .min_by_key(|c| c.streams.load(Ordering::Relaxed))
            .cloned();
        if let Some(c) = &least
            && c.streams.load(Ordering::Relaxed) < STREAMS_PER_CONNECTION
        {
            return Ok(c.clone());
        }
        if conns.len() < CONNECTIONS_PER_PEER {
            match self.dial().await {
                Ok(c) => {
                    conns.push(c.clone());
                    self.open_conns.set(conns.len() as i64);
                    self.set_up(true);
                    return Ok(c);
                }
                Err(e) if least.is_none() => {
                    self.set_up(false);
                    return Err(e);
                }
                Err(e) => {
                    tracing::debug!(peer = %self.cluster, error = %e, "extra tunnel connection failed")
                }
            }
        }
        least.ok_or(TunnelError::Timeout(self.address))
    }

    fn prune(&self, conns: &mut Vec<Arc<Conn>>) {
        let before = conns.len();
        conns.retain(|c| c.alive());
        if conns.len() != before {
            self.open_conns.set(conns.len() as i64);
        }
    }

    async fn dial(self: &Arc<Self>) -> Result<Arc<Conn>, TunnelError> {
        let addr = self.address;
        let kind = match &self.client {
            Client::H2(connector) => {
                let tcp = tokio::time::timeout(HANDSHAKE_TIMEOUT, TcpStream::connect(addr))
                    .await
                    .map_err(|_| TunnelError::Timeout(addr))?
                    .map_err(|e| TunnelError::Connect(addr, e))?;
                let _ = tcp.set_nodelay(true);
                let name = ServerName::IpAddress(addr.ip().into());
                let tls = tokio::time::timeout(HANDSHAKE_TIMEOUT, connector.connect(name, tcp))
                    .await
                    .map_err(|_| TunnelError::Timeout(addr))?
                    .map_err(|e| TunnelError::Handshake(addr, e.to_string()))?;
                let handshake = h2::client::Builder::new()
                    .initial_window_size(STREAM_WINDOW)
                    .initial_connection_window_size(CONNECTION_WINDOW)
                    .max_send_buffer_size(SEND_BUFFER)
                    .max_frame_size(MAX_FRAME)
                    .enable_push(false)
                    .handshake::<_, Bytes>(tls);
                let (send, mut conn) = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake)
                    .await
                    .map_err(|_| TunnelError::Timeout(addr))?
                    .map_err(|e| TunnelError::Handshake(addr, e.to_string()))?;
                let pings = conn.ping_pong();
                let c = Arc::new(Conn {
                    kind: ConnKind::H2(send),
                    streams: AtomicU32::new(0),
                    closed: AtomicBool::new(false),
                });
                let (weak, watched) = (Arc::downgrade(self), Arc::downgrade(&c));
                tokio::spawn(async move {
                    let ended = match pings {
                        Some(pings) => tokio::select! {
                            ended = &mut conn => ended.err().map(|e| e.to_string()),
                            silent = keepalive(pings) => Some(silent.to_string()),
                        },
                        None => conn.await.err().map(|e| e.to_string()),
                    };
                    if let Some(error) = ended {
                        tracing::debug!(gateway = %addr, %error, "tunnel connection ended");
                    }
                    lost(weak, watched);
                });
                return Ok(c);
            }
            Client::Quic(endpoint, config) => {
                let connecting = endpoint
                    .connect_with(config.clone(), addr, "gateway.sluice")
                    .map_err(|e| TunnelError::Handshake(addr, e.to_string()))?;
                let conn = tokio::time::timeout(HANDSHAKE_TIMEOUT, connecting)
                    .await
                    .map_err(|_| TunnelError::Timeout(addr))?
                    .map_err(|e| TunnelError::Handshake(addr, e.to_string()))?;
                ConnKind::Quic(conn)
            }
        };
        let c = Arc::new(Conn {
            kind,
            streams: AtomicU32::new(0),
            closed: AtomicBool::new(false),
        });
        if let ConnKind::Quic(q) = &c.kind {
            let q = q.clone();
            let (weak, watched) = (Arc::downgrade(self), Arc::downgrade(&c));
            tokio::spawn(async move {
                let reason = q.closed().await;
                tracing::debug!(gateway = %addr, %reason, "tunnel connection ended");
                lost(weak, watched);
            });
        }
        Ok(c)
    }
}

/// A connection ended: the peer is down if it was the last one.
fn lost(peer: Weak<Peer>, conn: Weak<Conn>) {
    if let Some(c) = conn.upgrade() {
        c.closed.store(true, Ordering::Relaxed);
    }
    let Some(peer) = peer.upgrade() else {
        return;
    };
    if let Ok(mut conns) = peer.conns.try_lock() {
        peer.prune(&mut conns);
        if conns.is_empty() {
            peer.set_up(false);
        }
    } else {
        // The pool is busy dialing; the probe settles the state on its next round.
        peer.set_up(false);
    }
}

/// Keep one connection open so a silent peer is noticed while no traffic flows, and
/// redial a peer that is down.
async fn probe(peer: Weak<Peer>) {
    loop {
        {
            let Some(p) = peer.upgrade() else { return };
            let mut conns = p.conns.lock().await;
            p.prune(&mut conns);
            if conns.is_empty() {
                match p.dial().await {
                    Ok(c) => {
                        conns.push(c);
                        p.open_conns.set(conns.len() as i64);
                        p.set_up(true);
                    }
                    Err(e) => {
                        tracing::debug!(peer = %p.cluster, error = %e, "probe failed");
                        p.set_up(false);
                    }
                }
            } else {
                p.set_up(true);
            }
            if let Some(mtu) = conns.iter().filter_map(|c| c.path_mtu()).min() {
                p.metrics
                    .path_mtu
                    .get_or_create(&p.labels)
                    .set(i64::from(mtu));
            }
        }
        tokio::time::sleep(PROBE_INTERVAL).await;
    }
}

enum StreamIo {
    H2(H2Stream),
    Quic(tokio::io::Join<quinn::RecvStream, quinn::SendStream>),
}

/// One proxied connection through a peer's gateway; counts against its tunnel
/// connection's stream cap until dropped.
pub struct TunnelStream {
    io: StreamIo,
    _guard: StreamGuard,
}

/// Copy buffer per direction for a QUIC stream's relay.
const RELAY_BUFFER: usize = 64 * 1024;

impl TunnelStream {
    /// Carry `socket`'s connection through this stream both ways until both have ended:
    /// over h2 without a copy in between ([`super::h2_stream::relay`]). Returns the bytes
    /// carried (to the socket, from it).
    pub async fn relay(self, mut socket: TcpStream) -> std::io::Result<(u64, u64)> {
        let _guard = self._guard;
        match self.io {
            StreamIo::H2(h2) => {
                let (send, recv) = h2.into_parts();
                super::h2_stream::relay(send, recv, socket).await
            }
            StreamIo::Quic(mut quic) => {
                let (from, to) = tokio::io::copy_bidirectional_with_sizes(
                    &mut socket,
                    &mut quic,
                    RELAY_BUFFER,
                    RELAY_BUFFER,
                )
                .await?;
                Ok((to, from))
            }
        }
    }
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
