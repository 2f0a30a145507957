//! HTTP/2 frames (RFC 9113 §4 and §6): the 9-byte frame header read from a buffer, and
//! each frame the proxy sends written into one. Nothing here keeps state; what a frame
//! means for a connection is its task's business.

use bytes::{BufMut, BytesMut};
use h2::Reason;

/// What a client sends first (RFC 9113 §3.4), before its SETTINGS frame.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Length of a frame's header.
pub const HEAD_LEN: usize = 9;
/// The frame payload size every peer accepts until it says otherwise (and the most this
/// server accepts: it never raises SETTINGS_MAX_FRAME_SIZE).
pub const DEFAULT_MAX_FRAME_SIZE: u32 = 16_384;
/// The flow-control window every stream and connection starts with.
pub const DEFAULT_WINDOW: u32 = 65_535;
/// The largest window flow control allows (RFC 9113 §6.9.1).
pub const MAX_WINDOW: i64 = (1 << 31) - 1;

/// Frame types (RFC 9113 §6).
pub mod kind {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const PRIORITY: u8 = 0x2;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PUSH_PROMISE: u8 = 0x5;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const WINDOW_UPDATE: u8 = 0x8;
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags (RFC 9113 §6).
pub mod flag {
    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;
}

/// SETTINGS parameters (RFC 9113 §6.5.2).
pub mod setting {
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    pub const ENABLE_PUSH: u16 = 0x2;
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
}

/// A frame's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    pub len: usize,
    pub kind: u8,
    pub flags: u8,
    /// The stream identifier, its reserved bit cleared.
    pub stream: u32,
}

impl Head {
    /// The header at the start of `buf`, if all nine bytes are there.
    pub fn parse(buf: &[u8]) -> Option<Head> {
        let b: &[u8; HEAD_LEN] = buf.get(..HEAD_LEN)?.try_into().ok()?;
        Some(Head {
            len: (usize::from(b[0]) << 16) | (usize::from(b[1]) << 8) | usize::from(b[2]),
            kind: b[3],
            flags: b[4],
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff,
        })
    }

    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// A payload without its padding (DATA, HEADERS: RFC 9113 §6.1), or `None` when the pad
/// length is more than the payload holds (a PROTOCOL_ERROR).
pub fn unpadded(head: &Head, payload: &[u8]) -> Option<std::ops::Range<usize>> {
    if !head.has(flag::PADDED) {
        return Some(0..payload.len());
    }
    let pad = usize::from(*payload.first()?);
    let end = payload.len().checked_sub(pad)?;
    (end >= 1).then_some(1..end)
}

/// The 4-byte big-endian number at the start of `b`.
pub fn u32_at(b: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(..4)?.try_into().ok()?))
}

/// Write a frame header.
pub fn head(out: &mut BytesMut, len: usize, kind: u8, flags: u8, stream: u32) {
    debug_assert!(len < 1 << 24);
    out.reserve(HEAD_LEN + len);
    out.put_u8((len >> 16) as u8);
    out.put_u16(len as u16);
    out.put_u8(kind);
    out.put_u8(flags);
    out.put_u32(stream & 0x7fff_ffff);
}

pub fn settings(out: &mut BytesMut, values: &[(u16, u32)]) {
    head(out, values.len() * 6, kind::SETTINGS, 0, 0);
    for (id, value) in values {
        out.put_u16(*id);
        out.put_u32(*value);
    }
}

pub fn settings_ack(out: &mut BytesMut) {
    head(out, 0, kind::SETTINGS, flag::ACK, 0);
}

/// A PING asking for an answer: the upstream client's keepalive.
pub fn ping(out: &mut BytesMut, payload: &[u8; 8]) {
    head(out, 8, kind::PING, 0, 0);
    out.put_slice(payload);
}

pub fn ping_ack(out: &mut BytesMut, payload: &[u8]) {
    head(out, payload.len(), kind::PING, flag::ACK, 0);
    out.put_slice(payload);
}

/// An error code's name as RFC 9113 §7 spells it, for metrics and logs.
pub fn reason_name(reason: Reason) -> &'static str {
    match u32::from(reason) {
        0x0 => "NO_ERROR",
        0x1 => "PROTOCOL_ERROR",
        0x2 => "INTERNAL_ERROR",
        0x3 => "FLOW_CONTROL_ERROR",
        0x4 => "SETTINGS_TIMEOUT",
        0x5 => "STREAM_CLOSED",
        0x6 => "FRAME_SIZE_ERROR",
        0x7 => "REFUSED_STREAM",
        0x8 => "CANCEL",
        0x9 => "COMPRESSION_ERROR",
        0xa => "CONNECT_ERROR",
        0xb => "ENHANCE_YOUR_CALM",
        0xc => "INADEQUATE_SECURITY",
        0xd => "HTTP_1_1_REQUIRED",
        _ => "UNKNOWN",
    }
}

pub fn goaway(out: &mut BytesMut, last_stream: u32, reason: Reason) {
    head(out, 8, kind::GOAWAY, 0, 0);
    out.put_u32(last_stream & 0x7fff_ffff);
    out.put_u32(reason.into());
}

pub fn rst_stream(out: &mut BytesMut, stream: u32, reason: Reason) {
    head(out, 4, kind::RST_STREAM, 0, stream);
    out.put_u32(reason.into());
}

pub fn window_update(out: &mut BytesMut, stream: u32, increment: u32) {
    head(out, 4, kind::WINDOW_UPDATE, 0, stream);
    out.put_u32(increment & 0x7fff_ffff);
}

pub fn data(out: &mut BytesMut, stream: u32, payload: &[u8], end: bool) {
    let flags = if end { flag::END_STREAM } else { 0 };
    head(out, payload.len(), kind::DATA, flags, stream);
    out.put_slice(payload);
}

/// A header block as HEADERS and as many CONTINUATION frames as `max_frame` needs.
pub fn headers(out: &mut BytesMut, stream: u32, block: &[u8], end_stream: bool, max_frame: usize) {
    let mut chunks = block.chunks(max_frame.max(1));
    let first = chunks.next().unwrap_or(&[]);
    let last = first.len() == block.len();
    let mut flags = if end_stream { flag::END_STREAM } else { 0 };
    if last {
        flags |= flag::END_HEADERS;
    }
    head(out, first.len(), kind::HEADERS, flags, stream);
    out.put_slice(first);
    let mut sent = first.len();
    for chunk in chunks {
        sent += chunk.len();
        let flags = if sent == block.len() {
            flag::END_HEADERS
        } else {
            0
        };
        head(out, chunk.len(), kind::CONTINUATION, flags, stream);
        out.put_slice(chunk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_head_reads_back() {
        let mut out = BytesMut::new();
        head(&mut out, 70_000, kind::DATA, flag::END_STREAM, 0x8000_0003);
        let h = Head::parse(&out).unwrap();
        assert_eq!(
            h,
            Head {
                len: 70_000,
                kind: kind::DATA,
                flags: flag::END_STREAM,
                stream: 3
            }
        );
        assert_eq!(Head::parse(&out[..8]), None);
    }

    #[test]
    fn padding_is_stripped_or_refused() {
        let padded = Head {
            len: 0,
            kind: kind::DATA,
            flags: flag::PADDED,
            stream: 1,
        };
        assert_eq!(unpadded(&padded, &[2, b'a', b'b', 0, 0]), Some(1..3));
        assert_eq!(unpadded(&padded, &[5, b'a', 0]), None);
        assert_eq!(unpadded(&padded, &[]), None);
        assert_eq!(unpadded(&padded, &[0]), Some(1..1));
    }

    #[test]
    fn a_long_header_block_continues() {
        let mut out = BytesMut::new();
        let block = vec![7u8; 40];
        headers(&mut out, 5, &block, true, 16);
        let first = Head::parse(&out).unwrap();
        assert_eq!((first.len, first.kind), (16, kind::HEADERS));
        assert!(first.has(flag::END_STREAM) && !first.has(flag::END_HEADERS));
        let second = Head::parse(&out[HEAD_LEN + 16..]).unwrap();
        assert_eq!(
            (second.len, second.kind, second.flags),
            (16, kind::CONTINUATION, 0)
        );
        let third = Head::parse(&out[2 * (HEAD_LEN + 16)..]).unwrap();
        assert_eq!((third.len, third.flags), (8, flag::END_HEADERS));
        assert_eq!(out.len(), 3 * HEAD_LEN + 40);
    }
}
