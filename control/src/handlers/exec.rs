//! `pods/exec` on a local cluster: checked here as kube-apiserver checks it (the Pod, the
//! container, a node that runs it), then the client's WebSocket upgrade is proxied
//! unchanged to the node agent's streaming endpoint, which runs the command and speaks the
//! channel protocol — as kube-apiserver proxies it to kubelet. Once both sides switched
//! protocols, the bytes are copied both ways until either side closes.

use std::path::Path;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tracing::Instrument;

use super::respond::{Ctx, Resp, full};
use super::scope::Scope;
use crate::errors::{ApiError, ApiResult};
use crate::state::ApiState;

/// The headers of a WebSocket upgrade that travel to the node and back.
const UPGRADE_HEADERS: [header::HeaderName; 5] = [
    header::UPGRADE,
    header::CONNECTION,
    header::SEC_WEBSOCKET_KEY,
    header::SEC_WEBSOCKET_VERSION,
    header::SEC_WEBSOCKET_PROTOCOL,
];
const ANSWER_HEADERS: [header::HeaderName; 4] = [
    header::UPGRADE,
    header::CONNECTION,
    header::SEC_WEBSOCKET_ACCEPT,
    header::SEC_WEBSOCKET_PROTOCOL,
];

/// The query of kube's exec request that travels to the node: the command and streams.
const EXEC_PARAMETERS: [&str; 5] = ["command", "stdin", "stdout", "stderr", "tty"];

/// Bytes of a node's refusal read for the message.
const MAX_REFUSAL: usize = 4096;

/// Whether `pod` can have a command run in it now, kube's wording when not.
fn runnable(pod: &Value, name: &str) -> ApiResult<()> {
    match pod["status"]["phase"].as_str() {
        Some(phase @ ("Succeeded" | "Failed")) => Err(ApiError::BadRequest(format!(
            "cannot exec into a container in a completed pod; current phase is {phase}"
        ))),
        _ if pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty) => Err(
            ApiError::BadRequest(format!("pod {name} does not have a host assigned")),
        ),
        _ => Ok(()),
    }
}

/// The request line's path and query for the node: which Pod and container, and the
/// client's own command and streams (repeated `command`s in order).
fn node_uri(namespace: &str, pod: &str, container: &str, raw_query: &str) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    q.append_pair("namespace", namespace)
        .append_pair("pod", pod)
        .append_pair("container", container);
    for (k, v) in form_urlencoded::parse(raw_query.as_bytes()) {
        if EXEC_PARAMETERS.contains(&k.as_ref()) {
            q.append_pair(&k, &v);
        }
    }
    format!("/exec?{}", q.finish())
}

pub async fn serve(
    state: &ApiState,
    ctx: &mut Ctx,
    scope: &Scope<'_>,
    name: &str,
) -> ApiResult<Resp> {
    let key = scope.t.prefix.key(
        scope.cluster.as_ref().ok_or(ApiError::MethodNotAllowed)?,
        scope.namespace.as_deref(),
        name,
    );
    let entry = state
        .store
        .get(&key)
        .ok_or_else(|| ApiError::not_found(&scope.t.gr, name))?;
    let pod: Value =
        serde_json::from_slice(&entry.value).map_err(|e| ApiError::Internal(e.to_string()))?;
    let container = super::pod_container::choose(&pod, name, ctx.query.get("container"))?;
    let Some(socket) = &state.node_streaming else {
        return Err(ApiError::BadRequest(format!(
            "pod {name:?} cannot be exec'd into through this server: exec is served by the API server of the physical cluster the pod runs on"
        )));
    };
    runnable(&pod, name)?;
    // Any upgrade goes to the node, which answers the protocols it speaks; a client that
    // falls back from one to another (kubectl: WebSocket, then SPDY) gets the node's
    // reason both times.
    let upgrade = ctx.headers.contains_key(header::UPGRADE);
    let Some(client_side) = ctx.upgrade.take().filter(|_| upgrade) else {
        return Err(ApiError::BadRequest("Upgrade request required".into()));
    };
    let namespace = scope.namespace.as_deref().unwrap_or("default");
    let uri = node_uri(namespace, name, &container, &ctx.raw_query);
    let mut req = Request::get(uri).header(header::HOST, "node");
    for h in UPGRADE_HEADERS {
        for v in ctx.headers.get_all(&h) {
            req = req.header(&h, v);
        }
    }
    let req = req
        .body(Empty::<Bytes>::new())
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let node_resp = ask_node(socket, req).await?;
    if node_resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        let status = node_resp.status();
        let body = http_body_util::Limited::new(node_resp.into_body(), MAX_REFUSAL)
            .collect()
            .await
            .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
            .unwrap_or_default();
        tracing::debug!(%status, %body, "the node refused the exec");
        return Err(ApiError::BadRequest(
            if body.starts_with("unable to upgrade") {
                body
            } else {
                format!("unable to upgrade connection: {body}")
            },
        ));
    }
    let mut resp = Response::new(full(Bytes::new()));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    for h in ANSWER_HEADERS {
        if let Some(v) = node_resp.headers().get(&h) {
            resp.headers_mut().insert(h, v.clone());
        }
    }
    let node_side = hyper::upgrade::on(node_resp);
    let span = tracing::info_span!("exec session", %namespace, pod = %name, %container);
    tokio::spawn(
        async move {
            let (client, node) = match tokio::try_join!(client_side, node_side) {
                Ok(both) => both,
                Err(e) => {
                    tracing::debug!(error = %e, "exec: an upgrade did not complete");
                    return;
                }
            };
            let (mut client, mut node) = (TokioIo::new(client), TokioIo::new(node));
            match tokio::io::copy_bidirectional(&mut client, &mut node).await {
                Ok((up, down)) => tracing::info!(up, down, "exec session ended"),
                Err(e) => tracing::debug!(error = %e, "exec session ended"),
            }
        }
        .instrument(span),
    );
    if let Ok(v) = HeaderValue::from_str("Upgrade") {
        resp.headers_mut().entry(header::CONNECTION).or_insert(v);
    }
    Ok(resp)
}

/// Send `req` to the node agent's streaming socket, keeping the connection for an upgrade.
async fn ask_node(
    socket: &Path,
    req: Request<Empty<Bytes>>,
) -> ApiResult<Response<hyper::body::Incoming>> {
    let unreachable = |e: &dyn std::fmt::Display| {
        ApiError::Internal(format!(
            "error dialing the node's streaming endpoint {}: {e}",
            socket.display()
        ))
    };
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| unreachable(&e))?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| unreachable(&e))?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    send.send_request(req).await.map_err(|e| unreachable(&e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_node_gets_the_pod_and_the_clients_command_in_order() {
        let uri = node_uri(
            "shop",
            "web-1",
            "main",
            "command=sh&command=-c&command=echo+a%26b&stdin=true&stdout=true&container=main&pretty=1",
        );
        assert_eq!(
            uri,
            "/exec?namespace=shop&pod=web-1&container=main&command=sh&command=-c&command=echo+a%26b&stdin=true&stdout=true"
        );
    }

    #[test]
    fn only_a_scheduled_pod_that_has_not_finished_runs_commands() {
        let running = json!({"spec": {"nodeName": "east-node"}, "status": {"phase": "Running"}});
        assert!(runnable(&running, "p").is_ok());
        let pending = json!({"spec": {}, "status": {"phase": "Pending"}});
        assert_eq!(
            runnable(&pending, "p").unwrap_err().to_string(),
            "pod p does not have a host assigned"
        );
        let done = json!({"spec": {"nodeName": "n"}, "status": {"phase": "Succeeded"}});
        assert_eq!(
            runnable(&done, "p").unwrap_err().to_string(),
            "cannot exec into a container in a completed pod; current phase is Succeeded"
        );
    }
}
