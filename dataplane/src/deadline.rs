//! A write deadline for client connections: a client that stops reading (its receive
//! window full) makes every write toward it pend forever, holding the request, the
//! endpoint it is in flight on and the upstream connection. [`WriteDeadline`] fails a
//! write, flush or shutdown that makes no progress for [`WRITE_TIMEOUT`] with `TimedOut`,
//! which ends the connection. Reads are untouched: idle clients are the header-read and
//! keep-alive timeouts' business.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// How long a write toward a client may make no progress.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// `inner` with a deadline on each write that makes no progress.
pub struct WriteDeadline<I> {
    inner: I,
    timeout: Duration,
    /// Armed while a write pends; cleared on progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<I> WriteDeadline<I> {
    pub fn new(inner: I, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            stalled: None,
        }
    }

    /// `poll` of the inner stream's write side, failing once it pended for the timeout.
    fn guard<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: impl FnOnce(&mut I, &mut Context<'_>) -> Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match poll(&mut self.inner, cx) {
            Poll::Ready(r) => {
                self.stalled = None;
                Poll::Ready(r)
            }
            Poll::Pending => {
                let timeout = self.timeout;
                let sleep = self
                    .stalled
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                match sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("the client read nothing for {timeout:?}"),
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for WriteDeadline<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.guard(cx, |i, cx| Pin::new(i).poll_write(cx, buf))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.guard(cx, |i, cx| Pin::new(i).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.guard(cx, |i, cx| Pin::new(i).poll_flush(cx))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.guard(cx, |i, cx| Pin::new(i).poll_shutdown(cx))
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn a_client_that_stops_reading_is_let_go() {
        let (near, mut far) = tokio::io::duplex(1024);
        let mut w = WriteDeadline::new(near, Duration::from_millis(200));
        // The client reads the first kilobyte, then nothing.
        w.write_all(&[1; 1024]).await.unwrap();
        let mut got = [0; 1024];
        far.read_exact(&mut got).await.unwrap();
        let err = w.write_all(&[2; 4096]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }

    #[tokio::test]
    async fn a_slow_reader_that_keeps_reading_is_not() {
        let (near, mut far) = tokio::io::duplex(64);
        let mut w = WriteDeadline::new(near, Duration::from_millis(300));
        let reader = tokio::spawn(async move {
            let mut all = Vec::new();
            let mut buf = [0; 64];
            loop {
                tokio::time::sleep(Duration::from_millis(20)).await;
                match far.read(&mut buf).await {
                    Ok(0) | Err(_) => return all.len(),
                    Ok(n) => all.extend_from_slice(&buf[..n]),
                }
            }
        });
        // 64 bytes every 20 ms: 2 KiB takes about 640 ms, over twice the deadline.
        w.write_all(&[3; 2048]).await.unwrap();
        w.shutdown().await.unwrap();
        drop(w);
        assert_eq!(reader.await.unwrap(), 2048);
    }
}
