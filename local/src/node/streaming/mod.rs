//! The node agent's streaming endpoint, what kubelet's is to kube-apiserver. The cluster's
//! API server proxies a client's upgraded request here unchanged, as kube-apiserver
//! proxies it to kubelet:
//! - `/exec` ([`exec`]): a command beside a running container, over WebSocket channels;
//! - `/attach` ([`attach`]): a running container's own streams, over WebSocket channels;
//! - `/portforward` ([`portforward`]): connections to the Pod's ports, over SPDY/3.1
//!   ([`spdy`]; raw, or tunneled in a WebSocket as kubectl 1.31 and later send it,
//!   [`tunnel`]) or WebSocket channels;
//! - `/stats/pods` (`?namespace=`): what the running Pods use ([`crate::node::usage`]),
//!   as kubelet's resource metrics tell metrics-server, for `metrics.k8s.io`.
//!
//! It listens on a Unix socket in the cluster's state directory, readable by the agent's
//! user only: the API server is the one client, and the file's permissions are the
//! authentication, as a container runtime's socket is kubelet's.

pub mod attach;
pub mod channel;
pub mod exec;
pub mod portforward;
pub mod refusal;
pub mod spdy;
mod tunnel;

pub use refusal::Refusal;

use std::convert::Infallible;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::UnixListener;
use tokio::sync::watch;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tracing::Instrument;

use sluice_kube::upgrade::STREAM_PROTOCOL;

use crate::node::running::{self, Running};
use crate::node::usage::Usage;

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum StreamingError {
    #[error("the streaming socket {0}: {1}")]
    Socket(PathBuf, std::io::Error),
}

/// The first of `served` the client offered (`Sec-WebSocket-Protocol`, a comma-separated
/// list, possibly over several headers).
pub fn choose_protocol<'a>(
    offered: impl Iterator<Item = &'a str>,
    served: &[&'static str],
) -> Option<&'static str> {
    let offered: Vec<&str> = offered.flat_map(|h| h.split(',')).map(str::trim).collect();
    served.iter().copied().find(|p| offered.contains(p))
}

/// How a client asked to switch protocols.
#[derive(Debug, PartialEq, Eq)]
enum Upgrade {
    /// A WebSocket of the subprotocol chosen; `accept` answers its key.
    WebSocket {
        accept: String,
        protocol: &'static str,
    },
    /// SPDY/3.1 carrying port-forward's streams.
    Spdy,
}

/// The upgrade `headers` ask for, among the WebSocket subprotocols `served` and, when
/// `spdy`, SPDY for port-forward.
fn upgrade_of(
    headers: &HeaderMap,
    served: &'static [&'static str],
    spdy: bool,
) -> Result<Upgrade, Refusal> {
    let upgrade = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if upgrade.eq_ignore_ascii_case("websocket")
        && let Some(key) = headers.get(header::SEC_WEBSOCKET_KEY)
    {
        let protocol = choose_protocol(
            headers
                .get_all(header::SEC_WEBSOCKET_PROTOCOL)
                .iter()
                .filter_map(|v| v.to_str().ok()),
            served,
        )
        .ok_or(Refusal::Protocol(served))?;
        return Ok(Upgrade::WebSocket {
            accept: derive_accept_key(key.as_bytes()),
            protocol,
        });
    }
    let spdy_stream = headers
        .get_all(STREAM_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|p| p.trim() == portforward::SPDY_PROTOCOL));
    if spdy && upgrade.eq_ignore_ascii_case("SPDY/3.1") && spdy_stream {
        return Ok(Upgrade::Spdy);
    }
    Err(if spdy {
        Refusal::Protocol(served)
    } else {
        Refusal::NotWebSocket(&exec::PROTOCOLS)
    })
}

/// The answer that switches to `upgrade`.
fn switched(upgrade: &Upgrade) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::new()));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(
        header::CONNECTION,
        header::HeaderValue::from_static("Upgrade"),
    );
    match upgrade {
        Upgrade::WebSocket { accept, protocol } => {
            h.insert(
                header::UPGRADE,
                header::HeaderValue::from_static("websocket"),
            );
            if let Ok(v) = header::HeaderValue::from_str(accept) {
                h.insert(header::SEC_WEBSOCKET_ACCEPT, v);
            }
            h.insert(
                header::SEC_WEBSOCKET_PROTOCOL,
                header::HeaderValue::from_static(protocol),
            );
        }
        Upgrade::Spdy => {
            h.insert(
                header::UPGRADE,
                header::HeaderValue::from_static("SPDY/3.1"),
            );
            h.insert(
                STREAM_PROTOCOL,
                header::HeaderValue::from_static(portforward::SPDY_PROTOCOL),
            );
        }
    }
    resp
}

/// Serve the endpoint on `socket` until `shutdown` turns true.
pub async fn serve(
    socket: PathBuf,
    running: Arc<Running>,
    usage: Arc<Usage>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), StreamingError> {
    let _ = std::fs::remove_file(&socket);
    let err = |e| StreamingError::Socket(socket.clone(), e);
    let listener = UnixListener::bind(&socket).map_err(err)?;
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
    tracing::info!(socket = %socket.display(), "streaming endpoint listening");
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "streaming endpoint: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => break,
        };
        let (running, usage) = (running.clone(), usage.clone());
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let (running, usage) = (running.clone(), usage.clone());
                async move { Ok::<_, Infallible>(handle(req, &running, &usage).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades()
                .await;
        });
    }
    let _ = std::fs::remove_file(&socket);
    Ok(())
}

fn refuse(refusal: &Refusal) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(refusal.to_string())));
    *resp.status_mut() = refusal.status();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain"),
    );
    resp
}

/// Answer one request: check it, switch protocols, and run the session on the upgraded
/// connection.
async fn handle(
    req: Request<Incoming>,
    running: &Arc<Running>,
    usage: &Usage,
) -> Response<Full<Bytes>> {
    let result = match req.uri().path() {
        "/stats/pods" => return stats(&req, running, usage).await,
        "/exec" => start_exec(req, running),
        "/attach" => start_attach(req, running),
        "/portforward" => start_portforward(req, running),
        _ => {
            let mut resp = Response::new(Full::new(Bytes::from_static(b"not found")));
            *resp.status_mut() = StatusCode::NOT_FOUND;
            return resp;
        }
    };
    result.unwrap_or_else(|r| refuse(&r))
}

/// The running Pods' usage, as JSON.
async fn stats(req: &Request<Incoming>, running: &Running, usage: &Usage) -> Response<Full<Bytes>> {
    let namespace = form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes())
        .find(|(k, _)| k == "namespace")
        .map(|(_, v)| v.into_owned())
        .filter(|ns| !ns.is_empty());
    let pods = usage.pods(running, namespace.as_deref()).await;
    let body = serde_json::to_vec(&serde_json::json!({ "items": pods })).unwrap_or_default();
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    resp
}

/// The WebSocket of a remote-command session (exec, attach) once the client's upgrade
/// completes.
type Channels = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// Switch `req` to a WebSocket of kube's channel protocols and run `session` on it in
/// `span` (whose `protocol` field is recorded here): what exec and attach share.
fn start_channels<F, Fut>(
    mut req: Request<Incoming>,
    span: tracing::Span,
    session: F,
) -> Result<Response<Full<Bytes>>, Refusal>
where
    F: FnOnce(Channels) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let upgrade = upgrade_of(req.headers(), &exec::PROTOCOLS, false)?;
    let Upgrade::WebSocket { protocol, .. } = &upgrade else {
        return Err(Refusal::NotWebSocket(&exec::PROTOCOLS));
    };
    span.record("protocol", *protocol);
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(
        async move {
            match on_upgrade.await {
                Ok(upgraded) => {
                    let io = TokioIo::new(upgraded);
                    session(WebSocketStream::from_raw_socket(io, Role::Server, None).await).await;
                }
                Err(e) => tracing::debug!(error = %e, "the upgrade did not complete"),
            }
        }
        .instrument(span),
    );
    Ok(switched(&upgrade))
}

fn start_exec(req: Request<Incoming>, running: &Running) -> Result<Response<Full<Bytes>>, Refusal> {
    let exec = exec::parse_exec(req.uri().query().unwrap_or(""))?;
    let pid = running
        .pid(&exec.container)
        .ok_or_else(|| Refusal::NotRunning(exec.container.container.clone()))?;
    let span = tracing::info_span!("exec", namespace = %exec.container.namespace,
        pod = %exec.container.pod, container = %exec.container.container,
        protocol = tracing::field::Empty);
    start_channels(req, span, move |ws| exec::session(ws, exec, pid))
}

fn start_attach(
    req: Request<Incoming>,
    running: &Arc<Running>,
) -> Result<Response<Full<Bytes>>, Refusal> {
    let attach = attach::parse_attach(req.uri().query().unwrap_or(""))?;
    let (pid, attachable) = running
        .attachable(&attach.container)
        .ok_or_else(|| Refusal::NotRunning(attach.container.container.clone()))?;
    let span = tracing::info_span!("attach", namespace = %attach.container.namespace,
        pod = %attach.container.pod, container = %attach.container.container,
        protocol = tracing::field::Empty);
    let running = running.clone();
    start_channels(req, span, move |ws| {
        attach::session(ws, attach, pid, attachable, running)
    })
}

fn start_portforward(
    mut req: Request<Incoming>,
    running: &Running,
) -> Result<Response<Full<Bytes>>, Refusal> {
    let forward = portforward::parse_portforward(req.uri().query().unwrap_or(""))?;
    let ip = running.address(&forward.pod).ok_or_else(|| {
        Refusal::PodNotRunning(format!("{}/{}", forward.pod.namespace, forward.pod.name))
    })?;
    let upgrade = upgrade_of(req.headers(), &portforward::PROTOCOLS, true)?;
    let channels = matches!(&upgrade, Upgrade::WebSocket { protocol, .. } if *protocol == portforward::CHANNEL_PROTOCOL);
    if channels && forward.ports.is_empty() {
        return Err(Refusal::NoPorts);
    }
    let on_upgrade = hyper::upgrade::on(&mut req);
    let protocol = match &upgrade {
        Upgrade::WebSocket { protocol, .. } => *protocol,
        Upgrade::Spdy => "SPDY/3.1",
    };
    let span = tracing::info_span!("portforward", namespace = %forward.pod.namespace,
        pod = %forward.pod.name, %ip, protocol);
    let is_spdy = upgrade == Upgrade::Spdy;
    tokio::spawn(
        async move {
            let upgraded = match on_upgrade.await {
                Ok(u) => TokioIo::new(u),
                Err(e) => {
                    tracing::debug!(error = %e, "portforward: the upgrade did not complete");
                    return;
                }
            };
            let pod: running::PodRef = forward.pod;
            if is_spdy {
                return portforward::serve_spdy(upgraded, pod, ip).await;
            }
            let ws = WebSocketStream::from_raw_socket(upgraded, Role::Server, None).await;
            if channels {
                portforward::serve_channels(ws, pod, ip, forward.ports).await;
            } else {
                portforward::serve_spdy(tunnel::bytes_of(ws), pod, ip).await;
            }
        }
        .instrument(span),
    );
    Ok(switched(&upgrade))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_served_protocol_offered_is_chosen() {
        let offered = ["v4.channel.k8s.io, v5.channel.k8s.io", "channel.k8s.io"];
        assert_eq!(
            choose_protocol(offered.into_iter(), &exec::PROTOCOLS),
            Some("v5.channel.k8s.io")
        );
        assert_eq!(
            choose_protocol(["v4.channel.k8s.io"].into_iter(), &exec::PROTOCOLS),
            Some("v4.channel.k8s.io")
        );
        assert_eq!(
            choose_protocol(["base64.channel.k8s.io"].into_iter(), &exec::PROTOCOLS),
            None
        );
        assert_eq!(
            choose_protocol(
                ["SPDY/3.1+portforward.k8s.io"].into_iter(),
                &portforward::PROTOCOLS
            ),
            Some(portforward::TUNNEL_PROTOCOL)
        );
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, header::HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn spdy_is_taken_for_port_forward_only() {
        let spdy = headers(&[
            ("upgrade", "SPDY/3.1"),
            ("x-stream-protocol-version", "portforward.k8s.io"),
        ]);
        assert_eq!(
            upgrade_of(&spdy, &portforward::PROTOCOLS, true),
            Ok(Upgrade::Spdy)
        );
        assert_eq!(
            upgrade_of(&spdy, &exec::PROTOCOLS, false),
            Err(Refusal::NotWebSocket(&exec::PROTOCOLS))
        );
        let ws = headers(&[
            ("upgrade", "websocket"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("sec-websocket-protocol", "v4.channel.k8s.io"),
        ]);
        let Ok(Upgrade::WebSocket { accept, protocol }) =
            upgrade_of(&ws, &portforward::PROTOCOLS, true)
        else {
            panic!("a WebSocket of a served protocol is taken")
        };
        assert_eq!(accept, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        assert_eq!(protocol, portforward::CHANNEL_PROTOCOL);
    }
}
