//! kube's channel protocol over a WebSocket, what exec, attach and port-forward's channels
//! share:
//! a message on a channel (its first byte), and ending a session well (a normal closure,
//! then the closing handshake).

use std::time::Duration;

use tokio_tungstenite::tungstenite::Message;

/// Channels of kube's remote command protocol (exec, attach): the first byte of each
/// message.
pub const STDIN: u8 = 0;
pub const STDOUT: u8 = 1;
pub const STDERR: u8 = 2;
/// The session's end: a `Status` (success, or the exit code).
pub const ERROR: u8 = 3;
/// A terminal's new size, `{"Width": W, "Height": H}`.
pub const RESIZE: u8 = 4;
/// v5: a client's `[CLOSE, channel]` ends that channel (stdin).
pub const CLOSE: u8 = 255;

/// Bytes read from a command's output per message.
pub const CHUNK: usize = 32 * 1024;

/// A binary message on `channel`.
pub fn framed(channel: u8, data: &[u8]) -> Message {
    let mut out = Vec::with_capacity(1 + data.len());
    out.push(channel);
    out.extend_from_slice(data);
    Message::Binary(out.into())
}

/// The bytes of a channel message: binary, or text as the Python client sends what it
/// writes as a string (kube's servers take both).
pub fn payload(msg: Message) -> Option<bytes::Bytes> {
    match msg {
        Message::Binary(b) => Some(b),
        Message::Text(t) => Some(bytes::Bytes::from(t.as_str().as_bytes().to_vec())),
        _ => None,
    }
}

/// How long a closing WebSocket waits for the client's close in answer.
pub const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// A WebSocket's normal closure (1000): clients read a close without a code as an error.
pub fn normal_close() -> Message {
    use tokio_tungstenite::tungstenite::protocol::frame::CloseFrame;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
    Message::Close(Some(CloseFrame {
        code: CloseCode::Normal,
        reason: "".into(),
    }))
}

/// Close a WebSocket as its closing handshake asks: a normal closure (1000), then what the
/// client still sends is read (and dropped) until its own close, or [`CLOSE_WAIT`]. Dropping
/// the connection with the client's bytes unread would answer them with a reset, and a
/// reset makes every proxy on the way drop what it had not yet passed on — the session's
/// last messages, its exit status among them.
pub async fn close_gracefully<T, R>(tx: &mut T, rx: &mut R)
where
    T: futures::Sink<Message> + Unpin,
    R: futures::Stream + Unpin,
{
    use futures::{SinkExt, StreamExt};
    let _ = tx.send(normal_close()).await;
    let _ = tx.flush().await;
    let _ = tokio::time::timeout(CLOSE_WAIT, async { while rx.next().await.is_some() {} }).await;
    let _ = tx.close().await;
}
