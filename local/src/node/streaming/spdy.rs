//! SPDY/3.1, the server's side, as far as kube's port-forward uses it — the framing of
//! spdystream, the Go library kubectl and kubelet share. The peer opens streams
//! (`SYN_STREAM` with a header block), each is accepted (`SYN_REPLY`) and carries bytes
//! both ways (`DATA`; the `FIN` flag half-closes a side), `RST_STREAM` ends one, `PING` is
//! answered, `GOAWAY` or the connection's end ends them all.
//!
//! Header blocks are zlib streams primed with the protocol's dictionary, one compression
//! context per direction for the whole connection (so every block is inflated in order,
//! even those of frames nobody reads). Flow control (`SETTINGS`, `WINDOW_UPDATE`) is read
//! and ignored, as spdystream ignores it; back-pressure comes from the bounded channels
//! between the connection and its streams instead.
//!
//! Everything a peer sends is bounded: a frame's payload, a header block inflated, the
//! headers in it, the streams open at once.

use std::collections::HashMap;
use std::sync::LazyLock;

use bytes::{BufMut, Bytes, BytesMut};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

/// The protocol's version in every control frame.
const VERSION: u16 = 3;

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;

const FLAG_FIN: u8 = 0x01;

/// `RST_STREAM` status codes.
const PROTOCOL_ERROR: u32 = 1;
const REFUSED_STREAM: u32 = 3;
/// `GOAWAY` status: a protocol error.
const GOAWAY_PROTOCOL_ERROR: u32 = 1;

/// The largest frame payload read: a data frame of spdystream is at most 32 KiB.
const MAX_FRAME: usize = 1 << 20;
/// The largest header block once inflated, and the most headers in one.
const MAX_HEADER_BLOCK: usize = 64 * 1024;
const MAX_HEADERS: usize = 128;
/// Streams open at once on one connection (port-forward opens two per connection).
const MAX_STREAMS: usize = 2048;
/// Chunks queued towards a stream's reader, and frames towards the connection.
const STREAM_QUEUE: usize = 16;
const FRAME_QUEUE: usize = 64;
/// Bytes gathered before one write to the connection.
const WRITE_BATCH: usize = 256 * 1024;

/// The header compression dictionary of SPDY/3 (draft 3, 2.6.10.1): each word with its
/// length before it, then a run of common values.
static DICTIONARY: LazyLock<Vec<u8>> = LazyLock::new(|| {
    const WORDS: [&str; 65] = [
        "options",
        "head",
        "post",
        "put",
        "delete",
        "trace",
        "accept",
        "accept-charset",
        "accept-encoding",
        "accept-language",
        "accept-ranges",
        "age",
        "allow",
        "authorization",
        "cache-control",
        "connection",
        "content-base",
        "content-encoding",
        "content-language",
        "content-length",
        "content-location",
        "content-md5",
        "content-range",
        "content-type",
        "date",
        "etag",
        "expect",
        "expires",
        "from",
        "host",
        "if-match",
        "if-modified-since",
        "if-none-match",
        "if-range",
        "if-unmodified-since",
        "last-modified",
        "location",
        "max-forwards",
        "pragma",
        "proxy-authenticate",
        "proxy-authorization",
        "range",
        "referer",
        "retry-after",
        "server",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "user-agent",
        "vary",
        "via",
        "warning",
        "www-authenticate",
        "method",
        "get",
        "status",
        "200 OK",
        "version",
        "HTTP/1.1",
        "url",
        "public",
        "set-cookie",
        "keep-alive",
        "origin",
    ];
    const RUN: &str = concat!(
        "100101201202205206300302303304305306307402405406407408409410411412413414415416417",
        "502504505203 Non-Authoritative Information204 No Content301 Moved Permanently",
        "400 Bad Request401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error",
        "501 Not Implemented503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct ",
        "Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,",
        "image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,",
        "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8",
        "charset=iso-8859-1,utf-,*,enq=0.",
    );
    let mut d = Vec::with_capacity(1423);
    for w in WORDS {
        d.extend_from_slice(&(w.len() as u32).to_be_bytes());
        d.extend_from_slice(w.as_bytes());
    }
    d.extend_from_slice(RUN.as_bytes());
    d
});

/// Why a connection ended before its peer closed it.
#[derive(Debug, thiserror::Error)]
pub enum SpdyError {
    #[error("reading the connection: {0}")]
    Io(#[from] std::io::Error),
    #[error("SPDY version {0} is not spoken (3 is)")]
    Version(u16),
    #[error("a frame of {0} bytes is larger than {MAX_FRAME}")]
    FrameTooLarge(usize),
    #[error("a malformed {0} frame")]
    Malformed(&'static str),
    #[error("a header block: {0}")]
    Headers(String),
}

/// A stream the peer opened: its headers (names in lower case), the bytes it sends (the
/// receiver ends at its `FIN`), a sender for the bytes back (dropping it sends `FIN`), and
/// `reset`, which resolves when the peer resets the stream or the connection ends.
#[derive(Debug)]
pub struct Stream {
    pub id: u32,
    pub headers: Vec<(String, String)>,
    pub from_peer: mpsc::Receiver<Bytes>,
    pub to_peer: mpsc::Sender<Bytes>,
    pub reset: oneshot::Receiver<()>,
}

impl Stream {
    /// The value of header `name` (lower case), if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A frame read from the peer, as far as this side acts on it.
#[derive(Debug, PartialEq, Eq)]
enum Frame {
    SynStream {
        id: u32,
        fin: bool,
        block: Bytes,
    },
    Data {
        id: u32,
        fin: bool,
        data: Bytes,
    },
    Reset {
        id: u32,
    },
    Ping {
        id: u32,
    },
    GoAway,
    /// A header block to inflate, to keep the compression context in step.
    Headers {
        block: Bytes,
    },
    /// Read and ignored (`SETTINGS`, `WINDOW_UPDATE`, `SYN_REPLY` to nobody, …).
    Ignored,
}

/// A frame this side sends.
#[derive(Debug)]
enum Out {
    Reply(u32),
    Data(u32, Bytes),
    Fin(u32),
    Reset(u32, u32),
    Ping(u32),
    GoAway(u32),
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The payload's length of a frame whose first eight bytes are `head`.
fn length_of(head: &[u8; 8]) -> usize {
    u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize
}

/// Read a frame from its eight-byte head and its payload.
fn parse(head: &[u8; 8], payload: Bytes) -> Result<Frame, SpdyError> {
    let flags = head[4];
    let fin = flags & FLAG_FIN != 0;
    if head[0] & 0x80 == 0 {
        let id = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        return Ok(Frame::Data {
            id,
            fin,
            data: payload,
        });
    }
    let version = u16::from_be_bytes([head[0] & 0x7f, head[1]]);
    if version != VERSION {
        return Err(SpdyError::Version(version));
    }
    let id_at = |at: usize, what| {
        u32_at(&payload, at)
            .map(|v| v & 0x7fff_ffff)
            .ok_or(SpdyError::Malformed(what))
    };
    Ok(match u16::from_be_bytes([head[2], head[3]]) {
        SYN_STREAM => {
            let id = id_at(0, "SYN_STREAM")?;
            if payload.len() < 10 {
                return Err(SpdyError::Malformed("SYN_STREAM"));
            }
            Frame::SynStream {
                id,
                fin,
                block: payload.slice(10..),
            }
        }
        SYN_REPLY | HEADERS => {
            id_at(0, "HEADERS")?;
            Frame::Headers {
                block: payload.slice(4..),
            }
        }
        RST_STREAM => Frame::Reset {
            id: id_at(0, "RST_STREAM")?,
        },
        PING => Frame::Ping {
            id: u32_at(&payload, 0).ok_or(SpdyError::Malformed("PING"))?,
        },
        GOAWAY => Frame::GoAway,
        _ => Frame::Ignored,
    })
}

/// The header block's pairs: a count, then each name and value with its length before it
/// (all big-endian `u32`s). Values of one name joined with NULs are kept as sent.
fn parse_block(block: &[u8]) -> Result<Vec<(String, String)>, SpdyError> {
    let bad = |what: &str| SpdyError::Headers(what.to_string());
    let count = u32_at(block, 0).ok_or_else(|| bad("no count"))? as usize;
    if count > MAX_HEADERS {
        return Err(SpdyError::Headers(format!(
            "{count} headers, more than {MAX_HEADERS}"
        )));
    }
    let mut at = 4;
    let mut next = |block: &[u8]| -> Result<String, SpdyError> {
        let len = u32_at(block, at).ok_or_else(|| bad("truncated"))? as usize;
        let s = block
            .get(at + 4..at + 4 + len)
            .ok_or_else(|| bad("truncated"))?;
        at += 4 + len;
        Ok(String::from_utf8_lossy(s).into_owned())
    };
    let mut headers = Vec::with_capacity(count);
    for _ in 0..count {
        let name = next(block)?.to_ascii_lowercase();
        let value = next(block)?;
        headers.push((name, value));
    }
    Ok(headers)
}

/// The peer's header compression context.
struct Inflater(Decompress);

impl Inflater {
    fn new() -> Self {
        Inflater(Decompress::new(true))
    }

    /// Inflate the next block of the connection's header stream, at most
    /// [`MAX_HEADER_BLOCK`] bytes of it.
    fn inflate(&mut self, input: &[u8]) -> Result<Vec<u8>, SpdyError> {
        let fail = |e: &dyn std::fmt::Display| SpdyError::Headers(format!("inflating: {e}"));
        let mut out = Vec::with_capacity(256);
        let mut used = 0usize;
        loop {
            if out.len() == out.capacity() {
                if out.len() >= MAX_HEADER_BLOCK {
                    return Err(SpdyError::Headers(format!(
                        "larger than {MAX_HEADER_BLOCK} bytes inflated"
                    )));
                }
                out.reserve(out.capacity().min(MAX_HEADER_BLOCK - out.len()));
            }
            let (in_before, out_before) = (self.0.total_in(), out.len());
            match self
                .0
                .decompress_vec(&input[used..], &mut out, FlushDecompress::Sync)
            {
                Ok(Status::StreamEnd) => return Err(fail(&"the header stream ended")),
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.0.set_dictionary(&DICTIONARY).map_err(|e| fail(&e))?;
                }
                Err(e) => return Err(fail(&e)),
            }
            used += (self.0.total_in() - in_before) as usize;
            let stalled = self.0.total_in() == in_before && out.len() == out_before;
            if (used == input.len() && out.len() < out.capacity()) || stalled {
                return Ok(out);
            }
        }
    }
}

/// This side's header compression context.
struct Deflater(Compress);

impl Deflater {
    fn new() -> Result<Self, SpdyError> {
        let mut c = Compress::new(Compression::fast(), true);
        c.set_dictionary(&DICTIONARY)
            .map_err(|e| SpdyError::Headers(format!("deflating: {e}")))?;
        Ok(Deflater(c))
    }

    /// Deflate `block` as the next block of this side's header stream (sync-flushed, so the
    /// peer can inflate it whole).
    fn deflate(&mut self, block: &[u8], out: &mut BytesMut) -> Result<(), SpdyError> {
        let mut buf = Vec::with_capacity(block.len() + 64);
        let mut used = 0usize;
        loop {
            let before = self.0.total_in();
            self.0
                .compress_vec(&block[used..], &mut buf, FlushCompress::Sync)
                .map_err(|e| SpdyError::Headers(format!("deflating: {e}")))?;
            used += (self.0.total_in() - before) as usize;
            if used == block.len() && buf.len() < buf.capacity() {
                break;
            }
            buf.reserve(64);
        }
        out.extend_from_slice(&buf);
        Ok(())
    }
}

fn control_head(out: &mut BytesMut, kind: u16, flags: u8, len: usize) {
    out.put_u16(0x8000 | VERSION);
    out.put_u16(kind);
    out.put_u32(((flags as u32) << 24) | len as u32);
}

fn data_head(out: &mut BytesMut, id: u32, flags: u8, len: usize) {
    out.put_u32(id & 0x7fff_ffff);
    out.put_u32(((flags as u32) << 24) | len as u32);
}

/// Append frame `o` to `out`.
fn encode(o: Out, deflater: &mut Deflater, out: &mut BytesMut) -> Result<(), SpdyError> {
    match o {
        Out::Reply(id) => {
            let mut block = BytesMut::new();
            deflater.deflate(&0u32.to_be_bytes(), &mut block)?;
            control_head(out, SYN_REPLY, 0, 4 + block.len());
            out.put_u32(id);
            out.extend_from_slice(&block);
        }
        Out::Data(id, data) => {
            data_head(out, id, 0, data.len());
            out.extend_from_slice(&data);
        }
        Out::Fin(id) => data_head(out, id, FLAG_FIN, 0),
        Out::Reset(id, status) => {
            control_head(out, RST_STREAM, 0, 8);
            out.put_u32(id);
            out.put_u32(status);
        }
        Out::Ping(id) => {
            control_head(out, PING, 0, 4);
            out.put_u32(id);
        }
        Out::GoAway(status) => {
            control_head(out, GOAWAY, 0, 8);
            out.put_u32(0);
            out.put_u32(status);
        }
    }
    Ok(())
}

/// Write queued frames to the connection, gathering what is queued into one write, until
/// every sender is gone.
async fn write_frames<W: AsyncWrite + Unpin>(
    mut w: W,
    mut frames: mpsc::Receiver<Out>,
) -> Result<(), SpdyError> {
    let mut deflater = Deflater::new()?;
    let mut buf = BytesMut::with_capacity(64 * 1024);
    while let Some(first) = frames.recv().await {
        encode(first, &mut deflater, &mut buf)?;
        while buf.len() < WRITE_BATCH {
            match frames.try_recv() {
                Ok(o) => encode(o, &mut deflater, &mut buf)?,
                Err(_) => break,
            }
        }
        w.write_all(&buf).await?;
        buf.clear();
    }
    let _ = w.shutdown().await;
    Ok(())
}

/// What the connection keeps of a stream: where the peer's bytes go (until its `FIN`), and
/// the reset signal (dropping it resolves the stream's `reset`).
struct Open {
    to_stream: Option<mpsc::Sender<Bytes>>,
    _reset: oneshot::Sender<()>,
}

/// Serve a SPDY connection on `io`: each stream the peer opens is handed to `accept`, until
/// the peer says `GOAWAY` or closes. Returns when the peer is gone and every stream's
/// writer has finished.
pub async fn serve<IO>(io: IO, accept: mpsc::Sender<Stream>) -> Result<(), SpdyError>
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let (r, w) = tokio::io::split(io);
    let (frames, queued) = mpsc::channel(FRAME_QUEUE);
    let writer = tokio::spawn(write_frames(w, queued));
    // `accept` goes with the reader: once it ends, whoever pairs streams sees the end too.
    let read = read_frames(r, &frames, accept).await;
    if let Err(e) = &read {
        tracing::debug!(error = %e, "a SPDY connection ended on an error");
        let _ = frames.send(Out::GoAway(GOAWAY_PROTOCOL_ERROR)).await;
    }
    drop(frames);
    let written = writer
        .await
        .unwrap_or_else(|e| Err(SpdyError::Io(std::io::Error::other(e))));
    read.and(written)
}

/// Read frames until the peer goes away; streams are dropped (reset) when it does.
async fn read_frames<R: AsyncRead + Unpin>(
    r: R,
    frames: &mpsc::Sender<Out>,
    accept: mpsc::Sender<Stream>,
) -> Result<(), SpdyError> {
    let mut r = tokio::io::BufReader::with_capacity(64 * 1024, r);
    let mut inflater = Inflater::new();
    let mut open: HashMap<u32, Open> = HashMap::new();
    let send = |o: Out| frames.send(o);
    loop {
        let mut head = [0u8; 8];
        match r.read_exact(&mut head).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        let len = length_of(&head);
        if len > MAX_FRAME {
            return Err(SpdyError::FrameTooLarge(len));
        }
        let mut payload = BytesMut::zeroed(len);
        r.read_exact(&mut payload).await?;
        match parse(&head, payload.freeze())? {
            Frame::SynStream { id, fin, block } => {
                let headers = parse_block(&inflater.inflate(&block)?)?;
                if id == 0 || id % 2 == 0 || open.contains_key(&id) {
                    let _ = send(Out::Reset(id, PROTOCOL_ERROR)).await;
                    continue;
                }
                if open.len() >= MAX_STREAMS {
                    let _ = send(Out::Reset(id, REFUSED_STREAM)).await;
                    continue;
                }
                let (to_stream, from_peer) = mpsc::channel(STREAM_QUEUE);
                let (to_peer, mut back) = mpsc::channel::<Bytes>(STREAM_QUEUE);
                let (reset_tx, reset) = oneshot::channel();
                let _ = send(Out::Reply(id)).await;
                // The stream's bytes back become DATA frames; its sender dropped, a FIN.
                let out = frames.clone();
                tokio::spawn(async move {
                    while let Some(b) = back.recv().await {
                        if out.send(Out::Data(id, b)).await.is_err() {
                            return;
                        }
                    }
                    let _ = out.send(Out::Fin(id)).await;
                });
                open.insert(
                    id,
                    Open {
                        to_stream: (!fin).then_some(to_stream),
                        _reset: reset_tx,
                    },
                );
                let stream = Stream {
                    id,
                    headers,
                    from_peer,
                    to_peer,
                    reset,
                };
                if accept.send(stream).await.is_err() {
                    open.remove(&id);
                }
            }
            Frame::Data { id, fin, data } => {
                let Some(s) = open.get_mut(&id) else { continue };
                if !data.is_empty()
                    && let Some(tx) = &s.to_stream
                    && tx.send(data).await.is_err()
                {
                    s.to_stream = None;
                }
                if fin {
                    s.to_stream = None;
                }
            }
            Frame::Reset { id } => {
                open.remove(&id);
            }
            Frame::Ping { id } => {
                let _ = send(Out::Ping(id)).await;
            }
            Frame::GoAway => return Ok(()),
            Frame::Headers { block } => {
                inflater.inflate(&block)?;
            }
            Frame::Ignored => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dictionary_is_the_drafts() {
        assert_eq!(DICTIONARY.len(), 1423);
        assert_eq!(&DICTIONARY[..11], b"\0\0\0\x07options");
        assert!(DICTIONARY.ends_with(b",*,enq=0."));
    }

    fn block(pairs: &[(&str, &str)]) -> Vec<u8> {
        let mut b = (pairs.len() as u32).to_be_bytes().to_vec();
        for (n, v) in pairs {
            for s in [n, v] {
                b.extend_from_slice(&(s.len() as u32).to_be_bytes());
                b.extend_from_slice(s.as_bytes());
            }
        }
        b
    }

    #[test]
    fn header_blocks_round_trip_through_one_context_per_direction() {
        let mut d = Deflater::new().unwrap();
        let mut i = Inflater::new();
        for n in 0..3 {
            let port = n.to_string();
            let plain = block(&[("streamType", "data"), ("port", &port), ("requestID", "0")]);
            let mut packed = BytesMut::new();
            d.deflate(&plain, &mut packed).unwrap();
            let headers = parse_block(&i.inflate(&packed).unwrap()).unwrap();
            assert_eq!(headers[0], ("streamtype".into(), "data".into()));
            assert_eq!(headers[1].1, port);
        }
    }

    #[test]
    fn bad_blocks_are_refused_not_trusted() {
        assert!(parse_block(&[0, 0, 0]).is_err());
        assert!(parse_block(&block(&[("a", "b")])[..10]).is_err());
        let mut many = 10_000u32.to_be_bytes().to_vec();
        many.extend_from_slice(&[0; 16]);
        assert!(parse_block(&many).is_err());
        // A length that points past the end.
        let mut long = 1u32.to_be_bytes().to_vec();
        long.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(parse_block(&long).is_err());
        assert!(Inflater::new().inflate(b"not zlib at all").is_err());
    }

    #[test]
    fn a_header_bomb_is_cut_off() {
        let mut d = Deflater::new().unwrap();
        let mut packed = BytesMut::new();
        d.deflate(&vec![b'a'; 4 * MAX_HEADER_BLOCK], &mut packed)
            .unwrap();
        assert!(Inflater::new().inflate(&packed).is_err());
    }

    #[test]
    fn frames_are_read_by_kind() {
        let head = |kind: u16, flags: u8, len: usize| {
            let mut b = BytesMut::new();
            control_head(&mut b, kind, flags, len);
            <[u8; 8]>::try_from(&b[..]).unwrap()
        };
        let rst = Bytes::from_static(&[0, 0, 0, 5, 0, 0, 0, 5]);
        assert_eq!(
            parse(&head(RST_STREAM, 0, 8), rst).unwrap(),
            Frame::Reset { id: 5 }
        );
        let data = [0u8, 0, 0, 7, FLAG_FIN, 0, 0, 2];
        assert_eq!(
            parse(&data, Bytes::from_static(b"hi")).unwrap(),
            Frame::Data {
                id: 7,
                fin: true,
                data: Bytes::from_static(b"hi")
            }
        );
        let mut v2 = head(PING, 0, 4);
        v2[1] = 2;
        assert!(matches!(
            parse(&v2, Bytes::from_static(&[0, 0, 0, 1])),
            Err(SpdyError::Version(2))
        ));
        assert!(parse(&head(SYN_STREAM, 0, 3), Bytes::from_static(&[0, 0, 1])).is_err());
        assert_eq!(
            parse(&head(9, 0, 8), Bytes::from_static(&[0; 8])).unwrap(),
            Frame::Ignored
        );
    }

    /// A peer opens a stream, sends bytes and `FIN`; this side answers, echoes and ends.
    #[tokio::test]
    async fn a_stream_is_accepted_and_carries_bytes_both_ways() {
        let (ours, mut theirs) = tokio::io::duplex(64 * 1024);
        let (accept, mut accepted) = mpsc::channel(4);
        let server = tokio::spawn(serve(ours, accept));
        let mut peer = Deflater::new().unwrap();
        let mut frame = BytesMut::new();
        let mut packed = BytesMut::new();
        peer.deflate(&block(&[("port", "80")]), &mut packed)
            .unwrap();
        control_head(&mut frame, SYN_STREAM, 0, 10 + packed.len());
        frame.put_u32(1);
        frame.put_u32(0);
        frame.put_u16(0);
        frame.extend_from_slice(&packed);
        data_head(&mut frame, 1, FLAG_FIN, 5);
        frame.extend_from_slice(b"hello");
        theirs.write_all(&frame).await.unwrap();

        let mut s = accepted.recv().await.unwrap();
        assert_eq!(s.header("port"), Some("80"));
        assert_eq!(
            s.from_peer.recv().await.unwrap(),
            Bytes::from_static(b"hello")
        );
        assert!(s.from_peer.recv().await.is_none());
        s.to_peer.send(Bytes::from_static(b"back")).await.unwrap();
        drop(s);

        // SYN_REPLY, then DATA "back", then FIN.
        let mut theirs_in = Inflater::new();
        let mut head = [0u8; 8];
        theirs.read_exact(&mut head).await.unwrap();
        assert_eq!(u16::from_be_bytes([head[2], head[3]]), SYN_REPLY);
        let mut payload = vec![0u8; length_of(&head)];
        theirs.read_exact(&mut payload).await.unwrap();
        assert_eq!(u32_at(&payload, 0), Some(1));
        assert!(
            parse_block(&theirs_in.inflate(&payload[4..]).unwrap())
                .unwrap()
                .is_empty()
        );
        theirs.read_exact(&mut head).await.unwrap();
        assert_eq!((u32_at(&head, 0), length_of(&head)), (Some(1), 4));
        let mut back = [0u8; 4];
        theirs.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"back");
        theirs.read_exact(&mut head).await.unwrap();
        assert_eq!(
            (u32_at(&head, 0), head[4], length_of(&head)),
            (Some(1), FLAG_FIN, 0)
        );
        drop(theirs);
        server.await.unwrap().unwrap();
    }
}
