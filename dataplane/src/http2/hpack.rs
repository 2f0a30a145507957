//! HPACK (RFC 7541): header blocks decoded into fields, with the dynamic table the peer
//! builds; and a connection's own fields encoded (the server's responses, the upstream
//! client's requests), with a dynamic table of its own.
//!
//! A decoded field keeps its name as an [`http::HeaderName`] (made once, when it enters
//! the table) and its value as [`Bytes`] shared with the table, so a request whose fields
//! are all indexed — a gRPC channel's after its first — costs no allocation for them.
//! Huffman-coded strings are decoded by `httlib-huffman`; the encoder never Huffman-codes
//! (it spends bytes on the loopback and datacenter links a proxy sits on, not CPU).

use std::collections::VecDeque;
use std::sync::OnceLock;

use bytes::{BufMut, Bytes, BytesMut};
use http::HeaderName;
use http::header::HeaderValue;

/// Per-entry overhead of the table size (RFC 7541 §4.1).
const ENTRY_OVERHEAD: usize = 32;
/// The dynamic table size both ends start with (SETTINGS_HEADER_TABLE_SIZE's default);
/// the decoder's table never grows past it (the server does not advertise more).
pub const DEFAULT_TABLE_SIZE: usize = 4096;

/// Why a header block could not be decoded: a COMPRESSION_ERROR of the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HpackError {
    #[error("header block ends inside a field")]
    Truncated,
    #[error("integer too large")]
    Integer,
    #[error("index {0} is in neither table")]
    Index(usize),
    #[error("bad Huffman code")]
    Huffman,
    #[error("table size update to {0} past the limit or after a field")]
    SizeUpdate(usize),
}

/// A field's name: the pseudo-headers a request or response may carry, a header, or a
/// name no field may have (uppercase, not a token, an unknown pseudo-header) kept only
/// for the table's bookkeeping; a request carrying one is malformed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Name {
    Authority,
    Method,
    Path,
    Scheme,
    Status,
    Protocol,
    Header(HeaderName),
    Malformed(Bytes),
}

impl Name {
    fn parse(raw: &[u8]) -> Name {
        match raw {
            b":authority" => Name::Authority,
            b":method" => Name::Method,
            b":path" => Name::Path,
            b":scheme" => Name::Scheme,
            b":status" => Name::Status,
            b":protocol" => Name::Protocol,
            _ if raw.iter().any(u8::is_ascii_uppercase) => {
                Name::Malformed(Bytes::copy_from_slice(raw))
            }
            _ => match HeaderName::from_bytes(raw) {
                Ok(h) => Name::Header(h),
                Err(_) => Name::Malformed(Bytes::copy_from_slice(raw)),
            },
        }
    }

    fn len(&self) -> usize {
        match self {
            Name::Authority => 10,
            Name::Method | Name::Scheme | Name::Status => 7,
            Name::Path => 5,
            Name::Protocol => 9,
            Name::Header(h) => h.as_str().len(),
            Name::Malformed(b) => b.len(),
        }
    }

    pub fn is_pseudo(&self) -> bool {
        !matches!(self, Name::Header(_) | Name::Malformed(_))
    }
}

/// One decoded field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    pub name: Name,
    pub value: Bytes,
}

impl Field {
    /// Its size as tables and SETTINGS_MAX_HEADER_LIST_SIZE count it.
    pub fn size(&self) -> usize {
        self.name.len() + self.value.len() + ENTRY_OVERHEAD
    }
}

/// RFC 7541 Appendix A.
const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// The static table as fields, made once.
fn static_fields() -> &'static [Field] {
    static FIELDS: OnceLock<Vec<Field>> = OnceLock::new();
    FIELDS.get_or_init(|| {
        STATIC
            .iter()
            .map(|(n, v)| Field {
                name: Name::parse(n.as_bytes()),
                value: Bytes::from_static(v.as_bytes()),
            })
            .collect()
    })
}

/// The decoder of one connection's request header blocks.
pub struct Decoder {
    table: VecDeque<Field>,
    size: usize,
    max: usize,
    /// The most the peer may set `max` to: what this end advertised.
    limit: usize,
}

impl Default for Decoder {
    fn default() -> Self {
        Self {
            table: VecDeque::new(),
            size: 0,
            max: DEFAULT_TABLE_SIZE,
            limit: DEFAULT_TABLE_SIZE,
        }
    }
}

impl Decoder {
    /// Decode `block` into `out`; returns the header list's size (RFC 9113 §6.5.2). Every
    /// field is decoded (and the table kept in step with the peer's) however large the
    /// list, but those past `limit` are not kept: the caller refuses such a list.
    pub fn decode(
        &mut self,
        block: &Bytes,
        out: &mut Vec<Field>,
        limit: usize,
    ) -> Result<usize, HpackError> {
        let mut pos = 0;
        let mut list = 0usize;
        let mut first = true;
        while let Some(&b) = block.get(pos) {
            let field = if b & 0x80 != 0 {
                let index = integer(block, &mut pos, 7)?;
                self.get(index)?.clone()
            } else if b & 0xc0 == 0x40 {
                let field = self.literal(block, &mut pos, 6)?;
                self.insert(field.clone());
                field
            } else if b & 0xe0 == 0x20 {
                let size = integer(block, &mut pos, 5)?;
                if !first || size > self.limit {
                    return Err(HpackError::SizeUpdate(size));
                }
                self.max = size;
                self.evict(0);
                continue;
            } else {
                // Without indexing (0000) or never indexed (0001): 4-bit name index.
                self.literal(block, &mut pos, 4)?
            };
            first = false;
            list = list.saturating_add(field.size());
            if list <= limit {
                out.push(field);
            }
        }
        Ok(list)
    }

    fn get(&self, index: usize) -> Result<&Field, HpackError> {
        match index {
            0 => Err(HpackError::Index(0)),
            1..=61 => Ok(&static_fields()[index - 1]),
            _ => self.table.get(index - 62).ok_or(HpackError::Index(index)),
        }
    }

    fn literal(&self, block: &Bytes, pos: &mut usize, prefix: u8) -> Result<Field, HpackError> {
        let index = integer(block, pos, prefix)?;
        let name = if index == 0 {
            Name::parse(&string(block, pos)?)
        } else {
            self.get(index)?.name.clone()
        };
        let value = string(block, pos)?;
        Ok(Field { name, value })
    }

    fn insert(&mut self, mut field: Field) {
        // A raw string is a slice of the frame it came in, and so of the connection's
        // read buffer: the table keeps a copy, not the buffer.
        field.value = Bytes::copy_from_slice(&field.value);
        let size = field.size();
        self.evict(size);
        if size <= self.max {
            self.size += size;
            self.table.push_front(field);
        }
    }

    /// Evict until `room` more bytes fit (or the table is empty).
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max {
            match self.table.pop_back() {
                Some(f) => self.size -= f.size(),
                None => break,
            }
        }
    }
}

/// An integer with an N-bit prefix (RFC 7541 §5.1), at most 2^28 and some.
fn integer(src: &[u8], pos: &mut usize, prefix: u8) -> Result<usize, HpackError> {
    let mask = (1u8 << prefix) - 1;
    let first = *src.get(*pos).ok_or(HpackError::Truncated)? & mask;
    *pos += 1;
    if first < mask {
        return Ok(usize::from(first));
    }
    let mut value = usize::from(mask);
    let mut shift = 0;
    loop {
        let b = *src.get(*pos).ok_or(HpackError::Truncated)?;
        *pos += 1;
        value += usize::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(value);
        }
        shift += 7;
        if shift > 21 {
            return Err(HpackError::Integer);
        }
    }
}

/// A string literal (RFC 7541 §5.2): shared with `src` when raw, decoded when Huffman.
fn string(src: &Bytes, pos: &mut usize) -> Result<Bytes, HpackError> {
    let huffman = *src.get(*pos).ok_or(HpackError::Truncated)? & 0x80 != 0;
    let len = integer(src, pos, 7)?;
    let end = pos.checked_add(len).ok_or(HpackError::Truncated)?;
    if end > src.len() {
        return Err(HpackError::Truncated);
    }
    let raw = src.slice(*pos..end);
    *pos = end;
    if !huffman {
        return Ok(raw);
    }
    let mut out = Vec::with_capacity(len + len / 2);
    httlib_huffman::decode(&raw, &mut out, httlib_huffman::DecoderSpeed::FourBits)
        .map_err(|_| HpackError::Huffman)?;
    if !padded_with_eos(&raw, &out) {
        return Err(HpackError::Huffman);
    }
    Ok(Bytes::from(out))
}

/// Whether the bits of `coded` past the codes of `decoded` are padding as RFC 7541 §5.2
/// allows it: at most 7, all ones (the start of EOS). `httlib-huffman` lets through
/// padding of zeros, or ones and zeros mixed, which a decoder must treat as an error.
fn padded_with_eos(coded: &[u8], decoded: &[u8]) -> bool {
    let table = &httlib_huffman::encoder::table::ENCODE_TABLE;
    let used: usize = decoded
        .iter()
        .map(|&b| usize::from(table[usize::from(b)].0))
        .sum();
    let Some(padding) = (coded.len() * 8).checked_sub(used) else {
        return false;
    };
    let ones = (1u16 << padding.min(8)) - 1;
    padding <= 7 && coded.last().is_none_or(|&b| u16::from(b) & ones == ones)
}

fn put_integer(out: &mut BytesMut, pattern: u8, prefix: u8, value: usize) {
    let mask = (1usize << prefix) - 1;
    if value < mask {
        out.put_u8(pattern | value as u8);
        return;
    }
    out.put_u8(pattern | mask as u8);
    let mut rest = value - mask;
    while rest >= 0x80 {
        out.put_u8(0x80 | (rest & 0x7f) as u8);
        rest >>= 7;
    }
    out.put_u8(rest as u8);
}

fn put_string(out: &mut BytesMut, s: &[u8]) {
    put_integer(out, 0, 7, s.len());
    out.put_slice(s);
}

/// The static table's index of `name` (any value), for the names responses carry.
fn static_name(name: &str) -> Option<usize> {
    STATIC.iter().position(|(n, _)| *n == name).map(|i| i + 1)
}

/// Headers not worth a place in the table: their values change from one response to the
/// next, so indexing them would only push out the ones that repeat.
fn volatile(name: &HeaderName) -> bool {
    use http::header::*;
    [
        CONTENT_LENGTH,
        DATE,
        ETAG,
        LAST_MODIFIED,
        AGE,
        EXPIRES,
        SET_COOKIE,
        LOCATION,
    ]
    .contains(name)
}

/// A name in the encoder's table: the request pseudo-headers that repeat from one request
/// to the next on a connection (a gRPC channel's method paths, its authority), or a header.
#[derive(Clone, PartialEq, Eq)]
enum Key {
    Authority,
    Path,
    Header(HeaderName),
}

impl Key {
    fn len(&self) -> usize {
        match self {
            Key::Authority => ":authority".len(),
            Key::Path => ":path".len(),
            Key::Header(n) => n.as_str().len(),
        }
    }
}

/// A name being encoded, borrowed.
#[derive(Clone, Copy)]
enum KeyRef<'a> {
    Authority,
    Path,
    Header(&'a HeaderName),
}

impl KeyRef<'_> {
    fn is(&self, key: &Key) -> bool {
        match (self, key) {
            (KeyRef::Authority, Key::Authority) | (KeyRef::Path, Key::Path) => true,
            (KeyRef::Header(a), Key::Header(b)) => *a == b,
            _ => false,
        }
    }

    fn owned(&self) -> Key {
        match self {
            KeyRef::Authority => Key::Authority,
            KeyRef::Path => Key::Path,
            KeyRef::Header(n) => Key::Header((*n).clone()),
        }
    }

    fn raw(&self) -> &str {
        match self {
            KeyRef::Authority => ":authority",
            KeyRef::Path => ":path",
            KeyRef::Header(n) => n.as_str(),
        }
    }
}

/// How a field may be represented (RFC 7541 §6.2).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Indexing {
    /// Added to the table (incremental indexing).
    Add,
    /// Not added: a value that changes from one message to the next.
    Skip,
    /// Never indexed, here or by any intermediary: a sensitive value.
    Never,
}

/// The encoder of one connection's header blocks: the server's responses, the upstream
/// client's requests.
pub struct Encoder {
    /// Newest first, as the peer's decoder has them.
    table: VecDeque<(Key, HeaderValue)>,
    size: usize,
    max: usize,
    /// A size the peer must be told of at the start of the next block.
    update: Option<usize>,
}

impl Default for Encoder {
    fn default() -> Self {
        Self {
            table: VecDeque::new(),
            size: 0,
            max: DEFAULT_TABLE_SIZE,
            update: None,
        }
    }
}

impl Encoder {
    /// The peer's SETTINGS_HEADER_TABLE_SIZE: the table shrinks to it (never grows past
    /// the default), and the next block says so.
    pub fn set_limit(&mut self, limit: u32) {
        let max = (limit as usize).min(DEFAULT_TABLE_SIZE);
        if max != self.max {
            self.max = max;
            self.evict(0);
            self.update = Some(self.update.map_or(max, |u| u.min(max)));
        }
    }

    /// Start a block: a table size the peer set since the last one is acknowledged
    /// first (RFC 7541 §4.2: the smallest it went to, then where it ended).
    pub fn begin(&mut self, out: &mut BytesMut) {
        if let Some(update) = self.update.take() {
            if update < self.max {
                put_integer(out, 0x20, 5, update);
            }
            put_integer(out, 0x20, 5, self.max);
        }
    }

    /// `:status`, first in a response's block (after [`Encoder::begin`]).
    pub fn status(&mut self, out: &mut BytesMut, code: u16) {
        let index = match code {
            200 => 8,
            204 => 9,
            206 => 10,
            304 => 11,
            400 => 12,
            404 => 13,
            500 => 14,
            _ => {
                put_integer(out, 0x00, 4, 8);
                put_string(out, code.to_string().as_bytes());
                return;
            }
        };
        put_integer(out, 0x80, 7, index);
    }

    /// `:method`, first in a request's block (after [`Encoder::begin`]).
    pub fn method(&mut self, out: &mut BytesMut, method: &http::Method) {
        match *method {
            http::Method::GET => put_integer(out, 0x80, 7, 2),
            http::Method::POST => put_integer(out, 0x80, 7, 3),
            _ => {
                put_integer(out, 0x00, 4, 2);
                put_string(out, method.as_str().as_bytes());
            }
        }
    }

    /// `:scheme`, after `:method`.
    pub fn scheme(&mut self, out: &mut BytesMut, scheme: &str) {
        match scheme {
            "http" => put_integer(out, 0x80, 7, 6),
            "https" => put_integer(out, 0x80, 7, 7),
            _ => {
                put_integer(out, 0x00, 4, 6);
                put_string(out, scheme.as_bytes());
            }
        }
    }

    /// `:authority`: indexed, so a connection's requests after the first carry one byte.
    pub fn authority(&mut self, out: &mut BytesMut, authority: &str) {
        self.field(out, KeyRef::Authority, Some(1), authority.as_bytes(), false);
    }

    /// `:path`: indexed, so a gRPC channel's repeated method paths take one byte each.
    pub fn path(&mut self, out: &mut BytesMut, path: &str) {
        match path {
            "/" => put_integer(out, 0x80, 7, 4),
            "/index.html" => put_integer(out, 0x80, 7, 5),
            _ => self.field(out, KeyRef::Path, Some(4), path.as_bytes(), false),
        }
    }

    /// One header of a block (after [`Encoder::begin`]).
    pub fn header(&mut self, out: &mut BytesMut, name: &HeaderName, value: &HeaderValue) {
        let static_index = static_name(name.as_str());
        let volatile = volatile(name);
        if value.is_sensitive() {
            self.literal(
                out,
                KeyRef::Header(name),
                None,
                static_index,
                value.as_bytes(),
                Indexing::Never,
            );
            return;
        }
        self.field(
            out,
            KeyRef::Header(name),
            static_index,
            value.as_bytes(),
            volatile,
        );
    }

    /// A field the table may hold: its index when it does, else a literal (added to the
    /// table unless `volatile` or too large for it).
    fn field(
        &mut self,
        out: &mut BytesMut,
        key: KeyRef<'_>,
        static_index: Option<usize>,
        value: &[u8],
        volatile: bool,
    ) {
        let mut name_index = None;
        for (i, (k, v)) in self.table.iter().enumerate() {
            if key.is(k) {
                if v.as_bytes() == value {
                    put_integer(out, 0x80, 7, 62 + i);
                    return;
                }
                name_index.get_or_insert(62 + i);
            }
        }
        let size = key.raw().len() + value.len() + ENTRY_OVERHEAD;
        let indexing = if volatile || size > self.max / 2 {
            Indexing::Skip
        } else {
            Indexing::Add
        };
        self.literal(out, key, name_index, static_index, value, indexing);
    }

    fn literal(
        &mut self,
        out: &mut BytesMut,
        key: KeyRef<'_>,
        name_index: Option<usize>,
        static_index: Option<usize>,
        value: &[u8],
        indexing: Indexing,
    ) {
        let (pattern, prefix) = match indexing {
            Indexing::Add => (0x40, 6),
            Indexing::Skip => (0x00, 4),
            Indexing::Never => (0x10, 4),
        };
        match name_index.or(static_index) {
            Some(i) => put_integer(out, pattern, prefix, i),
            None => {
                put_integer(out, pattern, prefix, 0);
                put_string(out, key.raw().as_bytes());
            }
        }
        put_string(out, value);
        if indexing == Indexing::Add
            && let Ok(value) = HeaderValue::from_bytes(value)
        {
            let size = key.raw().len() + value.len() + ENTRY_OVERHEAD;
            self.evict(size);
            self.size += size;
            self.table.push_front((key.owned(), value));
        }
    }

    fn evict(&mut self, room: usize) {
        while self.size + room > self.max {
            match self.table.pop_back() {
                Some((k, v)) => self.size -= k.len() + v.len() + ENTRY_OVERHEAD,
                None => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(d: &mut Decoder, block: &[u8]) -> Result<Vec<(String, String)>, HpackError> {
        let mut out = Vec::new();
        d.decode(&Bytes::copy_from_slice(block), &mut out, usize::MAX)?;
        Ok(out
            .into_iter()
            .map(|f| {
                let name = match f.name {
                    Name::Authority => ":authority".to_string(),
                    Name::Method => ":method".into(),
                    Name::Path => ":path".into(),
                    Name::Scheme => ":scheme".into(),
                    Name::Status => ":status".into(),
                    Name::Protocol => ":protocol".into(),
                    Name::Header(h) => h.as_str().into(),
                    Name::Malformed(b) => format!("!{}", String::from_utf8_lossy(&b)),
                };
                (name, String::from_utf8_lossy(&f.value).into_owned())
            })
            .collect())
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// RFC 7541 C.3: three requests without Huffman coding, one table.
    #[test]
    fn rfc7541_c3_requests_without_huffman() {
        let mut d = Decoder::default();
        let first = hex("8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d");
        assert_eq!(
            decode(&mut d, &first).unwrap(),
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com")
            ])
        );
        assert_eq!(d.size, 57);
        let second = hex("8286 84be 5808 6e6f 2d63 6163 6865");
        assert_eq!(
            decode(&mut d, &second).unwrap(),
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
                ("cache-control", "no-cache")
            ])
        );
        assert_eq!(d.size, 110);
        let third = hex("8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65");
        assert_eq!(
            decode(&mut d, &third).unwrap(),
            pairs(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/index.html"),
                (":authority", "www.example.com"),
                ("custom-key", "custom-value")
            ])
        );
        assert_eq!(d.size, 164);
    }

    /// RFC 7541 C.4: the same requests, Huffman-coded.
    #[test]
    fn rfc7541_c4_requests_with_huffman() {
        let mut d = Decoder::default();
        let first = hex("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff");
        assert_eq!(
            decode(&mut d, &first).unwrap()[3],
            (":authority".to_string(), "www.example.com".to_string())
        );
        let second = hex("8286 84be 5886 a8eb 1064 9cbf");
        assert_eq!(
            decode(&mut d, &second).unwrap()[4],
            ("cache-control".to_string(), "no-cache".to_string())
        );
        let third = hex("8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf");
        assert_eq!(
            decode(&mut d, &third).unwrap()[4],
            ("custom-key".to_string(), "custom-value".to_string())
        );
    }

    /// A literal field without indexing named `a` whose value is the Huffman string `coded`.
    fn huffman_value(coded: &[u8]) -> Vec<u8> {
        let mut block = vec![0x00, 0x01, b'a', 0x80 | coded.len() as u8];
        block.extend_from_slice(coded);
        block
    }

    /// RFC 7541 §5.2: padding is at most 7 bits, all ones; anything else, and EOS inside
    /// the string, is a decoding error.
    #[test]
    fn huffman_padding_is_checked() {
        // 'a' is 00011: then 111 is its padding.
        let ok = decode(&mut Decoder::default(), &huffman_value(&[0b0001_1111]));
        assert_eq!(ok, Ok(pairs(&[("a", "a")])));
        // "aaaaaaaa": 40 bits, five whole bytes, no padding.
        let whole = decode(
            &mut Decoder::default(),
            &huffman_value(&[0x18, 0xc6, 0x31, 0x8c, 0x63]),
        );
        assert_eq!(whole, Ok(pairs(&[("a", "aaaaaaaa")])));
        assert_eq!(
            decode(&mut Decoder::default(), &huffman_value(&[])),
            Ok(pairs(&[("a", "")]))
        );
        for bad in [
            &[0b0001_1000][..],        // zeros
            &[0b0001_1001],            // ones and zeros
            &[0b0001_1110],            // ones, then a zero
            &[0b0001_1111, 0xff],      // 11 bits of ones
            &[0xff],                   // 8 bits of ones, no symbol
            &[0xff, 0xff, 0xff, 0xff], // EOS (30 ones) and two more
        ] {
            assert_eq!(
                decode(&mut Decoder::default(), &huffman_value(bad)),
                Err(HpackError::Huffman),
                "{bad:02x?}"
            );
        }
    }

    #[test]
    fn what_a_block_may_not_do_is_refused() {
        let mut d = Decoder::default();
        assert_eq!(decode(&mut d, &[0x80]), Err(HpackError::Index(0)));
        assert_eq!(decode(&mut d, &[0xbe]), Err(HpackError::Index(62)));
        assert_eq!(
            decode(&mut d, &[0x41, 0x05, b'a']),
            Err(HpackError::Truncated)
        );
        assert_eq!(
            decode(&mut d, &[0xff, 0xff, 0xff]),
            Err(HpackError::Truncated)
        );
        assert_eq!(
            decode(&mut d, &[0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]),
            Err(HpackError::Integer)
        );
        // A table size past what was advertised, and one after a field.
        assert_eq!(
            decode(&mut d, &[0x3f, 0xe2, 0x1f]),
            Err(HpackError::SizeUpdate(4097))
        );
        assert!(decode(&mut d, &[0x3f, 0xe1, 0x1f]).is_ok());
        assert_eq!(
            decode(&mut d, &[0x82, 0x20]),
            Err(HpackError::SizeUpdate(0))
        );
        // The EOS symbol inside a Huffman string.
        assert_eq!(
            decode(&mut d, &[0x40, 0x84, 0xff, 0xff, 0xff, 0xff, 0x01, b'a']),
            Err(HpackError::Huffman)
        );
        // An uppercase name decodes, and says it is malformed.
        assert_eq!(
            decode(&mut d, &[0x00, 0x01, b'A', 0x01, b'b']).unwrap(),
            pairs(&[("!A", "b")])
        );
    }

    #[test]
    fn any_bytes_decode_or_fail_without_panic() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut d = Decoder::default();
        for len in 0..2000 {
            let block: Vec<u8> = (0..len % 64)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            let _ = decode(&mut d, &block);
            assert!(d.size <= d.max);
        }
    }

    #[test]
    fn encoded_requests_decode_and_repeat_as_indexes() {
        let mut e = Encoder::default();
        let mut d = Decoder::default();
        let encode = |e: &mut Encoder, method: &http::Method, path: &str| {
            let mut block = BytesMut::new();
            e.begin(&mut block);
            e.method(&mut block, method);
            e.scheme(&mut block, "http");
            e.authority(&mut block, "backend:50051");
            e.path(&mut block, path);
            e.header(
                &mut block,
                &http::header::TE,
                &HeaderValue::from_static("trailers"),
            );
            block
        };
        let want = |method: &str, path: &str| {
            pairs(&[
                (":method", method),
                (":scheme", "http"),
                (":authority", "backend:50051"),
                (":path", path),
                ("te", "trailers"),
            ])
        };
        let path = "/grpc.testing.BenchmarkService/UnaryCall";
        let first = encode(&mut e, &http::Method::POST, path);
        assert_eq!(decode(&mut d, &first).unwrap(), want("POST", path));
        // Everything is in a table now: one byte per field.
        let second = encode(&mut e, &http::Method::POST, path);
        assert_eq!(second.len(), 5, "{second:?}");
        assert_eq!(decode(&mut d, &second).unwrap(), want("POST", path));
        // Another path, another method: the path's name comes from the table.
        let third = encode(&mut e, &http::Method::PUT, "/other");
        assert_eq!(decode(&mut d, &third).unwrap(), want("PUT", "/other"));
        let root = encode(&mut e, &http::Method::GET, "/");
        assert_eq!(decode(&mut d, &root).unwrap(), want("GET", "/"));
    }

    #[test]
    fn sensitive_values_are_never_indexed() {
        let mut e = Encoder::default();
        let name = HeaderName::from_static("traceparent");
        let mut value = HeaderValue::from_static("00-abc-def-01");
        value.set_sensitive(true);
        for _ in 0..2 {
            let mut block = BytesMut::new();
            e.header(&mut block, &name, &value);
            // Literal never indexed (0x10), new name.
            assert_eq!(block[0], 0x10, "{block:?}");
        }
        assert!(e.table.is_empty());
    }

    #[test]
    fn encoded_responses_decode_and_repeat_as_indexes() {
        let mut e = Encoder::default();
        let mut d = Decoder::default();
        let ct = http::header::CONTENT_TYPE;
        let grpc = HeaderName::from_static("grpc-status");
        let mut first = BytesMut::new();
        e.begin(&mut first);
        e.status(&mut first, 200);
        e.header(
            &mut first,
            &ct,
            &HeaderValue::from_static("application/grpc"),
        );
        e.header(&mut first, &grpc, &HeaderValue::from_static("0"));
        e.header(
            &mut first,
            &http::header::CONTENT_LENGTH,
            &HeaderValue::from_static("5"),
        );
        let want = pairs(&[
            (":status", "200"),
            ("content-type", "application/grpc"),
            ("grpc-status", "0"),
            ("content-length", "5"),
        ]);
        assert_eq!(decode(&mut d, &first).unwrap(), want);
        let mut second = BytesMut::new();
        e.begin(&mut second);
        e.status(&mut second, 200);
        e.header(
            &mut second,
            &ct,
            &HeaderValue::from_static("application/grpc"),
        );
        e.header(&mut second, &grpc, &HeaderValue::from_static("0"));
        assert_eq!(&second[..], &[0x88, 0xbf, 0xbe]);
        assert_eq!(decode(&mut d, &second).unwrap(), want[..3].to_vec());
        // The peer shrinks its table: the next block says so first.
        e.set_limit(0);
        let mut third = BytesMut::new();
        e.begin(&mut third);
        e.status(&mut third, 503);
        e.header(&mut third, &grpc, &HeaderValue::from_static("14"));
        assert_eq!(
            decode(&mut d, &third).unwrap(),
            pairs(&[(":status", "503"), ("grpc-status", "14")])
        );
        assert_eq!(d.size, 0);
    }
}
