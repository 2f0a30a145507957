//! Cross-cluster tunnels: this cluster's east-west gateway (inbound) and pooled tunnels
//! to other clusters' gateways (outbound).
//!
//! Two transports carry the same thing, one proxied connection per stream:
//! - `h2`: mTLS over TCP, one HTTP/2 CONNECT stream per connection (as Istio's HBONE),
//!   on the `h2` crate directly ([`h2_stream`]);
//! - `quic`: QUIC (quinn), one bidirectional stream per connection, opened with the
//!   preamble in [`frame`].
//!
//! Both ends verify each other against the trust bundle and SPIFFE ids ([`identity`]).
//! The gateway forwards only to endpoints of exported services ([`gateway`]); the client
//! side keeps a few connections per peer with a cap on streams each, and keepalives that
//! notice a dead peer within [`KEEPALIVE`] + [`KEEPALIVE_TIMEOUT`] ([`pool`]).

pub mod allow;
pub mod ca;
pub mod certs;
pub mod error;
pub mod frame;
pub mod gateway;
pub mod h2_stream;
pub mod identity;
pub mod pool;
pub mod transport;
pub mod tunnels;

pub use allow::Allowlist;
pub use error::TunnelError;
pub use pool::{Peer, TunnelStream};
pub use transport::{HANDSHAKE_TIMEOUT, KEEPALIVE, KEEPALIVE_TIMEOUT, transport_label};
pub use tunnels::Tunnels;
