//! One proxied connection as an HTTP/2 CONNECT stream, on the `h2` crate directly.
//!
//! hyper hands a CONNECT stream over as an upgraded connection that copies every write
//! into a fresh buffer and passes it through a channel to a task of its own, which then
//! feeds h2: one allocation, one copy and one task wake-up per write. Here both ends talk
//! to h2's stream handles themselves: the client side ([`H2Stream`]) is an
//! `AsyncRead + AsyncWrite` for whatever the proxy runs over it (its HTTP pools); where a
//! stream carries a socket's bytes as they are — the gateway's connection to an endpoint,
//! a TCP service's client — [`relay`] reads the socket into buffers h2 sends as they are,
//! and writes the frames h2 received straight into the socket.
//!
//! Also here: the keepalive both ends run on their connection ([`keepalive`]).

use std::collections::VecDeque;
use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes, BytesMut};
use h2::{PingPong, RecvStream, SendStream};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use super::transport::{KEEPALIVE, KEEPALIVE_TIMEOUT};

/// Bytes read from a socket at once by [`relay`] (one DATA send).
const READ_CHUNK: usize = 64 * 1024;
/// DATA frames written to a socket at once at most (one vectored write): h2 hands over one
/// received frame at a time, and a peer's frames may be as small as 16 KiB.
const GATHER_FRAMES: usize = 8;

/// Why a keepalive gave up on its connection.
#[derive(Debug, thiserror::Error)]
pub enum KeepaliveError {
    #[error("no PING answer within {0:?}")]
    Silent(std::time::Duration),
    #[error("PING failed: {0}")]
    Ping(#[from] h2::Error),
}

/// PING the peer every [`KEEPALIVE`] and fail when an answer takes longer than
/// [`KEEPALIVE_TIMEOUT`]: the connection is then dropped, so a silent peer is noticed
/// within both while no stream carries traffic. Runs beside the connection's future.
pub async fn keepalive(ping_pong: PingPong) -> KeepaliveError {
    keepalive_every(ping_pong, KEEPALIVE, KEEPALIVE_TIMEOUT).await
}

/// PING the peer every `every` and fail when an answer takes longer than `timeout`.
pub async fn keepalive_every(
    mut ping_pong: PingPong,
    every: std::time::Duration,
    timeout: std::time::Duration,
) -> KeepaliveError {
    loop {
        tokio::time::sleep(every).await;
        match tokio::time::timeout(timeout, ping_pong.ping(h2::Ping::opaque())).await {
            Ok(Ok(_pong)) => {}
            Ok(Err(e)) => return KeepaliveError::Ping(e),
            Err(_) => return KeepaliveError::Silent(timeout),
        }
    }
}

/// An h2 error as an I/O error: a reset stream as a reset connection, as TCP's RST.
fn io_error(e: h2::Error) -> std::io::Error {
    if e.is_io() {
        return e
            .into_io()
            .unwrap_or_else(|| std::io::Error::other("h2 I/O error"));
    }
    if e.is_reset() {
        return std::io::Error::new(std::io::ErrorKind::ConnectionReset, e);
    }
    std::io::Error::other(e)
}

/// A stream reset with NO_ERROR or CANCEL reads as the end of its data, as hyper's
/// upgraded streams read it: the gateway cancels a stream when its endpoint's connection
/// ends abruptly, and a peer that is done cancels rather than wait.
fn ends_data(e: &h2::Error) -> bool {
    matches!(e.reason(), Some(h2::Reason::NO_ERROR | h2::Reason::CANCEL))
}

/// The client's end of a CONNECT stream, as a socket.
pub struct H2Stream {
    send: SendStream<Bytes>,
    recv: RecvStream,
    /// Received and not yet read.
    pending: Bytes,
}

impl H2Stream {
    pub fn new(send: SendStream<Bytes>, recv: RecvStream) -> Self {
        Self {
            send,
            recv,
            pending: Bytes::new(),
        }
    }

    /// The stream's halves, for [`relay`]; only before anything was read.
    pub(crate) fn into_parts(self) -> (SendStream<Bytes>, RecvStream) {
        debug_assert!(self.pending.is_empty());
        (self.send, self.recv)
    }
}

impl AsyncRead for H2Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let me = self.get_mut();
        while me.pending.is_empty() {
            match ready!(me.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    // The window opens as data arrives: at most one frame waits here.
                    let _ = me.recv.flow_control().release_capacity(data.len());
                    me.pending = data;
                }
                Some(Err(e)) if ends_data(&e) => return Poll::Ready(Ok(())),
                Some(Err(e)) => return Poll::Ready(Err(io_error(e))),
                None => return Poll::Ready(Ok(())),
            }
        }
        let n = me.pending.len().min(buf.remaining());
        buf.put_slice(&me.pending[..n]);
        me.pending.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for H2Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let me = self.get_mut();
        me.send.reserve_capacity(buf.len());
        loop {
            match ready!(me.send.poll_capacity(cx)) {
                Some(Ok(0)) => continue,
                Some(Ok(n)) => {
                    let n = n.min(buf.len());
                    me.send
                        .send_data(Bytes::copy_from_slice(&buf[..n]), false)
                        .map_err(io_error)?;
                    return Poll::Ready(Ok(n));
                }
                Some(Err(e)) => return Poll::Ready(Err(io_error(e))),
                None => {
                    return Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()));
                }
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        // h2's connection task writes what was sent.
        Poll::Ready(Ok(()))
    }

    /// END_STREAM: the peer reads the end, and can still send (a half-close, as TCP's FIN).
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let me = self.get_mut();
        me.send.reserve_capacity(0);
        Poll::Ready(me.send.send_data(Bytes::new(), true).map_err(io_error))
    }
}

/// Relay a CONNECT stream and a socket both ways until both have ended: the gateway's
/// end (the socket is the endpoint's) and, for TCP services, the proxy's (the client's).
/// Data read from the socket goes to h2 in the buffer it was read into, frames received
/// go to the socket as they are (several in one vectored write). A stream the peer ended
/// with NO_ERROR or CANCEL ends the way to the socket as an end of data would, and the
/// other way with it; a reset socket cancels the stream. Returns the bytes carried (to the
/// socket, from it).
pub async fn relay(
    mut send: SendStream<Bytes>,
    mut recv: RecvStream,
    mut socket: TcpStream,
) -> std::io::Result<(u64, u64)> {
    let (mut from_socket, mut to_socket) = socket.split();
    let to = async {
        let mut carried = 0u64;
        let mut frames = VecDeque::new();
        loop {
            let ended = gather(&mut recv, &mut frames).await?;
            let mut gathered = 0;
            while !frames.is_empty() {
                let n = write_frames(&mut to_socket, &frames).await?;
                gathered += n;
                consume(&mut frames, n);
            }
            carried += gathered as u64;
            let _ = recv.flow_control().release_capacity(gathered);
            if ended {
                break;
            }
        }
        to_socket.shutdown().await?;
        Ok::<_, std::io::Error>(carried)
    };
    let from = async {
        let mut carried = 0u64;
        let mut buf = BytesMut::new();
        loop {
            if buf.capacity() < READ_CHUNK / 4 {
                // The last chunk's memory is still queued in h2: a new buffer.
                buf = BytesMut::with_capacity(READ_CHUNK);
            }
            let read = tokio::select! {
                read = from_socket.read_buf(&mut buf) => read,
                // The peer reset the stream: nothing more goes this way.
                _ = std::future::poll_fn(|cx| send.poll_reset(cx)) => return Ok(carried),
            };
            let n = match read {
                Ok(n) => n,
                Err(e) => {
                    send.send_reset(h2::Reason::CANCEL);
                    return Err(e);
                }
            };
            if n == 0 {
                send.send_data(Bytes::new(), true).map_err(io_error)?;
                return Ok(carried);
            }
            carried += n as u64;
            let mut chunk = buf.split().freeze();
            while !chunk.is_empty() {
                send.reserve_capacity(chunk.len());
                let granted = std::future::poll_fn(|cx| send.poll_capacity(cx))
                    .await
                    .ok_or(std::io::ErrorKind::BrokenPipe)?
                    .map_err(io_error)?;
                if granted == 0 {
                    continue;
                }
                send.send_data(chunk.split_to(granted.min(chunk.len())), false)
                    .map_err(io_error)?;
            }
        }
    };
    tokio::try_join!(to, from)
}

/// Wait for the next DATA frame and take those already received behind it. True when the
/// stream has ended (after what was gathered).
async fn gather(recv: &mut RecvStream, frames: &mut VecDeque<Bytes>) -> std::io::Result<bool> {
    // An empty DATA frame (END_STREAM sent on its own) is not queued: a vectored write of
    // nothing but empty slices returns 0, which reads as a socket that stopped taking
    // data (`WriteZero`), and the stream would be cancelled short of its end.
    match recv.data().await {
        Some(Ok(data)) if data.is_empty() => {}
        Some(Ok(data)) => frames.push_back(data),
        Some(Err(e)) if ends_data(&e) => return Ok(true),
        Some(Err(e)) => return Err(io_error(e)),
        None => return Ok(true),
    }
    while frames.len() < GATHER_FRAMES {
        match std::future::poll_fn(|cx| Poll::Ready(recv.poll_data(cx))).await {
            Poll::Ready(Some(Ok(data))) if data.is_empty() => {}
            Poll::Ready(Some(Ok(data))) => frames.push_back(data),
            Poll::Ready(Some(Err(e))) if ends_data(&e) => return Ok(true),
            Poll::Ready(Some(Err(e))) => return Err(io_error(e)),
            Poll::Ready(None) => return Ok(true),
            Poll::Pending => break,
        }
    }
    Ok(false)
}

/// One vectored write of the gathered frames: the bytes written.
async fn write_frames<W: AsyncWrite + Unpin>(
    to: &mut W,
    frames: &VecDeque<Bytes>,
) -> std::io::Result<usize> {
    let mut slices = [IoSlice::new(&[]); GATHER_FRAMES];
    let mut count = 0;
    for (slice, frame) in slices.iter_mut().zip(frames) {
        *slice = IoSlice::new(frame);
        count += 1;
    }
    match to.write_vectored(&slices[..count]).await? {
        0 => Err(std::io::ErrorKind::WriteZero.into()),
        n => Ok(n),
    }
}

/// Drop the first `n` bytes of `frames`.
fn consume(frames: &mut VecDeque<Bytes>, mut n: usize) {
    while n > 0 {
        let Some(front) = frames.front_mut() else {
            return;
        };
        if front.len() <= n {
            n -= front.len();
            frames.pop_front();
        } else {
            front.advance(n);
            n = 0;
        }
    }
    while frames.front().is_some_and(Bytes::is_empty) {
        frames.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// A client that sends END_STREAM in an empty DATA frame of its own, after its data
    /// has reached the socket: the relay ends the socket's write side and carries the
    /// socket's answer back to the end, instead of cancelling the stream (which the client
    /// reads as an early end of the answer).
    #[tokio::test]
    async fn end_stream_alone_in_an_empty_frame_ends_the_way_cleanly() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dialled = TcpStream::connect(listener.local_addr().unwrap());
        let (dialled, accepted) = tokio::join!(dialled, listener.accept());
        let (socket, mut endpoint) = (dialled.unwrap(), accepted.unwrap().0);

        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let server = tokio::spawn(async move {
            let mut conn = h2::server::handshake(server_io).await.unwrap();
            let (req, mut respond) = conn.accept().await.unwrap().unwrap();
            tokio::spawn(async move { while conn.accept().await.is_some() {} });
            let send = respond
                .send_response(http::Response::new(()), false)
                .unwrap();
            relay(send, req.into_body(), socket).await
        });
        let (send_request, conn) = h2::client::handshake(client_io).await.unwrap();
        tokio::spawn(conn);
        let mut send_request = send_request.ready().await.unwrap();
        let req = http::Request::builder()
            .method(http::Method::CONNECT)
            .uri("127.0.0.1:1")
            .body(())
            .unwrap();
        let (response, mut send) = send_request.send_request(req, false).unwrap();
        let mut recv = response.await.unwrap().into_body();

        send.send_data(Bytes::from_static(b"hello"), false).unwrap();
        let mut got = [0u8; 5];
        endpoint.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hello");
        send.send_data(Bytes::new(), true).unwrap();
        let mut rest = Vec::new();
        endpoint.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty(), "{rest:?}");
        endpoint.write_all(b"back").await.unwrap();
        endpoint.shutdown().await.unwrap();

        let mut answer = Vec::new();
        while let Some(data) = recv.data().await {
            answer.extend_from_slice(&data.unwrap());
        }
        assert_eq!(answer, b"back");
        assert_eq!(server.await.unwrap().unwrap(), (5, 4));
    }
}
