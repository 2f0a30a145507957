//! `portforward`, as kubelet serves it: each connection a client forwards becomes a TCP
//! connection to the Pod's address on the port asked for, its bytes copied both ways, and
//! a failure to connect is said on that connection's error stream while the others carry
//! on. Two framings of the same thing:
//! - SPDY ([`super::spdy`]; raw, or tunneled in a WebSocket by kubectl 1.31 and later): the
//!   client opens an `error` and a `data` stream per connection, paired by their
//!   `requestID` header, the port in their `port` header;
//! - WebSocket channels (`v4.channel.k8s.io`, kube-rs and the Python client): the ports are
//!   in the query, one connection each for the session, port `i` on channels `2i` (data)
//!   and `2i + 1` (error), each channel's first message from the server the port
//!   (little-endian `u16`).

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};

use bytes::{Bytes, BytesMut};
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

use super::channel::framed;
use super::refusal::Refusal;
use super::spdy;
use crate::node::running::PodRef;

/// The WebSocket subprotocols served, preferred first.
pub const TUNNEL_PROTOCOL: &str = "SPDY/3.1+portforward.k8s.io";
pub const CHANNEL_PROTOCOL: &str = "v4.channel.k8s.io";
pub const PROTOCOLS: [&str; 2] = [TUNNEL_PROTOCOL, CHANNEL_PROTOCOL];
/// The stream protocol a SPDY client names in `X-Stream-Protocol-Version`.
pub const SPDY_PROTOCOL: &str = "portforward.k8s.io";

/// Ports of one WebSocket session at most: channel numbers are one byte.
const MAX_PORTS: usize = 64;
/// Streams waiting for the other of their pair, at most, per connection.
const MAX_UNPAIRED: usize = 256;
/// Bytes read from the Pod per chunk.
const CHUNK: usize = 32 * 1024;
/// How long the client's bytes still go to a Pod that closed its side.
const AFTER_POD_CLOSED: std::time::Duration = std::time::Duration::from_secs(1);

/// A `portforward` asked for: which Pod, and for WebSocket channels, which ports.
#[derive(Debug, PartialEq, Eq)]
pub struct PortForwardRequest {
    pub pod: PodRef,
    pub ports: Vec<u16>,
}

/// A port as kubelet reads one, with its wording when it cannot.
fn port_of(s: &str) -> Result<u16, String> {
    match s.trim().parse::<u16>() {
        Ok(0) => Err(format!("port {s:?} must be > 0")),
        Ok(p) => Ok(p),
        Err(e) => Err(format!("unable to parse {s:?} as a port: {e}")),
    }
}

/// The query of `/portforward`: `namespace`, `pod`, and `ports` (comma-separated, possibly
/// repeated; `port` too).
pub fn parse_portforward(query: &str) -> Result<PortForwardRequest, Refusal> {
    let (mut namespace, mut pod, mut ports) = (None, None, Vec::new());
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        match k.as_ref() {
            "namespace" => namespace = Some(v.into_owned()),
            "pod" => pod = Some(v.into_owned()),
            "ports" | "port" => {
                for p in v.split(',') {
                    ports.push(port_of(p).map_err(Refusal::Port)?);
                    if ports.len() > MAX_PORTS {
                        return Err(Refusal::TooManyPorts);
                    }
                }
            }
            _ => {}
        }
    }
    Ok(PortForwardRequest {
        pod: PodRef {
            namespace: namespace
                .filter(|s| !s.is_empty())
                .ok_or(Refusal::Missing("namespace"))?,
            name: pod
                .filter(|s| !s.is_empty())
                .ok_or(Refusal::Missing("pod"))?,
        },
        ports,
    })
}

/// One forwarded connection as a framing carries it: the client's bytes (ending when it
/// closes its side), a sender for the bytes back (dropped: this side closes), and `reset`,
/// resolving when the client drops the connection.
struct ClientSide {
    from: mpsc::Receiver<Bytes>,
    to: mpsc::Sender<Bytes>,
    reset: oneshot::Receiver<()>,
}

/// Connect to `port` of the Pod at `ip` and copy bytes both ways: the client's close
/// closes the Pod's side for writing; the Pod's close ends the connection. The error is
/// the one the client is told.
async fn forward(pod: &PodRef, ip: Ipv4Addr, port: u16, client: ClientSide) -> Result<(), String> {
    let ClientSide {
        mut from,
        to,
        mut reset,
    } = client;
    let conn = tokio::net::TcpStream::connect(SocketAddrV4::new(ip, port))
        .await
        .map_err(|e| {
            format!(
                "error forwarding port {port} to pod {}: failed to connect to {ip}:{port}: {e}",
                pod.name
            )
        })?;
    let _ = conn.set_nodelay(true);
    let (mut r, mut w) = conn.into_split();
    let up = async move {
        while let Some(b) = from.recv().await {
            if w.write_all(&b).await.is_err() {
                return;
            }
        }
        let _ = w.shutdown().await;
    };
    let down = async move {
        let mut buf = BytesMut::with_capacity(CHUNK);
        loop {
            buf.reserve(CHUNK);
            match r.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    if to.send(buf.split().freeze()).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    let copied = async {
        tokio::pin!(up);
        tokio::pin!(down);
        tokio::select! {
            // The client closed its side: the Pod's answer still comes.
            _ = &mut up => (&mut down).await,
            // The Pod closed: what the client still sends has a moment to arrive, as
            // kubelet's runtimes give it, then the connection ends.
            _ = &mut down => {
                let _ = tokio::time::timeout(AFTER_POD_CLOSED, &mut up).await;
            }
        }
    };
    tokio::select! {
        _ = copied => {}
        _ = &mut reset => tracing::debug!(port, "a forwarded connection was reset by the client"),
    }
    Ok(())
}

/// One half of a SPDY connection pair, waiting for the other.
#[derive(Default)]
struct Pair {
    error: Option<spdy::Stream>,
    data: Option<spdy::Stream>,
}

/// Serve port-forward over a SPDY connection on `io` (raw or tunneled) for the Pod at `ip`.
pub async fn serve_spdy<IO>(io: IO, pod: PodRef, ip: Ipv4Addr)
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let (accept, mut accepted) = mpsc::channel(16);
    let session = tokio::spawn(spdy::serve(io, accept));
    let mut unpaired: HashMap<String, Pair> = HashMap::new();
    let mut connections = 0u64;
    while let Some(s) = accepted.recv().await {
        // A client too old to send `requestID` pairs a data stream with the error stream
        // opened just before it, as kubelet pairs them.
        let kind = s.header("streamtype").unwrap_or("").to_string();
        let request = match (s.header("requestid"), kind.as_str()) {
            (Some(r), _) => r.to_string(),
            (None, "data") => s.id.saturating_sub(2).to_string(),
            (None, _) => s.id.to_string(),
        };
        // A stream of neither kind is dropped, which closes it.
        if !matches!(kind.as_str(), "error" | "data")
            || (!unpaired.contains_key(&request) && unpaired.len() >= MAX_UNPAIRED)
        {
            tracing::debug!(kind, "a port-forward stream was dropped");
            continue;
        }
        let pair = unpaired.entry(request.clone()).or_default();
        if kind == "error" {
            pair.error = Some(s);
        } else {
            pair.data = Some(s);
        }
        if pair.error.is_none() || pair.data.is_none() {
            continue;
        }
        let Some(Pair {
            error: Some(error),
            data: Some(data),
        }) = unpaired.remove(&request)
        else {
            continue;
        };
        connections += 1;
        let pod = pod.clone();
        tokio::spawn(async move {
            let result = match data.header("port").map(port_of) {
                Some(Ok(port)) => {
                    let client = ClientSide {
                        from: data.from_peer,
                        to: data.to_peer,
                        reset: data.reset,
                    };
                    forward(&pod, ip, port, client).await
                }
                Some(Err(e)) => Err(e),
                None => Err("the data stream names no port".to_string()),
            };
            if let Err(message) = result {
                tracing::info!(%message, "a forwarded connection failed");
                let _ = error.to_peer.send(Bytes::from(message)).await;
            }
            // The error stream's close tells the client this connection is over.
        });
    }
    if let Ok(Err(e)) = session.await {
        tracing::debug!(error = %e, "a port-forward connection ended on an error");
    }
    tracing::info!(connections, "port-forward session ended");
}

/// Serve port-forward over WebSocket channels for the Pod at `ip`: one connection per port
/// of `ports`, for as long as the session lasts; it closes once every one ended.
pub async fn serve_channels<S>(ws: WebSocketStream<S>, pod: PodRef, ip: Ipv4Addr, ports: Vec<u16>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut to_ws, mut from_ws) = ws.split();
    let (out, mut queued) = mpsc::channel::<Message>(64);
    let mut inputs = Vec::with_capacity(ports.len());
    let mut resets = Vec::with_capacity(ports.len());
    let mut tasks = tokio::task::JoinSet::new();
    for (i, port) in ports.iter().copied().enumerate() {
        let (data, error) = (2 * i as u8, 2 * i as u8 + 1);
        for ch in [data, error] {
            let _ = out.send(framed(ch, &port.to_le_bytes())).await;
        }
        let (to_forward, from) = mpsc::channel(16);
        let (to, mut back) = mpsc::channel::<Bytes>(16);
        let (reset_tx, reset) = oneshot::channel();
        inputs.push(Some(to_forward));
        resets.push(reset_tx);
        let (out, pod) = (out.clone(), pod.clone());
        tasks.spawn(async move {
            let relay = async {
                while let Some(b) = back.recv().await {
                    if out.send(framed(data, &b)).await.is_err() {
                        break;
                    }
                }
            };
            let client = ClientSide { from, to, reset };
            let (result, ()) = tokio::join!(forward(&pod, ip, port, client), relay);
            if let Err(message) = result {
                tracing::info!(%message, "a forwarded connection failed");
                let _ = out.send(framed(error, message.as_bytes())).await;
            }
        });
    }
    drop(out);
    // Messages go out until every connection ended; the session then closes.
    let writer = async move {
        while let Some(m) = queued.recv().await {
            if to_ws.send(m).await.is_err() {
                return None;
            }
        }
        Some(to_ws)
    };
    let reader = async {
        while let Some(Ok(msg)) = from_ws.next().await {
            let data = match msg {
                Message::Close(_) => break,
                m => match super::channel::payload(m) {
                    Some(b) => b,
                    None => continue,
                },
            };
            let Some(&ch) = data.first() else {
                continue;
            };
            let i = usize::from(ch / 2);
            if ch % 2 != 0 || data.len() == 1 {
                continue;
            }
            if let Some(slot) = inputs.get_mut(i)
                && let Some(tx) = slot
                && tx.send(data.slice(1..)).await.is_err()
            {
                *slot = None;
            }
        }
        // The client is gone: every connection is reset.
        drop(resets);
    };
    let forwards = async { while tasks.join_next().await.is_some() {} };
    let all_ended = async { tokio::join!(writer, forwards).0 };
    tokio::pin!(reader);
    tokio::select! {
        _ = &mut reader => {}
        to_ws = all_ended => {
            if let Some(mut to_ws) = to_ws {
                // The closing handshake: the client's close comes through the reader.
                let _ = to_ws.send(super::channel::normal_close()).await;
                let _ = tokio::time::timeout(super::channel::CLOSE_WAIT, &mut reader).await;
                let _ = to_ws.close().await;
            }
        }
    }
    tracing::info!(ports = ?ports, "port-forward session ended");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_portforward_query_names_the_pod_and_its_ports() {
        let r = parse_portforward("namespace=shop&pod=web&ports=80,8080&ports=9000").unwrap();
        assert_eq!(r.pod.name, "web");
        assert_eq!(r.ports, [80, 8080, 9000]);
        assert_eq!(
            parse_portforward("namespace=shop&pod=web").unwrap().ports,
            Vec::<u16>::new()
        );
    }

    #[test]
    fn bad_ports_get_kubelets_words() {
        assert_eq!(
            parse_portforward("namespace=a&pod=b&ports=0"),
            Err(Refusal::Port("port \"0\" must be > 0".into()))
        );
        let Err(Refusal::Port(m)) = parse_portforward("namespace=a&pod=b&ports=http") else {
            panic!("a name is not a port")
        };
        assert!(m.starts_with("unable to parse \"http\" as a port"), "{m}");
        assert!(parse_portforward("namespace=a&pod=b&ports=70000").is_err());
        let many = vec!["1"; MAX_PORTS + 1].join(",");
        assert_eq!(
            parse_portforward(&format!("namespace=a&pod=b&ports={many}")),
            Err(Refusal::TooManyPorts)
        );
        assert_eq!(
            parse_portforward("pod=b&ports=1"),
            Err(Refusal::Missing("namespace"))
        );
    }
}
