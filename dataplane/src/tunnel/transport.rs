//! What both ends of a tunnel agree on: ALPN names, stream and connection caps,
//! keepalives, windows, and the QUIC transport built from them.

use std::time::Duration;

use crate::config::TunnelTransport;

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
pub const STREAM_WINDOW: u32 = 4 * 1024 * 1024;
pub const CONNECTION_WINDOW: u32 = 16 * 1024 * 1024;
/// HTTP/2 data a stream may have queued for sending (hyper's client default).
pub const SEND_BUFFER: usize = 1024 * 1024;
/// The largest HTTP/2 frame either end accepts. With the protocol's default of 16 KiB every
/// DATA frame (16 KiB and a 9-byte header) is written on its own and becomes a full TLS
/// record and a 9-byte one, one system call each frame; a whole 64 KiB read goes as one
/// frame instead.
pub const MAX_FRAME: u32 = 128 * 1024;

/// How many packets quinn hands the kernel in one segmentation-offload (GSO) send at most
/// (`MAX_TRANSMIT_SEGMENTS` in quinn 0.11).
const GSO_BATCH: u16 = 10;

/// The largest UDP payload a tunnel end accepts and searches for. Quinn's default (1452,
/// Ethernet's 1500) caps every path at 1452 bytes a packet even where the network carries
/// jumbo frames (data-centre networks, loopback), and each packet costs a seal, an open and
/// ACK bookkeeping. MTU discovery probes upward from 1200 while the connection is idle and
/// settles on what the path carries; loss that looks like a smaller path is found by
/// black-hole detection and searched again. The bound is not 9000: one GSO send of
/// [`GSO_BATCH`] packets must fit one UDP datagram (65,507 bytes), and with 8,952-byte
/// packets every batch fails and the connection crawls (0.03 Gbit/s measured).
pub const MAX_UDP_PAYLOAD: u16 = 65_507 / GSO_BATCH;
const _: () =
    assert!(MAX_UDP_PAYLOAD as u32 * GSO_BATCH as u32 <= 65_507 && MAX_UDP_PAYLOAD > 1452);

/// Socket buffers asked for each QUIC endpoint's UDP socket. With Linux's default
/// (208 KiB) a receiver that falls a scheduling slice behind a bulk sender drops datagrams
/// (`UdpRcvbufErrors`: 437 on one 5 s run), each one a loss to the congestion controller.
pub const UDP_BUFFER: usize = 4 * 1024 * 1024;

/// QUIC transport settings for both ends: keepalives as for HTTP/2, the stream cap,
/// windows for bulk transfers, and MTU discovery up to [`MAX_UDP_PAYLOAD`].
pub fn quic_transport() -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    let mut mtu = quinn::MtuDiscoveryConfig::default();
    mtu.upper_bound(MAX_UDP_PAYLOAD);
    t.mtu_discovery_config(Some(mtu));
    t.max_concurrent_bidi_streams(quinn::VarInt::from_u32(STREAMS_PER_CONNECTION));
    t.max_concurrent_uni_streams(quinn::VarInt::from_u32(0));
    t.keep_alive_interval(Some(KEEPALIVE));
    if let Ok(idle) = quinn::IdleTimeout::try_from(KEEPALIVE + KEEPALIVE_TIMEOUT) {
        t.max_idle_timeout(Some(idle));
    }
    t.stream_receive_window(quinn::VarInt::from_u32(STREAM_WINDOW));
    t.receive_window(quinn::VarInt::from_u32(CONNECTION_WINDOW));
    t.send_window(u64::from(CONNECTION_WINDOW));
    t
}

/// A QUIC endpoint on `socket` that tells its peers it takes datagrams of up to
/// [`MAX_UDP_PAYLOAD`] (the peer's MTU discovery stops at what this end advertises);
/// `server` is `None` for a client-only endpoint.
pub fn quic_endpoint(
    socket: std::net::UdpSocket,
    server: Option<quinn::ServerConfig>,
) -> std::io::Result<quinn::Endpoint> {
    let state = quinn::udp::UdpSocketState::new((&socket).into())?;
    // Linux caps both at net.core.rmem_max / wmem_max; what it granted is logged.
    let _ = state.set_recv_buffer_size((&socket).into(), UDP_BUFFER);
    let _ = state.set_send_buffer_size((&socket).into(), UDP_BUFFER);
    tracing::debug!(
        asked = UDP_BUFFER,
        receive = state.recv_buffer_size((&socket).into()).unwrap_or(0),
        send = state.send_buffer_size((&socket).into()).unwrap_or(0),
        "QUIC socket buffers"
    );
    let mut config = quinn::EndpointConfig::default();
    config
        .max_udp_payload_size(MAX_UDP_PAYLOAD)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let runtime = quinn::default_runtime()
        .ok_or_else(|| std::io::Error::other("no async runtime for QUIC"))?;
    quinn::Endpoint::new(config, server, socket, runtime)
}

/// Transport names as metrics label them.
pub fn transport_label(t: TunnelTransport) -> &'static str {
    match t {
        TunnelTransport::H2 => "h2",
        TunnelTransport::Quic => "quic",
    }
}
