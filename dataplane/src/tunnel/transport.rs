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

/// QUIC transport settings for both ends: keepalives as for HTTP/2, the stream cap, and
/// windows for bulk transfers.
pub fn quic_transport() -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
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

/// Transport names as metrics label them.
pub fn transport_label(t: TunnelTransport) -> &'static str {
    match t {
        TunnelTransport::H2 => "h2",
        TunnelTransport::Quic => "quic",
    }
}
