//! The east-west gateway: accepts tunnels from other clusters' proxies on one port, TCP
//! (mTLS, HTTP/2 CONNECT) and UDP (QUIC), and forwards each stream to the endpoint it
//! names — only if that is an endpoint of an exported service.
//!
//! Anything else is refused with a reason and counted: a peer that fails the handshake
//! (untrusted, expired, not TLS at all), a method other than CONNECT, a target that is not
//! exported or does not answer. The gateway keeps serving whatever one client sends.

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use h2::RecvStream;
use h2::server::SendResponse;
use http::{Method, Request, Response};
use rustls::pki_types::CertificateDer;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tracing::Instrument;

use super::allow::Allowlist;
use super::error::TunnelError;
use super::frame::{self, Verdict};
use super::h2_stream::{keepalive, relay};
use super::identity::{Identity, SpiffeId, TrustBundle, server_config};
use super::transport::{
    ALPN_H2, ALPN_QUIC, CONNECTION_WINDOW, HANDSHAKE_TIMEOUT, MAX_FRAME, SEND_BUFFER,
    STREAM_WINDOW, STREAMS_PER_CONNECTION, quic_endpoint, quic_transport,
};
use crate::metrics::{GatewayLabels, TunnelMetrics};
use crate::reason::Reason;

/// Copy buffer per direction.
const BUFFER: usize = 64 * 1024;

pub struct Gateway {
    /// The configured address (port 0 stays 0), to tell a move from a reload.
    pub listen: SocketAddr,
    pub addr: SocketAddr,
    stop: watch::Sender<bool>,
    quic: quinn::Endpoint,
    tls: Arc<RwLock<tokio_rustls::TlsAcceptor>>,
}

type Configs = (Arc<rustls::ServerConfig>, quinn::ServerConfig);

fn configs(
    listen: SocketAddr,
    identity: &Identity,
    bundle: &TrustBundle,
) -> Result<Configs, TunnelError> {
    let tls = Arc::new(server_config(identity, bundle, ALPN_H2)?);
    let quic_tls = server_config(identity, bundle, ALPN_QUIC)?;
    let quic_crypto = quinn::crypto::rustls::QuicServerConfig::try_from(quic_tls)
        .map_err(|e| TunnelError::Handshake(listen, e.to_string()))?;
    let mut quic_config = quinn::ServerConfig::with_crypto(Arc::new(quic_crypto));
    quic_config.transport_config(Arc::new(quic_transport()));
    Ok((tls, quic_config))
}

impl Gateway {
    /// Bind TCP and UDP on `listen` (port 0: the same free port for both).
    pub fn start(
        listen: SocketAddr,
        identity: &Identity,
        bundle: &TrustBundle,
        allow: Allowlist,
        metrics: TunnelMetrics,
    ) -> Result<Self, TunnelError> {
        let (tls, quic_config) = configs(listen, identity, bundle)?;
        let (tcp, quic) = bind_both(listen, quic_config)?;
        let addr = tcp.local_addr().map_err(|e| TunnelError::Bind(listen, e))?;
        let (stop, stopped) = watch::channel(false);
        let tls = Arc::new(RwLock::new(tokio_rustls::TlsAcceptor::from(tls)));
        accept_tcp(
            tcp,
            tls.clone(),
            allow.clone(),
            metrics.clone(),
            stopped.clone(),
        );
        tokio::spawn(accept_quic(quic.clone(), allow, metrics, stopped));
        tracing::info!(%addr, "gateway listening (TCP mTLS HTTP/2 CONNECT, QUIC)");
        Ok(Self {
            listen,
            addr,
            stop,
            quic,
            tls,
        })
    }

    /// New identity or trust bundle, same sockets: new handshakes use them, open tunnels
    /// keep theirs.
    pub fn reload(&self, identity: &Identity, bundle: &TrustBundle) -> Result<(), TunnelError> {
        let (tls, quic_config) = configs(self.listen, identity, bundle)?;
        *self.tls.write().unwrap_or_else(|p| p.into_inner()) = tokio_rustls::TlsAcceptor::from(tls);
        self.quic.set_server_config(Some(quic_config));
        Ok(())
    }

    /// Stop accepting; tunnels already open run on.
    pub fn stop(&self) {
        let _ = self.stop.send(true);
        // New QUIC connections are refused; existing ones keep their streams.
        self.quic.set_server_config(None);
    }
}

fn bind_both(
    listen: SocketAddr,
    quic: quinn::ServerConfig,
) -> Result<(TcpListener, quinn::Endpoint), TunnelError> {
    let bind = |e| TunnelError::Bind(listen, e);
    // With port 0 the UDP socket takes the TCP listener's port, which another process
    // may hold on UDP: try a few.
    let mut last = None;
    for _ in 0..8 {
        let std = std::net::TcpListener::bind(listen).map_err(bind)?;
        std.set_nonblocking(true).map_err(bind)?;
        let addr = std.local_addr().map_err(bind)?;
        let endpoint =
            std::net::UdpSocket::bind(addr).and_then(|udp| quic_endpoint(udp, Some(quic.clone())));
        match endpoint {
            Ok(ep) => return Ok((TcpListener::from_std(std).map_err(bind)?, ep)),
            Err(e) if listen.port() == 0 => last = Some(e),
            Err(e) => return Err(bind(e)),
        }
    }
    Err(bind(last.unwrap_or_else(|| {
        std::io::Error::other("no port free for both TCP and UDP")
    })))
}

fn source_cluster(certs: Option<&[CertificateDer<'_>]>) -> String {
    certs
        .and_then(|c| c.first())
        .and_then(|c| SpiffeId::of_certificate(c).ok())
        .map(|id| id.cluster().to_string())
        .unwrap_or_default()
}

fn accept_tcp(
    listener: TcpListener,
    tls: Arc<RwLock<tokio_rustls::TlsAcceptor>>,
    allow: Allowlist,
    metrics: TunnelMetrics,
    stopped: watch::Receiver<bool>,
) {
    crate::accept::spawn_accept(listener, stopped, "gateway", move |stream, peer| {
        let acceptor = tls.read().unwrap_or_else(|p| p.into_inner()).clone();
        tokio::spawn(tcp_connection(
            stream,
            peer,
            acceptor,
            allow.clone(),
            metrics.clone(),
        ));
    });
}

/// One tunnel connection: the mTLS handshake, then HTTP/2 with a CONNECT per stream.
async fn tcp_connection(
    stream: TcpStream,
    peer: SocketAddr,
    acceptor: tokio_rustls::TlsAcceptor,
    allow: Allowlist,
    metrics: TunnelMetrics,
) {
    let _ = stream.set_nodelay(true);
    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            tracing::info!(%peer, error = %e, "gateway: TLS handshake refused");
            metrics.rejected("h2", Reason::Handshake);
            return;
        }
        Err(_) => {
            tracing::info!(%peer, "gateway: TLS handshake timed out");
            metrics.rejected("h2", Reason::Handshake);
            return;
        }
    };
    let source = source_cluster(tls.get_ref().1.peer_certificates());
    let span = tracing::info_span!("gateway_connection", %peer, source_cluster = %source, transport = "h2");
    let served = async {
        let handshake = h2::server::Builder::new()
            .max_concurrent_streams(STREAMS_PER_CONNECTION)
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_pending_accept_reset_streams(64)
            .max_send_buffer_size(SEND_BUFFER)
            .max_frame_size(MAX_FRAME)
            .handshake::<_, Bytes>(tls);
        let mut conn = match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return Some(e.to_string()),
            Err(_) => return Some("no HTTP/2 preface in time".to_string()),
        };
        let Some(pings) = conn.ping_pong() else {
            return Some("no PING handle".to_string());
        };
        let silent = keepalive(pings);
        tokio::pin!(silent);
        loop {
            let (req, respond) = tokio::select! {
                accepted = conn.accept() => match accepted {
                    Some(Ok(stream)) => stream,
                    Some(Err(e)) => return Some(e.to_string()),
                    None => return None,
                },
                silent = &mut silent => return Some(silent.to_string()),
            };
            let (allow, metrics, source) = (allow.clone(), metrics.clone(), source.clone());
            tokio::spawn(
                connect(req, respond, allow, metrics, source).instrument(tracing::Span::current()),
            );
        }
    };
    if let Some(error) = served.instrument(span).await {
        tracing::debug!(%peer, %error, "gateway connection ended");
    }
}

/// Answer a stream with `reason`'s status, its label in `x-sluice-error` and `detail` as
/// the body.
fn refuse(mut respond: SendResponse<Bytes>, reason: Reason, detail: String) {
    let mut r = Response::new(());
    *r.status_mut() = reason.status();
    r.headers_mut().insert(
        "x-sluice-error",
        http::HeaderValue::from_static(reason.label()),
    );
    if let Ok(mut body) = respond.send_response(r, false) {
        let _ = body.send_data(Bytes::from(detail), true);
    }
}

/// Decide a stream: the target must be exported and must accept a connection.
async fn admit(
    target: SocketAddr,
    allow: &Allowlist,
    metrics: &TunnelMetrics,
    transport: &'static str,
) -> Result<TcpStream, (Verdict, String)> {
    if !allow.contains(&target) {
        metrics.rejected(transport, Reason::NotExported);
        return Err((
            Verdict::NotExported,
            format!("{target} is not an endpoint of an exported service"),
        ));
    }
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, TcpStream::connect(target)).await {
        Ok(Ok(s)) => {
            let _ = s.set_nodelay(true);
            Ok(s)
        }
        Ok(Err(e)) => {
            metrics.rejected(transport, Reason::Unreachable);
            Err((Verdict::Unreachable, format!("{target}: {e}")))
        }
        Err(_) => {
            metrics.rejected(transport, Reason::Unreachable);
            Err((Verdict::Unreachable, format!("{target}: connect timed out")))
        }
    }
}

/// One CONNECT stream: decide it, then relay it to its endpoint.
async fn connect(
    req: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    allow: Allowlist,
    metrics: TunnelMetrics,
    source: String,
) {
    if req.method() != Method::CONNECT {
        metrics.rejected("h2", Reason::Method);
        return refuse(
            respond,
            Reason::Method,
            "the gateway accepts only CONNECT".into(),
        );
    }
    let Some(target) = req
        .uri()
        .authority()
        .and_then(|a| a.as_str().parse::<SocketAddr>().ok())
    else {
        metrics.rejected("h2", Reason::BadRequest);
        return refuse(
            respond,
            Reason::BadRequest,
            format!(
                "CONNECT target {:?} is not an ip:port",
                req.uri().to_string()
            ),
        );
    };
    let upstream = match admit(target, &allow, &metrics, "h2").await {
        Ok(s) => s,
        Err((Verdict::NotExported, m)) => return refuse(respond, Reason::NotExported, m),
        Err((_, m)) => return refuse(respond, Reason::Unreachable, m),
    };
    let Ok(send) = respond.send_response(Response::new(()), false) else {
        return;
    };
    let labels = GatewayLabels {
        transport: "h2",
        source_cluster: source,
    };
    metrics.gateway_streams.get_or_create(&labels).inc();
    let active = metrics.gateway_active.get_or_create(&labels).clone();
    active.inc();
    if let Err(e) = relay(send, req.into_body(), upstream).await {
        tracing::debug!(%target, error = %e, "CONNECT stream ended");
    }
    active.dec();
}

async fn accept_quic(
    endpoint: quinn::Endpoint,
    allow: Allowlist,
    metrics: TunnelMetrics,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        let incoming = tokio::select! {
            _ = stopped.changed() => return,
            i = endpoint.accept() => match i {
                Some(i) => i,
                None => return,
            },
        };
        let (allow, metrics) = (allow.clone(), metrics.clone());
        tokio::spawn(async move {
            let peer = incoming.remote_address();
            let conn = match tokio::time::timeout(HANDSHAKE_TIMEOUT, incoming).await {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => {
                    tracing::info!(%peer, error = %e, "gateway: QUIC handshake refused");
                    metrics.rejected("quic", Reason::Handshake);
                    return;
                }
                Err(_) => {
                    metrics.rejected("quic", Reason::Handshake);
                    return;
                }
            };
            let certs = conn
                .peer_identity()
                .and_then(|i| i.downcast::<Vec<CertificateDer<'static>>>().ok());
            let source = source_cluster(certs.as_deref().map(Vec::as_slice));
            let span = tracing::info_span!("gateway_connection", %peer, source_cluster = %source, transport = "quic");
            while let Ok((send, recv)) = conn.accept_bi().await {
                let (allow, metrics, source) = (allow.clone(), metrics.clone(), source.clone());
                tokio::spawn(
                    quic_stream(send, recv, allow, metrics, source).instrument(span.clone()),
                );
            }
        });
    }
}

async fn quic_stream(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    allow: Allowlist,
    metrics: TunnelMetrics,
    source: String,
) {
    let target = match tokio::time::timeout(HANDSHAKE_TIMEOUT, frame::read_request(&mut recv)).await
    {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => {
            metrics.rejected("quic", Reason::BadRequest);
            let _ = frame::write_verdict(&mut send, Verdict::BadRequest, &e.to_string()).await;
            let _ = send.finish();
            return;
        }
        Err(_) => {
            metrics.rejected("quic", Reason::BadRequest);
            let _ = send.reset(quinn::VarInt::from_u32(1));
            return;
        }
    };
    let mut upstream = match admit(target, &allow, &metrics, "quic").await {
        Ok(s) => s,
        Err((v, m)) => {
            let _ = frame::write_verdict(&mut send, v, &m).await;
            let _ = send.finish();
            return;
        }
    };
    if frame::write_verdict(&mut send, Verdict::Connected, "")
        .await
        .is_err()
    {
        return;
    }
    let labels = GatewayLabels {
        transport: "quic",
        source_cluster: source,
    };
    metrics.gateway_streams.get_or_create(&labels).inc();
    let active = metrics.gateway_active.get_or_create(&labels).clone();
    active.inc();
    let mut stream = tokio::io::join(recv, send);
    let _ =
        tokio::io::copy_bidirectional_with_sizes(&mut stream, &mut upstream, BUFFER, BUFFER).await;
    active.dec();
}
