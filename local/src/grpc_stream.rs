//! A client of `sluice/echo`'s bidirectional gRPC method ([`GRPC_STREAM_METHOD`]) over
//! h2c: open a call, send a message and wait for its reply as often as wanted, then end
//! the call and check its status. The demo keeps one open as a long-lived gRPC stream.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{Request, header};
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::sync::mpsc;

use crate::echo::{
    GRPC_STREAM_METHOD, grpc_frame, proto_string_field, proto_string_of, take_grpc_message,
};

/// Why a stream broke.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("connect: {0}")]
    Connect(std::io::ErrorKind),
    #[error("h2: {0}")]
    Http(#[from] hyper::Error),
    #[error("status {0}")]
    Status(u16),
    #[error("not a usable authority: {0:?}")]
    Authority(String),
    #[error("the call ended before its reply")]
    Ended,
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    #[error("grpc-status {0}")]
    GrpcStatus(String),
    #[error("no grpc-status")]
    NoStatus,
}

/// An open call.
pub struct EchoStream {
    send: mpsc::Sender<Bytes>,
    replies: Incoming,
    buf: BytesMut,
    /// A status that came with the response headers (a call refused at once).
    header_status: Option<String>,
    _connection: Connection,
}

/// The task driving the call's connection, stopped with the call.
struct Connection(tokio::task::JoinHandle<()>);

impl Drop for Connection {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl EchoStream {
    /// Open a call to `addr`, naming `authority`.
    pub async fn open(addr: SocketAddr, authority: &str) -> Result<Self, StreamError> {
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| StreamError::Connect(e.kind()))?;
        let _ = tcp.set_nodelay(true);
        let (mut sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp)).await?;
        let connection = Connection(tokio::spawn(async move {
            let _ = conn.await;
        }));
        let (send, rx) = mpsc::channel::<Bytes>(16);
        let frames = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv()
                .await
                .map(|b| (Ok::<_, std::convert::Infallible>(Frame::data(b)), rx))
        });
        let body = BoxBody::new(http_body_util::StreamBody::new(frames));
        let req = Request::post(format!("http://{authority}{GRPC_STREAM_METHOD}"))
            .header(header::CONTENT_TYPE, "application/grpc")
            .header(header::TE, "trailers")
            .body(body)
            .map_err(|_| StreamError::Authority(authority.to_string()))?;
        let resp = sender.send_request(req).await?;
        if !resp.status().is_success() {
            return Err(StreamError::Status(resp.status().as_u16()));
        }
        let header_status = resp
            .headers()
            .get("grpc-status")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        Ok(Self {
            send,
            replies: resp.into_body(),
            buf: BytesMut::new(),
            header_status,
            _connection: connection,
        })
    }

    /// Send one message and wait up to `timeout` for its reply; the cluster that answered.
    pub async fn round_trip(&mut self, timeout: Duration) -> Result<String, StreamError> {
        if let Some(s) = &self.header_status {
            return Err(StreamError::GrpcStatus(s.clone()));
        }
        let message = grpc_frame(&proto_string_field("ping"));
        self.send
            .send(message)
            .await
            .map_err(|_| StreamError::Ended)?;
        let reply = async {
            loop {
                if let Some(m) = take_grpc_message(&mut self.buf) {
                    return Ok(m);
                }
                match self.replies.frame().await {
                    Some(Ok(f)) => match f.into_data() {
                        Ok(d) => self.buf.extend_from_slice(&d),
                        Err(f) => {
                            return Err(
                                match f.trailers_ref().and_then(|t| t.get("grpc-status")) {
                                    Some(s) if s != "0" => {
                                        StreamError::GrpcStatus(s.to_str().unwrap_or("?").into())
                                    }
                                    _ => StreamError::Ended,
                                },
                            );
                        }
                    },
                    Some(Err(e)) => return Err(e.into()),
                    None => return Err(StreamError::Ended),
                }
            }
        };
        let message = tokio::time::timeout(timeout, reply)
            .await
            .map_err(|_| StreamError::Timeout(timeout))??;
        Ok(answered_by(&message).unwrap_or_default())
    }

    /// End our side and read the call to its end: Ok when its status is 0.
    pub async fn close(self, timeout: Duration) -> Result<(), StreamError> {
        let Self {
            send,
            mut replies,
            _connection,
            ..
        } = self;
        drop(send);
        let rest = async {
            loop {
                match replies.frame().await {
                    Some(Ok(f)) => {
                        if let Ok(t) = f.into_trailers() {
                            return match t.get("grpc-status").and_then(|s| s.to_str().ok()) {
                                Some("0") => Ok(()),
                                Some(s) => Err(StreamError::GrpcStatus(s.into())),
                                None => Err(StreamError::NoStatus),
                            };
                        }
                    }
                    Some(Err(e)) => return Err(e.into()),
                    None => return Err(StreamError::NoStatus),
                }
            }
        };
        tokio::time::timeout(timeout, rest)
            .await
            .map_err(|_| StreamError::Timeout(timeout))?
    }
}

/// The `cluster` field of a reply's JSON (field 1 of the protobuf message).
fn answered_by(message: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(proto_string_of(message)?).ok()?;
    v.get("cluster")?.as_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::echo::{self, EchoConfig};

    #[tokio::test]
    async fn each_message_is_answered_before_the_next_is_sent_and_the_call_ends_ok() {
        let bound = echo::build(EchoConfig::on(
            [127, 0, 0, 1].into(),
            "east",
            "echo-1",
            "shop",
        ))
        .await
        .unwrap();
        let mut s = EchoStream::open(bound.http, "shop").await.unwrap();
        for _ in 0..5 {
            let cluster = s.round_trip(Duration::from_secs(5)).await.unwrap();
            assert_eq!(cluster, "east");
        }
        s.close(Duration::from_secs(5)).await.unwrap();
        bound.shutdown().await;
    }
}
