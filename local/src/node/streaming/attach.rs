//! `attach`, as kubelet serves it: a client joins a running container's own streams — its
//! output from now on (what its log receives: stdout and stderr together, or its
//! terminal's output), its stdin when it was started with `stdin: true`, its terminal's
//! size when started with `tty: true` — over kube's WebSocket channels. The session ends
//! with a success status when the container exits; a client that goes away leaves the
//! container running (only `stdinOnce` closes its stdin), unlike `exec`.

use std::io::SeekFrom;
use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

use super::channel::{CHUNK, CLOSE, RESIZE, STDERR, STDIN, STDOUT, framed, payload};
use super::exec::{container_of, finish};
use super::refusal::Refusal;
use crate::node::running::{Attachable, ContainerRef, Running};
use crate::node::terminal::Size;

/// How often an attached session looks for the container's new output (the log is a
/// file; a few reads a second per session cost nothing, and typing stays prompt).
const POLL: Duration = Duration::from_millis(20);

/// How long output written as the container exited is still read: a terminal's output
/// reaches the log through the node's copy, which may trail the exit.
const TRAIL: Duration = Duration::from_millis(200);

/// One `attach` asked for: which container, which streams.
#[derive(Debug, PartialEq, Eq)]
pub struct AttachRequest {
    pub container: ContainerRef,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// The query of `/attach`: `namespace`, `pod`, `container` and the streams (`stdin`,
/// `stdout`, `stderr`, `tty`: `true` or `1`) — kube's attach query plus which Pod.
pub fn parse_attach(query: &str) -> Result<AttachRequest, Refusal> {
    let (mut namespace, mut pod, mut container) = (None, None, None);
    let (mut stdin, mut stdout, mut stderr, mut tty) = (false, false, false, false);
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        let flag = v == "true" || v == "1";
        match k.as_ref() {
            "namespace" => namespace = Some(v.into_owned()),
            "pod" => pod = Some(v.into_owned()),
            "container" => container = Some(v.into_owned()),
            "stdin" => stdin = flag,
            "stdout" => stdout = flag,
            "stderr" => stderr = flag,
            "tty" => tty = flag,
            _ => {}
        }
    }
    let container = container_of(namespace, pod, container)?;
    if !(stdin || stdout || stderr) {
        return Err(Refusal::NoStreams);
    }
    Ok(AttachRequest {
        container,
        stdin,
        stdout,
        stderr: stderr && !tty,
        tty,
    })
}

/// The channel the container's output goes out on: stdout, or stderr when only it was
/// asked for; none when the client asked for neither.
fn output_channel(req: &AttachRequest) -> Option<u8> {
    if req.stdout || req.tty {
        Some(STDOUT)
    } else if req.stderr {
        Some(STDERR)
    } else {
        None
    }
}

/// Carry the streams of the container that runs as `pid` until it exits (then a success
/// status ends the session) or the client goes away.
pub async fn session<S>(
    ws: WebSocketStream<S>,
    req: AttachRequest,
    pid: u32,
    attachable: Arc<Attachable>,
    running: Arc<Running>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut tx, mut rx) = ws.split();
    let mut log = match tokio::fs::File::open(&attachable.log).await {
        Ok(f) => f,
        Err(e) => {
            let message = format!("the container's output {}: {e}", attachable.log.display());
            finish(&mut tx, &mut rx, &Err(message)).await;
            return;
        }
    };
    // From now on, as kubelet attaches: what was written before is `kubectl logs`'.
    if let Err(e) = log.seek(SeekFrom::End(0)).await {
        finish(&mut tx, &mut rx, &Err(e.to_string())).await;
        return;
    }
    let out = output_channel(&req);
    let mut stdin_open = req.stdin && attachable.has_stdin().await;
    tracing::info!(stdin = stdin_open, tty = attachable.tty, "attached");
    let mut buf = vec![0u8; CHUNK];
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut exited_at: Option<tokio::time::Instant> = None;
    let gone = loop {
        tokio::select! {
            msg = rx.next() => match msg {
                Some(Ok(m @ (Message::Binary(_) | Message::Text(_)))) => {
                    let data = payload(m).unwrap_or_default();
                    match data.first() {
                    // A stdin that will not take more (closed) is not written again.
                    Some(&STDIN) if stdin_open && !attachable.write_stdin(&data[1..]).await => {
                        stdin_open = false;
                    }
                    Some(&CLOSE) if data.get(1) == Some(&STDIN) && stdin_open => {
                        stdin_open = false;
                        attachable.client_closed_stdin().await;
                    }
                    Some(&RESIZE) => {
                        if let Some(size) = Size::parse(&data[1..])
                            && let Err(e) = attachable.resize(&size)
                        {
                            tracing::debug!(error = %e, "attach: a resize failed");
                        }
                    }
                    _ => {}
                    }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break true,
                Some(Ok(_)) => {}
            },
            _ = tick.tick() => {
                loop {
                    let n = log.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    if let Some(channel) = out
                        && tx.send(framed(channel, &buf[..n])).await.is_err()
                    {
                        break;
                    }
                }
                match exited_at {
                    Some(at) if at.elapsed() >= TRAIL => break false,
                    Some(_) => {}
                    None if running.pid(&req.container) != Some(pid) => {
                        exited_at = Some(tokio::time::Instant::now());
                    }
                    None => {}
                }
            }
        }
    };
    if stdin_open {
        attachable.client_closed_stdin().await;
    }
    if gone {
        tracing::info!("attach ended: the client went away; the container runs on");
        return;
    }
    tracing::info!("attach ended: the container exited");
    use std::os::unix::process::ExitStatusExt;
    let success = Ok(std::process::ExitStatus::from_raw(0));
    finish(&mut tx, &mut rx, &success).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attach_query_names_the_container_and_the_streams() {
        let a = parse_attach("namespace=default&pod=web&container=main&stdin=true&stdout=1&tty=1")
            .unwrap();
        assert_eq!(a.container.container, "main");
        assert!(a.stdin && a.stdout && a.tty && !a.stderr);
        assert_eq!(output_channel(&a), Some(STDOUT));
        let err_only =
            parse_attach("namespace=default&pod=web&container=main&stderr=true").unwrap();
        assert_eq!(output_channel(&err_only), Some(STDERR));
        assert_eq!(
            parse_attach("namespace=default&pod=web&container=main"),
            Err(Refusal::NoStreams)
        );
        assert_eq!(
            parse_attach("namespace=default&pod=web&stdout=1"),
            Err(Refusal::Missing("container"))
        );
    }
}
