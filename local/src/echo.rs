//! `sluice/echo` (`sluice echo`): answers HTTP/1.1 and h2c with a JSON body naming the
//! cluster, pod and request, and echoes bytes on a TCP port. Binds `$POD_IP`; on SIGTERM
//! stops accepting and finishes what is in flight.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, header};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Who this echo server is; reported in every answer.
#[derive(Clone, Debug)]
pub struct Identity {
    pub cluster: String,
    pub pod: String,
    pub namespace: String,
}

#[derive(Clone, Debug)]
pub struct EchoConfig {
    pub ip: IpAddr,
    pub http_port: u16,
    pub tcp_port: u16,
    pub identity: Identity,
    /// Percent of HTTP and gRPC answers that are errors (HTTP 500): fault injection, to
    /// see a bad rollout caught.
    pub error_percent: u32,
}

impl EchoConfig {
    /// Serving on `ip` at ephemeral ports, as pod `pod` of `namespace` in `cluster`,
    /// failing nothing: what in-process tests start.
    pub fn on(ip: IpAddr, cluster: &str, pod: &str, namespace: &str) -> Self {
        Self {
            ip,
            http_port: 0,
            tcp_port: 0,
            identity: Identity {
                cluster: cluster.into(),
                pod: pod.into(),
                namespace: namespace.into(),
            },
            error_percent: 0,
        }
    }

    /// From the environment a Pod gets: `POD_IP`, `POD_NAME`, `POD_NAMESPACE`,
    /// `SLUICE_CLUSTER`, `ECHO_HTTP_PORT`, `ECHO_TCP_PORT`, and `ECHO_ERROR_PERCENT`
    /// (applied only in cluster `ECHO_ERROR_CLUSTER` when that is set).
    pub fn from_env() -> Result<Self, EchoError> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        fn parse<T: std::str::FromStr>(
            k: &'static str,
            v: Option<String>,
            default: T,
        ) -> Result<T, EchoError>
        where
            T::Err: std::fmt::Display,
        {
            v.map_or(Ok(default), |v| {
                v.parse()
                    .map_err(|e: T::Err| EchoError::Env(k, e.to_string()))
            })
        }
        Ok(Self {
            ip: parse("POD_IP", var("POD_IP"), [127, 0, 0, 1].into())?,
            http_port: parse("ECHO_HTTP_PORT", var("ECHO_HTTP_PORT"), 8080)?,
            tcp_port: parse("ECHO_TCP_PORT", var("ECHO_TCP_PORT"), 9000)?,
            identity: Identity {
                cluster: var("SLUICE_CLUSTER").unwrap_or_default(),
                pod: var("POD_NAME").unwrap_or_else(|| "echo".into()),
                namespace: var("POD_NAMESPACE").unwrap_or_default(),
            },
            error_percent: match var("ECHO_ERROR_CLUSTER") {
                Some(c) if Some(c.as_str()) != var("SLUICE_CLUSTER").as_deref() => 0,
                _ => parse("ECHO_ERROR_PERCENT", var("ECHO_ERROR_PERCENT"), 0u32)?.min(100),
            },
        })
    }
}

/// A running echo server.
pub struct Bound {
    pub http: SocketAddr,
    pub tcp: SocketAddr,
    shutdown: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Bound {
    /// Stop accepting; wait for in-flight requests and connections to finish.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// The gRPC method `sluice/echo` serves; its reply is a protobuf message whose field 1
/// (string) holds the same JSON an HTTP request gets.
pub const GRPC_METHOD: &str = "/sluice.Echo/Echo";

/// The bidirectional streaming gRPC method: each request message gets one reply message
/// (the same JSON as [`GRPC_METHOD`]'s), sent as soon as the request message arrives; the
/// call ends (status 0) when the client ends its side.
pub const GRPC_STREAM_METHOD: &str = "/sluice.Echo/Stream";

type EchoBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// The first whole gRPC message in `buf`, taken out of it.
pub fn take_grpc_message(buf: &mut bytes::BytesMut) -> Option<Bytes> {
    let len = u32::from_be_bytes(buf.get(1..5)?.try_into().ok()?) as usize;
    if buf.len() < 5 + len {
        return None;
    }
    let mut message = buf.split_to(5 + len);
    Some(message.split_off(5).freeze())
}

/// The reply stream of a [`GRPC_STREAM_METHOD`] call: one message per request message,
/// then trailers.
fn reply_stream(body: hyper::body::Incoming, reply: String) -> EchoBody {
    struct State {
        body: Option<hyper::body::Incoming>,
        buf: bytes::BytesMut,
        reply: String,
        status: Option<&'static str>,
    }
    let state = State {
        body: Some(body),
        buf: bytes::BytesMut::new(),
        reply,
        status: Some("0"),
    };
    let frames = futures::stream::unfold(state, |mut st| async move {
        loop {
            if take_grpc_message(&mut st.buf).is_some() {
                let frame = grpc_frame(&proto_string_field(&st.reply));
                return Some((Ok(hyper::body::Frame::data(frame)), st));
            }
            let Some(body) = st.body.as_mut() else {
                let status = st.status.take()?;
                let mut trailers = http::HeaderMap::new();
                trailers.insert("grpc-status", header::HeaderValue::from_static(status));
                return Some((Ok(hyper::body::Frame::trailers(trailers)), st));
            };
            match body.frame().await {
                Some(Ok(f)) => {
                    if let Ok(d) = f.into_data() {
                        st.buf.extend_from_slice(&d);
                    }
                }
                Some(Err(_)) => {
                    st.body = None;
                    st.status = Some("13");
                }
                None => st.body = None,
            }
        }
    });
    BodyExt::boxed(http_body_util::StreamBody::new(frames))
}

/// A gRPC message frame: compression flag, big-endian length, message.
pub fn grpc_frame(message: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(message.len() + 5);
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    Bytes::from(out)
}

/// Protobuf field 1 (string) holding `s`.
pub fn proto_string_field(s: &str) -> Vec<u8> {
    let mut out = vec![0x0a];
    let mut n = s.len() as u64;
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            break;
        }
        out.push(b | 0x80);
    }
    out.extend_from_slice(s.as_bytes());
    out
}

/// The string in field 1 of a protobuf message made by [`proto_string_field`].
pub fn proto_string_of(message: &[u8]) -> Option<&str> {
    let (&tag, mut rest) = message.split_first()?;
    if tag != 0x0a {
        return None;
    }
    let mut len = 0usize;
    for shift in (0..64).step_by(7) {
        let (&b, r) = rest.split_first()?;
        rest = r;
        len |= usize::from(b & 0x7f).checked_shl(shift)?;
        if b & 0x80 == 0 {
            return std::str::from_utf8(rest.get(..len)?).ok();
        }
    }
    None
}

/// What answers: who, and how often it fails on purpose.
struct Answering {
    identity: Identity,
    error_percent: u32,
    served: std::sync::atomic::AtomicU64,
}

impl Answering {
    /// Whether this answer is one of the `error_percent` in every hundred that fail.
    fn fails(&self) -> bool {
        let n = self
            .served
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        u64::from(self.error_percent) > n % 100
    }
}

async fn answer(
    answering: Arc<Answering>,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<EchoBody>, Infallible> {
    let identity = &answering.identity;
    let grpc = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/grpc"));
    let method = req.method().to_string();
    let path = req.uri().path().to_string();
    let version = format!("{:?}", req.version());
    let traceparent = req
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    if grpc && path == GRPC_STREAM_METHOD {
        let reply = json!({
            "cluster": identity.cluster,
            "pod": identity.pod,
            "namespace": identity.namespace,
            "path": path,
            "protocol": version,
        });
        let mut resp = Response::new(reply_stream(req.into_body(), reply.to_string()));
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/grpc"),
        );
        return Ok(resp);
    }
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes().len())
        .unwrap_or(0);
    let reply = json!({
        "cluster": identity.cluster,
        "pod": identity.pod,
        "namespace": identity.namespace,
        "method": method,
        "path": path,
        "protocol": version,
        "bodyBytes": body,
        "traceparent": traceparent,
    });
    if answering.fails() {
        let mut resp = Response::new(BodyExt::boxed(Full::new(Bytes::from_static(
            b"injected error (ECHO_ERROR_PERCENT)",
        ))));
        *resp.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
        return Ok(resp);
    }
    if grpc {
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", header::HeaderValue::from_static("0"));
        let frames = vec![
            Ok::<_, Infallible>(hyper::body::Frame::data(grpc_frame(&proto_string_field(
                &reply.to_string(),
            )))),
            Ok(hyper::body::Frame::trailers(trailers)),
        ];
        let body = http_body_util::StreamBody::new(futures::stream::iter(frames));
        let mut resp = Response::new(BodyExt::boxed(body));
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/grpc"),
        );
        return Ok(resp);
    }
    let mut resp = Response::new(BodyExt::boxed(Full::new(Bytes::from(reply.to_string()))));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    Ok(resp)
}

/// Why the echo server could not start.
#[derive(Debug, thiserror::Error)]
pub enum EchoError {
    #[error("environment variable {0}: {1}")]
    Env(&'static str, String),
    #[error("binding {0}:{1}: {2}")]
    Bind(std::net::IpAddr, u16, std::io::Error),
}

pub async fn build(config: EchoConfig) -> Result<Bound, EchoError> {
    let bind = |port: u16| async move {
        let l = TcpListener::bind((config.ip, port))
            .await
            .map_err(|e| EchoError::Bind(config.ip, port, e))?;
        let addr = l
            .local_addr()
            .map_err(|e| EchoError::Bind(config.ip, port, e))?;
        Ok::<_, EchoError>((l, addr))
    };
    let (http, bound_http) = bind(config.http_port).await?;
    let (tcp, bound_tcp) = bind(config.tcp_port).await?;
    let (shutdown, rx) = watch::channel(false);
    let identity = Arc::new(Answering {
        identity: config.identity,
        error_percent: config.error_percent,
        served: std::sync::atomic::AtomicU64::new(0),
    });
    let mut http_rx = rx.clone();
    let http_task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let (stream, _) = tokio::select! {
                _ = http_rx.changed() => break,
                a = http.accept() => match a { Ok(a) => a, Err(_) => continue },
            };
            let identity = identity.clone();
            let mut conn_rx = http_rx.clone();
            conns.spawn(async move {
                let _ = stream.set_nodelay(true);
                let svc = service_fn(move |req| answer(identity.clone(), req));
                let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                let conn = builder.serve_connection(TokioIo::new(stream), svc);
                tokio::pin!(conn);
                tokio::select! {
                    _ = conn.as_mut() => {}
                    _ = conn_rx.changed() => {
                        conn.as_mut().graceful_shutdown();
                        let _ = conn.await;
                    }
                }
            });
        }
        while conns.join_next().await.is_some() {}
    });
    let mut tcp_rx = rx.clone();
    let tcp_task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let (mut stream, _) = tokio::select! {
                _ = tcp_rx.changed() => break,
                a = tcp.accept() => match a { Ok(a) => a, Err(_) => continue },
            };
            conns.spawn(async move {
                let (mut r, mut w) = stream.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
        // Open TCP echo connections run until their clients close them.
        while conns.join_next().await.is_some() {}
    });
    Ok(Bound {
        http: bound_http,
        tcp: bound_tcp,
        shutdown,
        tasks: vec![http_task, tcp_task],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn answers_http_and_tcp() {
        let bound = build(EchoConfig::on(
            [127, 0, 0, 1].into(),
            "east",
            "echo-1",
            "shop",
        ))
        .await
        .unwrap();
        let mut s = tokio::net::TcpStream::connect(bound.http).await.unwrap();
        s.write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        let body = out.split("\r\n\r\n").nth(1).unwrap();
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(
            (v["cluster"].as_str(), v["pod"].as_str(), v["path"].as_str()),
            (Some("east"), Some("echo-1"), Some("/hello"))
        );
        let mut t = tokio::net::TcpStream::connect(bound.tcp).await.unwrap();
        t.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        t.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping");
        drop(t);
        bound.shutdown().await;
    }
}
