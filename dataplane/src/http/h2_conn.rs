//! What both HTTP/2 connection tasks of the proxy keep alike — the client-facing server
//! ([`super::h2_server`]) and the upstream client ([`super::h2_upstream_conn`]): the
//! per-stream wakers that queue a stream's id for the connection's next turn, the map of
//! streams by id, and the outgoing frame buffer with flow-controlled DATA.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Wake;

use bytes::{Bytes, BytesMut};
use futures::task::AtomicWaker;

use crate::http2::frame;
use crate::http2::hpack::Encoder;

impl Default for Out {
    /// An empty buffer with the windows and frame size every connection starts with.
    fn default() -> Self {
        Self {
            buf: BytesMut::with_capacity(16 * 1024),
            block: BytesMut::new(),
            encoder: Encoder::default(),
            window: i64::from(frame::DEFAULT_WINDOW),
            max_frame: frame::DEFAULT_MAX_FRAME_SIZE as usize,
        }
    }
}

/// Wakes the connection for one stream: its id is queued, once, for the next turn.
pub struct StreamWaker {
    pub id: u32,
    pub queued: AtomicBool,
    pub ready: Arc<ReadyQueue>,
}

#[derive(Default)]
pub struct ReadyQueue {
    pub ids: Mutex<Vec<u32>>,
    pub waker: AtomicWaker,
}

impl Wake for StreamWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.queued.swap(true, Ordering::AcqRel) {
            self.ready
                .ids
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(self.id);
            self.ready.waker.wake();
        }
    }
}

/// Stream ids are distinct odd numbers: a multiplicative hash spreads them.
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8 | u64::from(*b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u32(&mut self, n: u32) {
        // The product's high bits depend on all of `n`'s; fold them into the low ones
        // the table's buckets are picked by.
        let h = u64::from(n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = h ^ (h >> 29);
    }
}

/// A connection's streams by id.
pub type Streams<S> = HashMap<u32, S, BuildHasherDefault<IdHasher>>;

/// The frames going to the client.
pub struct Out {
    pub buf: BytesMut,
    /// A header block being encoded.
    pub block: BytesMut,
    pub encoder: Encoder,
    /// What this end may still send on the connection.
    pub window: i64,
    /// The peer's SETTINGS_MAX_FRAME_SIZE.
    pub max_frame: usize,
}

/// How far [`write_data`] got.
pub enum Written {
    All,
    /// The stream's window is spent (its WINDOW_UPDATE makes it runnable again).
    Stream,
    /// The connection's window is spent.
    Connection,
}

/// Queue DATA frames of `data` as far as the windows allow; what is left stays in `data`.
pub fn write_data(
    out: &mut Out,
    id: u32,
    data: &mut Bytes,
    end: bool,
    window: &mut i64,
) -> Written {
    if data.is_empty() {
        frame::data(&mut out.buf, id, &[], end);
        return Written::All;
    }
    while !data.is_empty() {
        let room = (*window).min(out.window).max(0) as usize;
        let n = data.len().min(out.max_frame).min(room);
        if n == 0 {
            return if *window <= 0 {
                Written::Stream
            } else {
                Written::Connection
            };
        }
        let chunk = data.split_to(n);
        frame::data(&mut out.buf, id, &chunk, end && data.is_empty());
        *window -= n as i64;
        out.window -= n as i64;
    }
    Written::All
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http2::frame::{Head, flag};

    #[test]
    fn data_waits_for_both_windows() {
        let mut out = Out {
            buf: BytesMut::new(),
            block: BytesMut::new(),
            encoder: Encoder::default(),
            window: 10,
            max_frame: 4,
        };
        let mut data = Bytes::from_static(b"0123456789abc");
        let mut stream = 100;
        assert!(matches!(
            write_data(&mut out, 1, &mut data, true, &mut stream),
            Written::Connection
        ));
        assert_eq!((data.len(), out.window, stream), (3, 0, 90));
        // Frames of at most max_frame: 4 + 4 + 2, none ending the stream yet.
        assert_eq!(out.buf.len(), 3 * frame::HEAD_LEN + 10);
        assert!(
            !Head::parse(&out.buf[2 * (frame::HEAD_LEN + 4)..])
                .unwrap()
                .has(flag::END_STREAM)
        );
        out.window = 100;
        stream = 2;
        assert!(matches!(
            write_data(&mut out, 1, &mut data, true, &mut stream),
            Written::Stream
        ));
        stream = 5;
        assert!(matches!(
            write_data(&mut out, 1, &mut data, true, &mut stream),
            Written::All
        ));
        let last = out.buf.len() - frame::HEAD_LEN - 1;
        assert!(Head::parse(&out.buf[last..]).unwrap().has(flag::END_STREAM));
    }
}
