//! Idle HTTP/1.1 connections to one endpoint, reused newest first.
//!
//! A connection is taken by one exchange at a time and put back when its response ended
//! cleanly; one that the endpoint closed while idle is noticed when taken (a read would
//! not block) and dropped. While the pool holds connections a reaper task looks at them
//! every [`REAP_EVERY`] and closes those the endpoint closed or that idled past the
//! timeout, so that a proxy whose traffic stopped keeps no half-closed sockets. The pool
//! lives in the endpoint's attachment slot with the rest of its upstream pools, so draining the
//! endpoint drops it and closes the idle connections.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, ReadBuf};

use crate::dial::{DialError, Upstream, dial};
use crate::tunnel::Peer;

/// Idle connections kept per endpoint; more are closed when they come back.
const MAX_IDLE: usize = 256;
/// How often the reaper looks at idle connections.
pub const REAP_EVERY: Duration = Duration::from_secs(5);

pub struct IdlePool {
    addr: SocketAddr,
    via: Option<Arc<Peer>>,
    connect_timeout: Duration,
    idle_timeout: Duration,
    idle: Mutex<Vec<(Upstream, Instant)>>,
    /// A reaper task runs (it ends when the pool is empty or gone).
    reaping: AtomicBool,
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
            reaping: AtomicBool::new(false),
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
    pub fn put(self: &Arc<Self>, conn: Upstream) {
        {
            let Ok(mut idle) = self.idle.lock() else {
                return;
            };
            let now = Instant::now();
            idle.retain(|(_, since)| now.duration_since(*since) < self.idle_timeout);
            if idle.len() < MAX_IDLE {
                idle.push((conn, now));
            }
        }
        // A load first: the common case (a reaper runs) costs no read-modify-write.
        if !self.reaping.load(Ordering::Acquire) && !self.reaping.swap(true, Ordering::AcqRel) {
            tokio::spawn(reap(Arc::downgrade(self)));
        }
    }

    pub fn idle(&self) -> usize {
        self.idle.lock().map_or(0, |i| i.len())
    }
}

/// Close the idle connections that the endpoint closed or that idled too long, every
/// [`REAP_EVERY`], until the pool is empty or dropped.
async fn reap(pool: Weak<IdlePool>) {
    loop {
        tokio::time::sleep(REAP_EVERY).await;
        let Some(pool) = pool.upgrade() else {
            return;
        };
        let Ok(mut idle) = pool.idle.lock() else {
            return;
        };
        idle.retain_mut(|(conn, since)| since.elapsed() < pool.idle_timeout && still_open(conn));
        if idle.is_empty() {
            // A `put` after this starts a new reaper; one before it is seen here.
            pool.reaping.store(false, Ordering::Release);
            return;
        }
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
