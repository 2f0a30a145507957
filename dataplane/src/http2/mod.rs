//! HTTP/2's wire format for the proxy's own server (`http::h2_server`): frames and HPACK.
//! No I/O and no connection state here; the server keeps those.

pub mod frame;
pub mod hpack;
