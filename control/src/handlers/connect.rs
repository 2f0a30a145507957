//! `pods/exec`, `pods/attach` and `pods/portforward`, kube's connect subresources: checked
//! here as kube-apiserver checks them (the Pod, the container, a node that runs it), then the
//! client's upgrade is proxied unchanged to the side that runs the session and speaks its
//! protocols (WebSocket channels, SPDY), as kube-apiserver proxies it to kubelet:
//! - on a local cluster, the node agent's streaming endpoint;
//! - on a logical cluster, the syncer of the physical cluster the pod runs on (over the
//!   per-cluster path `kubectl logs` takes, [`crate::agent_client`]), which proxies it on
//!   to that cluster's API server — so it works the same on any cluster.
//!
//! Once both sides switched protocols, bytes are copied both ways until either closes.

use std::path::Path;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use sluice_kube::upgrade;

use super::respond::{Ctx, Resp, full};
use super::scope::Scope;
use crate::errors::{ApiError, ApiResult};
use crate::state::ApiState;

/// The query of kube's exec request that travels to the node: the command and streams.
const EXEC_PARAMETERS: [&str; 5] = ["command", "stdin", "stdout", "stderr", "tty"];
/// The query of an attach that travels: the streams.
const ATTACH_PARAMETERS: [&str; 4] = ["stdin", "stdout", "stderr", "tty"];
/// The query of a port-forward that travels: the ports (WebSocket channels name them).
const PORTFORWARD_PARAMETERS: [&str; 2] = ["ports", "port"];

/// A connect subresource of Pods served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Connect {
    Exec,
    Attach,
    PortForward,
}

impl Connect {
    /// The subresource's name, in paths.
    pub fn as_str(self) -> &'static str {
        match self {
            Connect::Exec => "exec",
            Connect::Attach => "attach",
            Connect::PortForward => "portforward",
        }
    }

    pub fn of(subresource: &str) -> Option<Connect> {
        match subresource {
            "exec" => Some(Connect::Exec),
            "attach" => Some(Connect::Attach),
            "portforward" => Some(Connect::PortForward),
            _ => None,
        }
    }
}

/// Bytes of a node's refusal read for the message.
const MAX_REFUSAL: usize = 4096;

/// Whether `pod` can have a command run in it (or be attached to) now, kube's wording
/// when not.
fn runnable(connect: Connect, pod: &Value, name: &str) -> ApiResult<()> {
    finished(connect, pod)?;
    assigned(pod, name)
}

/// Whether `pod` has a node to connect to, kube's wording when not.
fn assigned(pod: &Value, name: &str) -> ApiResult<()> {
    if pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty) {
        return Err(ApiError::BadRequest(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    Ok(())
}

/// The client's command and streams with the container chosen, or the ports: the query
/// that travels.
fn onward_query(connect: Connect, container: Option<&str>, raw_query: &str) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    if let Some(c) = container {
        q.append_pair("container", c);
    }
    let travels: &[&str] = match connect {
        Connect::Exec => &EXEC_PARAMETERS,
        Connect::Attach => &ATTACH_PARAMETERS,
        Connect::PortForward => &PORTFORWARD_PARAMETERS,
    };
    for (k, v) in form_urlencoded::parse(raw_query.as_bytes()) {
        if travels.contains(&k.as_ref()) {
            q.append_pair(&k, &v);
        }
    }
    q.finish()
}

/// A pod that finished runs no command and has nothing to attach to (kube's wording); a
/// port-forward to one finds nothing listening, as on kube.
fn finished(connect: Connect, pod: &Value) -> ApiResult<()> {
    let doing = match connect {
        Connect::Exec => "exec into",
        Connect::Attach => "attach",
        Connect::PortForward => return Ok(()),
    };
    match pod["status"]["phase"].as_str() {
        Some(phase @ ("Succeeded" | "Failed")) => Err(ApiError::BadRequest(format!(
            "cannot {doing} a container in a completed pod; current phase is {phase}"
        ))),
        _ => Ok(()),
    }
}

/// The request line's path and query for the node: which Pod (and container), and the
/// client's own command and streams (repeated `command`s in order) or ports.
fn node_uri(connect: Connect, namespace: &str, pod: &str, onward: &str) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    q.append_pair("namespace", namespace)
        .append_pair("pod", pod);
    format!("/{}?{}&{onward}", connect.as_str(), q.finish())
}

pub async fn serve(
    state: &ApiState,
    ctx: &mut Ctx,
    scope: &Scope<'_>,
    name: &str,
    connect: Connect,
) -> ApiResult<Resp> {
    let (_, pod) = super::pod_container::pod(state, scope, name)?;
    let container = match connect {
        Connect::Exec | Connect::Attach => Some(super::pod_container::choose(
            &pod,
            name,
            ctx.query.get("container"),
        )?),
        Connect::PortForward => None,
    };
    let onward = onward_query(connect, container.as_deref(), &ctx.raw_query);
    // Any upgrade goes on, to the side that answers the protocols it speaks; a client that
    // falls back from one to another (kubectl: WebSocket, then SPDY) gets that side's
    // reason both times.
    let upgrade = ctx.headers.contains_key(header::UPGRADE);
    let Some(client_side) = ctx.upgrade.take().filter(|_| upgrade) else {
        return Err(ApiError::BadRequest("Upgrade request required".into()));
    };
    let mut headers = http::HeaderMap::new();
    upgrade::copy_headers(&upgrade::REQUEST_HEADERS, &ctx.headers, &mut headers);
    let namespace = scope.namespace.as_deref().unwrap_or("default");
    let span = tracing::info_span!("connect session", subresource = connect.as_str(),
        %namespace, pod = %name, container = container.as_deref().unwrap_or(""));
    // A pod of a logical cluster runs on a physical cluster: its syncer takes the session
    // there, to the cluster's own API server.
    if state.node_streaming.is_none()
        && let Some(cluster) = super::logs::running_on(&pod)
        && let Some(logical) = scope.cluster.as_ref()
    {
        finished(connect, &pod)?;
        let cluster = sluice_api::ClusterName::new(cluster);
        let base = super::remote_logs::endpoint(state, &cluster)?;
        let path = format!(
            "/{}/{}/{name}?{onward}",
            connect.as_str(),
            crate::admission::downstream_names::of_namespace(state, logical, namespace),
        );
        let resp = state
            .agents
            .get_with(&base, &cluster, &path, &headers)
            .await
            .map_err(|e| {
                tracing::warn!(%cluster, error = %e, subresource = connect.as_str(),
                    "reaching a cluster's syncer failed");
                ApiError::BadRequest(format!("cluster {cluster}'s syncer was not reached: {e}"))
            })?;
        return relay(resp, client_side, span, |message| {
            format!("cluster {cluster}: {message}")
        })
        .await;
    }
    let Some(socket) = &state.node_streaming else {
        return Err(ApiError::BadRequest(format!(
            "pod {name:?} runs on no cluster yet: it cannot be connected to"
        )));
    };
    runnable(connect, &pod, name)?;
    let uri = node_uri(connect, namespace, name, &onward);
    let mut req = Request::get(uri)
        .header(header::HOST, "node")
        .body(Empty::<Bytes>::new())
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    req.headers_mut().extend(headers);
    let resp = ask_node(socket, req).await?;
    relay(resp, client_side, span, |message| {
        if message.starts_with("unable to upgrade") {
            message.to_string()
        } else {
            format!("unable to upgrade connection: {message}")
        }
    })
    .await
}

/// Answer the client as the side that runs the session answered: a refusal becomes a 400
/// with its reason (`say` words it); a switch of protocols is passed on, and once both
/// connections are upgraded, bytes are copied both ways until either side closes.
async fn relay(
    resp: Response<hyper::body::Incoming>,
    client_side: hyper::upgrade::OnUpgrade,
    span: tracing::Span,
    say: impl FnOnce(&str) -> String,
) -> ApiResult<Resp> {
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        let status = resp.status();
        let body = http_body_util::Limited::new(resp.into_body(), MAX_REFUSAL)
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        // A cluster's own error is a Status; a node's, text.
        let message = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|s| s["message"].as_str().map(str::to_string))
            .unwrap_or_else(|| String::from_utf8_lossy(&body).trim().to_string());
        tracing::debug!(%status, %message, "the session was refused");
        return Err(ApiError::BadRequest(say(&message)));
    }
    let mut answer = Response::new(full(Bytes::new()));
    *answer.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    upgrade::copy_headers(
        &upgrade::ANSWER_HEADERS,
        resp.headers(),
        answer.headers_mut(),
    );
    if let Ok(v) = HeaderValue::from_str("Upgrade") {
        answer.headers_mut().entry(header::CONNECTION).or_insert(v);
    }
    upgrade::splice(client_side, hyper::upgrade::on(resp), span);
    Ok(answer)
}

/// Send `req` to the node agent's streaming socket, keeping the connection for an upgrade
/// (the node's Pod usage is asked the same way, [`super::pod_metrics`]).
pub(super) async fn ask_node(
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
        let onward = onward_query(
            Connect::Exec,
            Some("main"),
            "command=sh&command=-c&command=echo+a%26b&stdin=true&stdout=true&container=main&pretty=1",
        );
        assert_eq!(
            node_uri(Connect::Exec, "shop", "web-1", &onward),
            "/exec?namespace=shop&pod=web-1&container=main&command=sh&command=-c&command=echo+a%26b&stdin=true&stdout=true"
        );
        let onward = onward_query(Connect::PortForward, None, "ports=80%2C8080&command=x");
        assert_eq!(
            node_uri(Connect::PortForward, "shop", "web-1", &onward),
            "/portforward?namespace=shop&pod=web-1&ports=80%2C8080"
        );
    }

    #[test]
    fn only_a_scheduled_pod_that_has_not_finished_runs_commands() {
        let running = json!({"spec": {"nodeName": "east-node"}, "status": {"phase": "Running"}});
        assert!(runnable(Connect::Exec, &running, "p").is_ok());
        let pending = json!({"spec": {}, "status": {"phase": "Pending"}});
        assert_eq!(
            runnable(Connect::Exec, &pending, "p")
                .unwrap_err()
                .to_string(),
            "pod p does not have a host assigned"
        );
        let done = json!({"spec": {"nodeName": "n"}, "status": {"phase": "Succeeded"}});
        assert_eq!(
            runnable(Connect::Exec, &done, "p").unwrap_err().to_string(),
            "cannot exec into a container in a completed pod; current phase is Succeeded"
        );
        assert_eq!(
            runnable(Connect::Attach, &done, "p")
                .unwrap_err()
                .to_string(),
            "cannot attach a container in a completed pod; current phase is Succeeded"
        );
        assert!(runnable(Connect::PortForward, &done, "p").is_ok());
    }
}
