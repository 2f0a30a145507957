//! Proxying an upgraded request (`pods/exec`'s or `pods/portforward`'s WebSocket or SPDY
//! session), as
//! kube-apiserver proxies it to kubelet: the upgrade's headers travel on unchanged, the
//! answer's come back, and once both connections switched protocols their bytes are copied
//! both ways until either side closes. The proxy reads nothing of the session.

use http::{HeaderMap, header};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tracing::Instrument;

/// The header a SPDY client names the stream protocol it speaks in (and the answer, the
/// one chosen): `portforward.k8s.io`, `v4.channel.k8s.io`, ….
pub const STREAM_PROTOCOL: header::HeaderName =
    header::HeaderName::from_static("x-stream-protocol-version");

/// The headers of a client's upgrade request that travel to the side answering it.
pub const REQUEST_HEADERS: [header::HeaderName; 6] = [
    header::UPGRADE,
    header::CONNECTION,
    header::SEC_WEBSOCKET_KEY,
    header::SEC_WEBSOCKET_VERSION,
    header::SEC_WEBSOCKET_PROTOCOL,
    STREAM_PROTOCOL,
];

/// The headers of a switch of protocols that come back to the client.
pub const ANSWER_HEADERS: [header::HeaderName; 5] = [
    header::UPGRADE,
    header::CONNECTION,
    header::SEC_WEBSOCKET_ACCEPT,
    header::SEC_WEBSOCKET_PROTOCOL,
    STREAM_PROTOCOL,
];

/// Copy the `names` of `from` (every value of each) into `to`.
pub fn copy_headers(names: &[header::HeaderName], from: &HeaderMap, to: &mut HeaderMap) {
    for name in names {
        for v in from.get_all(name) {
            to.append(name.clone(), v.clone());
        }
    }
}

/// Once both sides are upgraded, copy bytes between them until either closes; in a task of
/// its own, under `span` (its end is logged with the bytes each way).
pub fn splice(client: OnUpgrade, backend: OnUpgrade, span: tracing::Span) {
    tokio::spawn(
        async move {
            let (client, backend) = match tokio::try_join!(client, backend) {
                Ok(both) => both,
                Err(e) => {
                    tracing::debug!(error = %e, "an upgrade did not complete");
                    return;
                }
            };
            let (mut client, mut backend) = (TokioIo::new(client), TokioIo::new(backend));
            match tokio::io::copy_bidirectional(&mut client, &mut backend).await {
                Ok((up, down)) => tracing::info!(up, down, "upgraded session ended"),
                Err(e) => tracing::debug!(error = %e, "upgraded session ended"),
            }
        }
        .instrument(span),
    );
}
