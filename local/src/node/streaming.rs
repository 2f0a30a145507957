//! The node agent's streaming endpoint, what kubelet's is to kube-apiserver: `exec` runs a
//! command beside a running container — in its environment, working directory and mount
//! namespace — and carries its stdin, stdout, stderr and exit code over a WebSocket in
//! kube's channel protocol (`v5.channel.k8s.io`, and `v4.channel.k8s.io` for older
//! clients). The cluster's API server proxies a client's upgraded `pods/exec` request here
//! unchanged, as kube-apiserver proxies it to kubelet.
//!
//! It listens on a Unix socket in the cluster's state directory, readable by the agent's
//! user only: the API server is the one client, and the file's permissions are the
//! authentication, as a container runtime's socket is kubelet's.

use std::convert::Infallible;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http::{Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixListener;
use tokio::sync::watch;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::protocol::frame::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tracing::Instrument;

use super::running::{ContainerRef, Running};

/// The channel protocols served, preferred first.
pub const PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

/// Channels of kube's remote command protocol: the first byte of each message.
const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
/// v5: a client's `[CLOSE, channel]` ends that channel (stdin).
const CLOSE: u8 = 255;

/// Bytes read from a command's output per message.
const CHUNK: usize = 32 * 1024;

/// Arguments of one command, and its whole argv, at most: a request is bounded like a body.
const MAX_ARGS: usize = 1024;
const MAX_ARGV_BYTES: usize = 256 * 1024;

/// How long output still open after the command exited (a background child holding it)
/// is read before the session ends.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum StreamingError {
    #[error("the streaming socket {0}: {1}")]
    Socket(PathBuf, std::io::Error),
}

/// One `exec` asked for: which container, which command, which streams.
#[derive(Debug, PartialEq, Eq)]
pub struct ExecRequest {
    pub container: ContainerRef,
    pub command: Vec<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// A request the endpoint refuses, with kube's wording where kubelet has one.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("{0} is required")]
    Missing(&'static str),
    #[error("you must specify at least 1 of stdin, stdout, stderr")]
    NoStreams,
    #[error("the command is too long: at most {MAX_ARGS} arguments of {MAX_ARGV_BYTES} bytes")]
    TooLong,
    #[error("exec with a TTY is not supported by this node agent: run without -t")]
    Tty,
    #[error(
        "unable to upgrade connection: only WebSocket is served (kubectl 1.30 or later, or a client that offers {PROTOCOLS:?}), not SPDY"
    )]
    NotWebSocket,
    #[error("unable to upgrade connection: none of the protocols {PROTOCOLS:?} was offered")]
    Protocol,
    #[error("container not found ({0:?})")]
    NotRunning(String),
}

impl Refusal {
    fn status(&self) -> StatusCode {
        match self {
            Refusal::NotRunning(_) => StatusCode::NOT_FOUND,
            _ => StatusCode::BAD_REQUEST,
        }
    }
}

/// The query of `/exec`: `namespace`, `pod`, `container`, each `command` argument, and the
/// streams (`stdin`, `stdout`, `stderr`, `tty`: `true` or `1`) — kube's exec query plus
/// which Pod.
pub fn parse_exec(query: &str) -> Result<ExecRequest, Refusal> {
    let (mut namespace, mut pod, mut container) = (None, None, None);
    let (mut command, mut bytes) = (Vec::new(), 0usize);
    let (mut stdin, mut stdout, mut stderr, mut tty) = (false, false, false, false);
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        let flag = v == "true" || v == "1";
        match k.as_ref() {
            "namespace" => namespace = Some(v.into_owned()),
            "pod" => pod = Some(v.into_owned()),
            "container" => container = Some(v.into_owned()),
            "command" => {
                bytes += v.len();
                if command.len() == MAX_ARGS || bytes > MAX_ARGV_BYTES {
                    return Err(Refusal::TooLong);
                }
                command.push(v.into_owned());
            }
            "stdin" => stdin = flag,
            "stdout" => stdout = flag,
            "stderr" => stderr = flag,
            "tty" => tty = flag,
            _ => {}
        }
    }
    let container = ContainerRef {
        namespace: namespace
            .filter(|s| !s.is_empty())
            .ok_or(Refusal::Missing("namespace"))?,
        pod: pod
            .filter(|s| !s.is_empty())
            .ok_or(Refusal::Missing("pod"))?,
        container: container
            .filter(|s| !s.is_empty())
            .ok_or(Refusal::Missing("container"))?,
    };
    if command.is_empty() {
        return Err(Refusal::Missing("command"));
    }
    if !(stdin || stdout || stderr) {
        return Err(Refusal::NoStreams);
    }
    if tty {
        return Err(Refusal::Tty);
    }
    Ok(ExecRequest {
        container,
        command,
        stdin,
        stdout,
        stderr,
        tty,
    })
}

/// The first protocol of [`PROTOCOLS`] the client offered (`Sec-WebSocket-Protocol`, a
/// comma-separated list, possibly over several headers).
pub fn choose_protocol<'a>(offered: impl Iterator<Item = &'a str>) -> Option<&'static str> {
    let offered: Vec<&str> = offered.flat_map(|h| h.split(',')).map(str::trim).collect();
    PROTOCOLS.into_iter().find(|p| offered.contains(p))
}

/// The status message that ends a session, on the error channel: kubelet's.
pub fn status_message(status: &Result<ExitStatus, String>) -> Value {
    use std::os::unix::process::ExitStatusExt;
    let code = match status {
        Ok(s) if s.success() => return json!({"metadata": {}, "status": "Success"}),
        Ok(s) => s
            .code()
            .or_else(|| s.signal().map(|n| 128 + n))
            .unwrap_or(1),
        Err(message) => {
            return json!({"metadata": {}, "status": "Failure", "message": message,
                "reason": "InternalError"});
        }
    };
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!("command terminated with non-zero exit code: exit status {code}"),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
}

/// Serve the endpoint on `socket` until `shutdown` turns true.
pub async fn serve(
    socket: PathBuf,
    running: Arc<Running>,
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
        let running = running.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let running = running.clone();
                async move { Ok::<_, Infallible>(handle(req, &running)) }
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
fn handle(mut req: Request<Incoming>, running: &Running) -> Response<Full<Bytes>> {
    if req.uri().path() != "/exec" {
        let mut resp = Response::new(Full::new(Bytes::from_static(b"not found")));
        *resp.status_mut() = StatusCode::NOT_FOUND;
        return resp;
    }
    let exec = match parse_exec(req.uri().query().unwrap_or("")) {
        Ok(e) => e,
        Err(r) => return refuse(&r),
    };
    let Some(pid) = running.pid(&exec.container) else {
        return refuse(&Refusal::NotRunning(exec.container.container.clone()));
    };
    let headers = req.headers();
    let upgrade = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let Some(key) = headers
        .get(header::SEC_WEBSOCKET_KEY)
        .filter(|_| upgrade)
        .map(|k| derive_accept_key(k.as_bytes()))
    else {
        return refuse(&Refusal::NotWebSocket);
    };
    let Some(protocol) = choose_protocol(
        headers
            .get_all(header::SEC_WEBSOCKET_PROTOCOL)
            .iter()
            .filter_map(|v| v.to_str().ok()),
    ) else {
        return refuse(&Refusal::Protocol);
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    let span = tracing::info_span!("exec", namespace = %exec.container.namespace,
        pod = %exec.container.pod, container = %exec.container.container, protocol);
    tokio::spawn(
        async move {
            match on_upgrade.await {
                Ok(upgraded) => {
                    let ws = WebSocketStream::from_raw_socket(
                        TokioIo::new(upgraded),
                        Role::Server,
                        None,
                    )
                    .await;
                    session(ws, exec, pid).await;
                }
                Err(e) => tracing::debug!(error = %e, "exec: the upgrade did not complete"),
            }
        }
        .instrument(span),
    );
    let mut resp = Response::new(Full::new(Bytes::new()));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(
        header::UPGRADE,
        header::HeaderValue::from_static("websocket"),
    );
    h.insert(
        header::CONNECTION,
        header::HeaderValue::from_static("Upgrade"),
    );
    if let Ok(v) = header::HeaderValue::from_str(&key) {
        h.insert(header::SEC_WEBSOCKET_ACCEPT, v);
    }
    h.insert(
        header::SEC_WEBSOCKET_PROTOCOL,
        header::HeaderValue::from_static(protocol),
    );
    resp
}

/// The environment of process `pid`, as it started.
fn environment_of(pid: u32) -> std::io::Result<Vec<(OsString, OsString)>> {
    let raw = std::fs::read(format!("/proc/{pid}/environ"))?;
    Ok(raw
        .split(|b| *b == 0)
        .filter_map(|kv| {
            let at = kv.iter().position(|b| *b == b'=')?;
            Some((
                OsString::from_vec(kv[..at].to_vec()),
                OsString::from_vec(kv[at + 1..].to_vec()),
            ))
        })
        .collect())
}

/// Whether `pid` lives in a mount namespace other than the agent's.
fn own_mount_namespace(pid: u32) -> bool {
    let ns = |p: &str| std::fs::read_link(Path::new(p).join("ns/mnt")).ok();
    let theirs = ns(&format!("/proc/{pid}"));
    theirs.is_some() && theirs != ns("/proc/self")
}

/// The command of `exec` as it runs beside process `pid`: with its environment and
/// working directory, and inside its mount namespace when it has its own.
fn command_beside(exec: &ExecRequest, pid: u32) -> std::io::Result<tokio::process::Command> {
    let env = environment_of(pid)?;
    let mut cmd = if own_mount_namespace(pid) {
        let nsenter =
            super::mounts::which("nsenter", &std::env::var("PATH").unwrap_or_default())
                .ok_or_else(|| std::io::Error::other("nsenter is not installed on this node"))?;
        let mut cmd = tokio::process::Command::new(nsenter);
        cmd.arg("--target")
            .arg(pid.to_string())
            .arg("--mount")
            .arg("--wd")
            .arg("--")
            .args(&exec.command);
        cmd
    } else {
        let mut cmd = tokio::process::Command::new(&exec.command[0]);
        cmd.args(&exec.command[1..]);
        if let Ok(cwd) = std::fs::read_link(format!("/proc/{pid}/cwd")) {
            cmd.current_dir(cwd);
        }
        cmd
    };
    let stdio = |on: bool| if on { Stdio::piped() } else { Stdio::null() };
    cmd.env_clear()
        .envs(env)
        .stdin(stdio(exec.stdin))
        .stdout(stdio(exec.stdout))
        .stderr(stdio(exec.stderr))
        .process_group(0)
        .kill_on_drop(true);
    Ok(cmd)
}

/// Read from an output of the command, or wait forever once it is closed.
async fn read_from<R: AsyncRead + Unpin>(out: &mut Option<R>, buf: &mut [u8]) -> usize {
    match out {
        Some(r) => r.read(buf).await.unwrap_or(0),
        None => std::future::pending().await,
    }
}

fn framed(channel: u8, data: &[u8]) -> Message {
    let mut out = Vec::with_capacity(1 + data.len());
    out.push(channel);
    out.extend_from_slice(data);
    Message::Binary(out.into())
}

/// Run the command and carry its streams until it exits and its output is read, or until
/// the client goes away (then its process group is killed: nothing is left running).
async fn session<S>(ws: WebSocketStream<S>, exec: ExecRequest, pid: u32)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut tx, mut rx) = ws.split();
    let spawned = command_beside(&exec, pid).and_then(|mut c| c.spawn());
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            // As a runtime answers a command it cannot start: the reason on stderr, 126
            // (cannot run) or 127 (not found) as the exit code.
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            let message = format!(
                "exec: {:?}: {}\n",
                exec.command[0],
                if code == 127 {
                    "executable file not found in $PATH".to_string()
                } else {
                    e.to_string()
                }
            );
            if exec.stderr {
                let _ = tx.send(framed(STDERR, message.as_bytes())).await;
            }
            use std::os::unix::process::ExitStatusExt;
            finish(&mut tx, &Ok(ExitStatus::from_raw(code << 8))).await;
            return;
        }
    };
    let group = child.id().map(|id| Pid::from_raw(id as i32));
    tracing::info!(command = ?exec.command, "exec started");
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let (mut out_buf, mut err_buf) = (vec![0u8; CHUNK], vec![0u8; CHUNK]);
    let mut exited: Option<Result<ExitStatus, String>> = None;
    let drain_deadline = tokio::time::sleep(Duration::MAX);
    tokio::pin!(drain_deadline);
    let gone = loop {
        if exited.is_some() && stdout.is_none() && stderr.is_none() {
            break false;
        }
        tokio::select! {
            msg = rx.next() => match msg {
                Some(Ok(Message::Binary(data))) => match data.first() {
                    Some(&STDIN) => {
                        if let Some(w) = stdin.as_mut()
                            && w.write_all(&data[1..]).await.is_err()
                        {
                            stdin = None;
                        }
                    }
                    Some(&CLOSE) if data.get(1) == Some(&STDIN) => stdin = None,
                    _ => {}
                },
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break true,
                Some(Ok(_)) => {}
            },
            n = read_from(&mut stdout, &mut out_buf) => {
                if n == 0 {
                    stdout = None;
                } else if tx.send(framed(STDOUT, &out_buf[..n])).await.is_err() {
                    break true;
                }
            }
            n = read_from(&mut stderr, &mut err_buf) => {
                if n == 0 {
                    stderr = None;
                } else if tx.send(framed(STDERR, &err_buf[..n])).await.is_err() {
                    break true;
                }
            }
            status = child.wait(), if exited.is_none() => {
                exited = Some(status.map_err(|e| e.to_string()));
                drain_deadline.as_mut().reset(tokio::time::Instant::now() + DRAIN_AFTER_EXIT);
            }
            _ = &mut drain_deadline => {
                stdout = None;
                stderr = None;
            }
        }
    };
    if gone {
        if let Some(g) = group {
            let _ = killpg(g, Signal::SIGKILL);
        }
        let _ = child.wait().await;
        tracing::info!("exec ended: the client went away; its process group was killed");
        return;
    }
    let status = exited.unwrap_or_else(|| Err("the command's status is unknown".into()));
    tracing::info!(status = ?status, "exec ended");
    finish(&mut tx, &status).await;
}

/// End the session: the command's status on the error channel, then a normal closure
/// (1000) — clients read a close without a code as an error on the stream.
async fn finish<T>(tx: &mut T, status: &Result<ExitStatus, String>)
where
    T: futures::Sink<Message> + Unpin,
{
    let _ = tx
        .send(framed(ERROR, status_message(status).to_string().as_bytes()))
        .await;
    let frame = CloseFrame {
        code: CloseCode::Normal,
        reason: "".into(),
    };
    let _ = tx.send(Message::Close(Some(frame))).await;
    let _ = tx.close().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exec_query_names_the_container_the_command_and_the_streams() {
        let e = parse_exec(
            "namespace=default&pod=web&container=main&command=sh&command=-c&command=echo%20hi&stdin=true&stdout=1&stderr=false",
        )
        .unwrap();
        assert_eq!(e.container.pod, "web");
        assert_eq!(e.command, ["sh", "-c", "echo hi"]);
        assert!(e.stdin && e.stdout && !e.stderr && !e.tty);
    }

    #[test]
    fn bad_exec_queries_are_refused_with_the_reason() {
        let base = "namespace=default&pod=web&container=main";
        assert_eq!(
            parse_exec(&format!("{base}&stdout=true")),
            Err(Refusal::Missing("command"))
        );
        assert_eq!(
            parse_exec(&format!("{base}&command=true")),
            Err(Refusal::NoStreams)
        );
        assert_eq!(
            parse_exec(&format!("{base}&command=true&stdout=1&tty=true")),
            Err(Refusal::Tty)
        );
        assert_eq!(
            parse_exec("pod=web&container=main&command=true&stdout=1"),
            Err(Refusal::Missing("namespace"))
        );
        let long = "&command=x".repeat(MAX_ARGS + 1);
        assert_eq!(
            parse_exec(&format!("{base}{long}&stdout=1")),
            Err(Refusal::TooLong)
        );
    }

    #[test]
    fn the_newest_offered_protocol_is_chosen() {
        let offered = ["v4.channel.k8s.io, v5.channel.k8s.io", "channel.k8s.io"];
        assert_eq!(
            choose_protocol(offered.into_iter()),
            Some("v5.channel.k8s.io")
        );
        assert_eq!(
            choose_protocol(["v4.channel.k8s.io"].into_iter()),
            Some("v4.channel.k8s.io")
        );
        assert_eq!(choose_protocol(["base64.channel.k8s.io"].into_iter()), None);
    }

    #[test]
    fn the_status_carries_the_exit_code_as_kubelet_writes_it() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            status_message(&Ok(ExitStatus::from_raw(0))),
            json!({"metadata": {}, "status": "Success"})
        );
        let failed = status_message(&Ok(ExitStatus::from_raw(3 << 8)));
        assert_eq!(failed["reason"], "NonZeroExitCode");
        assert_eq!(failed["details"]["causes"][0]["message"], "3");
        let killed = status_message(&Ok(ExitStatus::from_raw(9)));
        assert_eq!(killed["details"]["causes"][0]["message"], "137");
    }
}
