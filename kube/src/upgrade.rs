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

/// Once both sides are upgraded, copy bytes between them, each way until its reader ends;
/// in a task of its own, under `span` (its end is logged with the bytes each way). The two
/// ways end apart: a failed write one way does not cut the other short, so what a side
/// sent before it closed (a session's last status) still arrives.
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
            let (client_r, client_w) = tokio::io::split(TokioIo::new(client));
            let (backend_r, backend_w) = tokio::io::split(TokioIo::new(backend));
            let (up, down) =
                tokio::join!(one_way(client_r, backend_w), one_way(backend_r, client_w));
            tracing::info!(up, down, "upgraded session ended");
        }
        .instrument(span),
    );
}

/// Copy `from` to `to` until `from` ends or either fails, then close `to` for writing: the
/// bytes copied.
async fn one_way<R, W>(mut from: R, mut to: W) -> u64
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::AsyncWriteExt;
    let copied = tokio::io::copy(&mut from, &mut to).await;
    let _ = to.shutdown().await;
    match copied {
        Ok(n) => n,
        Err(e) => {
            tracing::debug!(error = %e, "one way of an upgraded session ended on an error");
            0
        }
    }
}
