//! A WebSocket carrying a byte stream, as kubectl 1.31 and later tunnel port-forward's
//! SPDY in one (subprotocol `SPDY/3.1+portforward.k8s.io`): the bytes of binary messages,
//! in order, are the stream one way; each write becomes a binary message the other way.

use bytes::BytesMut;
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

/// Bytes buffered each way between the WebSocket and the stream, and the most sent in one
/// message.
const BUFFER: usize = 256 * 1024;
const MESSAGE: usize = 64 * 1024;

/// The byte stream `ws` carries. A task copies between them until both directions ended;
/// the WebSocket is then closed normally.
pub fn bytes_of<S>(ws: WebSocketStream<S>) -> DuplexStream
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (ours, theirs) = tokio::io::duplex(BUFFER);
    tokio::spawn(async move {
        let (mut to_ws, mut from_ws) = ws.split();
        let (mut rd, mut wr) = tokio::io::split(theirs);
        let inbound = async move {
            while let Some(Ok(msg)) = from_ws.next().await {
                match msg {
                    Message::Binary(b) if wr.write_all(&b).await.is_err() => break,
                    Message::Close(_) => break,
                    _ => {}
                }
            }
            let _ = wr.shutdown().await;
        };
        let outbound = async move {
            let mut buf = BytesMut::with_capacity(MESSAGE);
            loop {
                buf.reserve(MESSAGE);
                match rd.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let msg = Message::Binary(buf.split().freeze());
                        if to_ws.send(msg).await.is_err() {
                            return;
                        }
                    }
                }
            }
            // The client's close still arrives through `inbound`, which reads to the end.
            let _ = to_ws.send(super::channel::normal_close()).await;
            let _ = to_ws.close().await;
        };
        tokio::join!(inbound, outbound);
    });
    ours
}
