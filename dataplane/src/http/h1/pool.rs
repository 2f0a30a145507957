//! Idle HTTP/1.1 connections to one endpoint, reused newest first.
//!
//! A connection is taken by one exchange at a time and put back when its response ended
//! cleanly; one that the endpoint closed while idle is noticed when taken (a read would
//! not block) and dropped. The pool lives in the endpoint's pool slot, so draining the
//! endpoint drops it and closes the idle connections.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, ReadBuf};

use crate::dial::{DialError, Upstream, dial};
use crate::tunnel::pool::Peer;

/// Idle connections kept per endpoint; more are closed when they come back.
const MAX_IDLE: usize = 256;

pub struct IdlePool {
    addr: SocketAddr,
    via: Option<Arc<Peer>>,
    connect_timeout: Duration,
    idle_timeout: Duration,
    idle: Mutex<Vec<(Upstream, Instant)>>,
}

impl IdlePool {
    pub fn new(
        addr: SocketAddr,
        via: Option<Arc<Peer>>,
        connect_timeout: Duration,
        idle_timeout: Duration,
    ) -> Self {
        Self {
            addr,
            via,
            connect_timeout,
            idle_timeout,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// The newest idle connection that is still open.
    pub fn take(&self) -> Option<Upstream> {
        let mut idle = self.idle.lock().ok()?;
        while let Some((mut conn, since)) = idle.pop() {
            if since.elapsed() < self.idle_timeout && still_open(&mut conn) {
                return Some(conn);
            }
        }
        None
    }

    /// A new connection.
    pub async fn dial(&self) -> Result<Upstream, DialError> {
        dial(self.addr, self.via.as_ref(), self.connect_timeout).await
    }

    /// Keep `conn` for the next request; connections idle past the timeout go.
    pub fn put(&self, conn: Upstream) {
        let Ok(mut idle) = self.idle.lock() else {
            return;
        };
        let now = Instant::now();
        idle.retain(|(_, since)| now.duration_since(*since) < self.idle_timeout);
        if idle.len() < MAX_IDLE {
            idle.push((conn, now));
        }
    }

    pub fn idle(&self) -> usize {
        self.idle.lock().map_or(0, |i| i.len())
    }
}

/// An idle connection is usable if reading it would block: no EOF, no error, and no
/// stray bytes from the endpoint.
fn still_open(conn: &mut Upstream) -> bool {
    let mut byte = [0u8; 1];
    let mut buf = ReadBuf::new(&mut byte);
    let mut cx = Context::from_waker(Waker::noop());
    matches!(Pin::new(conn).poll_read(&mut cx, &mut buf), Poll::Pending)
}
