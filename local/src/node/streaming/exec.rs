//! `exec`, as kubelet serves it: a command runs beside a running container — in its
//! environment, working directory and mount namespace, in a process group of its own — and
//! its stdin, stdout, stderr and exit code travel over a WebSocket in kube's channel
//! protocol (`v5.channel.k8s.io`, and `v4.channel.k8s.io` for older clients). With `tty`,
//! the command runs on a terminal of its own ([`super::terminal`]) that the client resizes.
//! A client that goes away ends the command's whole process group.

use std::os::fd::OwnedFd;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

use super::channel::{CHUNK, CLOSE, ERROR, RESIZE, STDERR, STDIN, STDOUT, framed, payload};
use super::refusal::Refusal;
use crate::node::beside;
use crate::node::running::ContainerRef;
use crate::node::terminal::{Size, Terminal};

/// The channel protocols served, preferred first.
pub const PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

/// Arguments of one command, and its whole argv, at most: a request is bounded like a body.
pub const MAX_ARGS: usize = 1024;
pub const MAX_ARGV_BYTES: usize = 256 * 1024;

/// How long output still open after the command exited (a background child holding it)
/// is read before the session ends.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);

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
                    return Err(Refusal::TooLong {
                        args: MAX_ARGS,
                        bytes: MAX_ARGV_BYTES,
                    });
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
    let container = container_of(namespace, pod, container)?;
    if command.is_empty() {
        return Err(Refusal::Missing("command"));
    }
    if !(stdin || stdout || stderr) {
        return Err(Refusal::NoStreams);
    }
    // On a terminal, stderr is stdout (kubelet drops the flag too).
    let stderr = stderr && !tty;
    Ok(ExecRequest {
        container,
        command,
        stdin,
        stdout,
        stderr,
        tty,
    })
}

/// The container a query names: each of `namespace`, `pod` and `container` is required.
pub fn container_of(
    namespace: Option<String>,
    pod: Option<String>,
    container: Option<String>,
) -> Result<ContainerRef, Refusal> {
    let required =
        |v: Option<String>, what| v.filter(|s| !s.is_empty()).ok_or(Refusal::Missing(what));
    Ok(ContainerRef {
        namespace: required(namespace, "namespace")?,
        pod: required(pod, "pod")?,
        container: required(container, "container")?,
    })
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

/// The command of `exec` as it runs beside process `pid` ([`beside`]): on `terminal`'s
/// secondary side, as its controlling terminal, when given one.
fn command_beside(
    exec: &ExecRequest,
    pid: u32,
    terminal: Option<&OwnedFd>,
) -> std::io::Result<tokio::process::Command> {
    let (mut cmd, env) = beside::command(&exec.command, pid, terminal.is_some())?;
    match terminal {
        Some(secondary) => {
            // As container runtimes give a terminal's command one.
            if !env.iter().any(|(k, _)| k == "TERM") {
                cmd.env("TERM", "xterm");
            }
            cmd.stdin(Stdio::from(secondary.try_clone()?))
                .stdout(Stdio::from(secondary.try_clone()?))
                .stderr(Stdio::from(secondary.try_clone()?));
        }
        None => {
            let stdio = |on: bool| if on { Stdio::piped() } else { Stdio::null() };
            cmd.stdin(stdio(exec.stdin))
                .stdout(stdio(exec.stdout))
                .stderr(stdio(exec.stderr))
                .process_group(0);
        }
    }
    Ok(cmd)
}

type Input = Box<dyn tokio::io::AsyncWrite + Unpin + Send>;
type Output = Box<dyn AsyncRead + Unpin + Send>;

/// The command started, with its streams as the session carries them: its pipes, or a
/// terminal's primary side (then stdout is the terminal and there is no stderr).
struct Started {
    child: tokio::process::Child,
    stdin: Option<Input>,
    stdout: Option<Output>,
    stderr: Option<Output>,
    terminal: Option<Terminal>,
}

fn start(exec: &ExecRequest, pid: u32) -> std::io::Result<Started> {
    if !exec.tty {
        let mut child = command_beside(exec, pid, None)?.spawn()?;
        return Ok(Started {
            stdin: child.stdin.take().map(|w| Box::new(w) as Input),
            stdout: child.stdout.take().map(|r| Box::new(r) as Output),
            stderr: child.stderr.take().map(|r| Box::new(r) as Output),
            child,
            terminal: None,
        });
    }
    let (terminal, secondary) = Terminal::open()?;
    let child = command_beside(exec, pid, Some(&secondary))?.spawn()?;
    // Only the command holds the secondary side now: its exit ends the terminal's output.
    drop(secondary);
    Ok(Started {
        child,
        stdin: exec
            .stdin
            .then(|| terminal.side())
            .transpose()?
            .map(|w| Box::new(w) as Input),
        stdout: Some(Box::new(terminal.side()?)),
        stderr: None,
        terminal: Some(terminal),
    })
}

/// Read from an output of the command, or wait forever once it is closed.
async fn read_from<R: AsyncRead + Unpin>(out: &mut Option<R>, buf: &mut [u8]) -> usize {
    match out {
        Some(r) => r.read(buf).await.unwrap_or(0),
        None => std::future::pending().await,
    }
}

/// Run the command and carry its streams until it exits and its output is read, or until
/// the client goes away (then its process group is killed: nothing is left running).
pub async fn session<S>(ws: WebSocketStream<S>, exec: ExecRequest, pid: u32)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut tx, mut rx) = ws.split();
    let Started {
        mut child,
        mut stdin,
        mut stdout,
        mut stderr,
        terminal,
    } = match start(&exec, pid) {
        Ok(s) => s,
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
            let channel = if exec.tty { STDOUT } else { STDERR };
            if exec.stderr || exec.tty {
                let _ = tx.send(framed(channel, message.as_bytes())).await;
            }
            use std::os::unix::process::ExitStatusExt;
            finish(&mut tx, &mut rx, &Ok(ExitStatus::from_raw(code << 8))).await;
            return;
        }
    };
    let group = child.id().map(|id| Pid::from_raw(id as i32));
    tracing::info!(command = ?exec.command, tty = exec.tty, "exec started");
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
                Some(Ok(m @ (Message::Binary(_) | Message::Text(_)))) => {
                    let data = payload(m).unwrap_or_default();
                    match data.first() {
                    Some(&STDIN) => {
                        if let Some(w) = stdin.as_mut()
                            && (w.write_all(&data[1..]).await.is_err() || w.flush().await.is_err())
                        {
                            stdin = None;
                        }
                    }
                    Some(&CLOSE) if data.get(1) == Some(&STDIN) => stdin = None,
                    Some(&RESIZE) => {
                        if let (Some(t), Some(size)) = (&terminal, Size::parse(&data[1..]))
                            && let Err(e) = t.resize(&size)
                        {
                            tracing::debug!(error = %e, "exec: a resize failed");
                        }
                    }
                    _ => {}
                    }
                }
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
    finish(&mut tx, &mut rx, &status).await;
}

/// End the session: the command's status on the error channel, then the closing handshake.
pub async fn finish<T, R>(tx: &mut T, rx: &mut R, status: &Result<ExitStatus, String>)
where
    T: futures::Sink<Message> + Unpin,
    R: futures::Stream + Unpin,
{
    let _ = tx
        .send(framed(ERROR, status_message(status).to_string().as_bytes()))
        .await;
    super::channel::close_gracefully(tx, rx).await;
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
        let tty = parse_exec(&format!("{base}&command=sh&stdout=1&stderr=1&tty=true")).unwrap();
        assert!(
            tty.tty && tty.stdout && !tty.stderr,
            "a terminal's stderr is its stdout"
        );
        assert_eq!(
            parse_exec("pod=web&container=main&command=true&stdout=1"),
            Err(Refusal::Missing("namespace"))
        );
        let long = "&command=x".repeat(MAX_ARGS + 1);
        assert_eq!(
            parse_exec(&format!("{base}{long}&stdout=1")),
            Err(Refusal::TooLong {
                args: MAX_ARGS,
                bytes: MAX_ARGV_BYTES
            })
        );
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
