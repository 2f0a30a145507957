//! The few bytes of a UDP query the fast path reads, and the response it writes from a
//! remembered answer: no allocation and no hickory `Message` per query.
//!
//! Only the common shape is read here — a query (QR 0, opcode QUERY) with one uncompressed
//! question, no answer or authority records, and at most one EDNS version-0 OPT with
//! opaque options. Anything else returns `None` and takes the slow path (hickory's decoder,
//! [`crate::answer`] and hickory's encoder), which stays the reference: the responses
//! written here are the slow path's bytes for an earlier query with the same key, around
//! this query's id, flags, question and OPT. Where the earlier query spelt the name in
//! another case, the answer's names point at this query's question (hickory compresses
//! only against byte-identical names, so the slow path would spell them out): the same
//! records, in the asker's case, sometimes shorter.

/// Length of the DNS header.
pub const HEADER: usize = 12;

/// Bytes of the OPT record a response carries when its query had one: root name, type 41,
/// class (payload), TTL (extended rcode, version, flags), RDLENGTH 0.
pub const OPT_LEN: usize = 11;

/// Longest name on the wire (RFC 1035 §2.3.4).
const MAX_NAME: usize = 255;

/// OPT option codes hickory decodes structurally (NSID, client subnet); a query carrying
/// one goes the slow path so that a malformed one gets hickory's error.
const PARSED_OPTIONS: [u16; 2] = [3, 8];

/// A query the fast path can answer from memory.
#[derive(Debug)]
pub struct Query<'a> {
    id: [u8; 2],
    /// The RD bit (header byte 2) and CD bit (byte 3), which a response echoes.
    rd: u8,
    cd: u8,
    /// The question as sent: name, type and class.
    pub question: &'a [u8],
    /// The UDP payload size the query's OPT offers; `None` without EDNS.
    pub edns_payload: Option<u16>,
}

/// Read `bytes` as a plain query; on success `key` holds its memo key: type, class and the
/// name with ASCII letters lowercased (names compare case-insensitively in ASCII only,
/// as hickory's `LowerName` does).
pub fn parse<'a>(bytes: &'a [u8], key: &mut Vec<u8>) -> Option<Query<'a>> {
    key.clear();
    let header = bytes.get(..HEADER)?;
    let (b2, b3) = (header[2], header[3]);
    // QR 0 (a query), opcode 0 (QUERY).
    if b2 & 0xF8 != 0 {
        return None;
    }
    let count = |i: usize| u16::from_be_bytes([header[i], header[i + 1]]);
    if count(4) != 1 || count(6) != 0 || count(8) != 0 || count(10) > 1 {
        return None;
    }
    key.extend_from_slice(&[0; 4]);
    let mut pos = HEADER;
    loop {
        let len = usize::from(*bytes.get(pos)?);
        if len & 0xC0 != 0 {
            return None; // a pointer or an extended label type
        }
        let label = bytes.get(pos..pos + 1 + len)?;
        key.push(label[0]);
        key.extend(label[1..].iter().map(u8::to_ascii_lowercase));
        pos += 1 + len;
        if key.len() - 4 > MAX_NAME {
            return None;
        }
        if len == 0 {
            break;
        }
    }
    let type_class = bytes.get(pos..pos + 4)?;
    key[..4].copy_from_slice(type_class);
    let question = &bytes[HEADER..pos + 4];
    let rest = &bytes[pos + 4..];
    let edns_payload = if count(10) == 1 {
        Some(opt_payload(rest)?)
    } else if rest.is_empty() {
        None
    } else {
        return None;
    };
    Some(Query {
        id: [header[0], header[1]],
        rd: b2 & 0x01,
        cd: b3 & 0x10,
        question,
        edns_payload,
    })
}

/// The payload size of an OPT record that is exactly `rest`: root owner, version 0, no
/// extended rcode, options well formed and opaque to hickory.
fn opt_payload(rest: &[u8]) -> Option<u16> {
    let fixed = rest.get(..OPT_LEN)?;
    let field = |i: usize| u16::from_be_bytes([fixed[i], fixed[i + 1]]);
    // owner ".", type OPT, extended rcode 0, version 0.
    if fixed[0] != 0 || field(1) != 41 || fixed[5] != 0 || fixed[6] != 0 {
        return None;
    }
    let mut options = &rest[OPT_LEN..];
    if options.len() != usize::from(field(9)) {
        return None;
    }
    while !options.is_empty() {
        let head = options.get(..4)?;
        let code = u16::from_be_bytes([head[0], head[1]]);
        let len = usize::from(u16::from_be_bytes([head[2], head[3]]));
        if PARSED_OPTIONS.contains(&code) {
            return None;
        }
        options = options.get(4 + len..)?;
    }
    Some(field(3))
}

/// The parts of a slow-path response that do not depend on the request: what a later
/// query with the same key gets, around its own id, flags, question and OPT.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sections {
    /// Header byte 2's AA bit and byte 3's RA bit and rcode.
    aa: u8,
    ra_rcode: u8,
    /// Answer, authority and additional counts (the additional without the OPT).
    counts: [u16; 3],
    /// Bytes of the key at the start of `bytes`.
    key_len: usize,
    /// The memo key these sections answer, then the answer, authority and additional
    /// records, names compressed against the question at offset 12 — which has the same
    /// shape in every query with this key. One allocation: a hit reads one place.
    bytes: Box<[u8]>,
}

impl Sections {
    /// Cut the request-independent part out of `response`, the slow path's answer to a
    /// query asking `question` (whose memo key is `key`) which had an OPT iff `edns`.
    /// `None` for anything not worth remembering: truncated, a question not echoed as
    /// asked, or an rcode that needs the OPT's extended bits.
    pub fn of(key: &[u8], response: &[u8], question: &[u8], edns: bool) -> Option<Self> {
        let header = response.get(..HEADER)?;
        let count = |i: usize| u16::from_be_bytes([header[i], header[i + 1]]);
        // QR 1, opcode 0, TC 0.
        if header[2] & 0xFA != 0x80 || count(4) != 1 {
            return None;
        }
        let start = HEADER + question.len();
        if !response.get(HEADER..start)?.eq_ignore_ascii_case(question) {
            return None;
        }
        let (end, additional) = if edns {
            let end = response.len().checked_sub(OPT_LEN)?;
            let opt = response.get(end..)?;
            // A plain OPT: no extended rcode bits, no options.
            if opt[..3] != [0, 0, 41] || opt[5..] != [0; 6] {
                return None;
            }
            (end, count(10).checked_sub(1)?)
        } else {
            (response.len(), count(10))
        };
        Some(Self {
            aa: header[2] & 0x04,
            ra_rcode: header[3] & 0x8F,
            counts: [count(6), count(8), additional],
            key_len: key.len(),
            bytes: [key, response.get(start..end)?].concat().into(),
        })
    }

    /// The memo key these sections answer.
    pub fn key(&self) -> &[u8] {
        &self.bytes[..self.key_len]
    }

    fn records(&self) -> &[u8] {
        &self.bytes[self.key_len..]
    }

    /// Bytes this entry holds.
    pub fn size(&self) -> usize {
        self.bytes.len() + std::mem::size_of::<Self>()
    }

    /// Write the response to `query` into `out`; `false` (and `out` unspecified) when it
    /// would not fit the query's UDP size (512 without EDNS, its payload clamped to
    /// 512..=`max_udp`): the slow path truncates.
    pub fn write(&self, query: &Query<'_>, max_udp: u16, out: &mut Vec<u8>) -> bool {
        let opt = if query.edns_payload.is_some() {
            OPT_LEN
        } else {
            0
        };
        let len = HEADER + query.question.len() + self.records().len() + opt;
        let limit = query
            .edns_payload
            .map_or(512, |p| p.clamp(512, max_udp.max(512)));
        if len > usize::from(limit) {
            return false;
        }
        let [an, ns, ar] = self.counts;
        let Some(ar) = ar.checked_add(u16::from(opt != 0)) else {
            return false;
        };
        out.clear();
        out.extend_from_slice(&query.id);
        out.push(0x80 | self.aa | query.rd);
        out.push(self.ra_rcode | query.cd);
        for c in [1, an, ns, ar] {
            out.extend_from_slice(&c.to_be_bytes());
        }
        out.extend_from_slice(query.question);
        out.extend_from_slice(self.records());
        if let Some(payload) = query.edns_payload {
            let payload = payload.clamp(512, max_udp.max(512));
            out.extend_from_slice(&[0, 0, 41]);
            out.extend_from_slice(&payload.to_be_bytes());
            out.extend_from_slice(&[0; 6]);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(name: &[u8], edns: Option<&[u8]>) -> Vec<u8> {
        let ar = u8::from(edns.is_some());
        let mut q = vec![0xAB, 0xCD, 0x01, 0x10, 0, 1, 0, 0, 0, 0, 0, ar];
        q.extend_from_slice(name);
        q.extend_from_slice(&[0, 1, 0, 1]);
        if let Some(opt) = edns {
            q.extend_from_slice(opt);
        }
        q
    }

    #[test]
    fn a_plain_query_is_read_and_keyed_in_lowercase() {
        let mut key = Vec::new();
        let bytes = query(b"\x03WeB\x04shop\x00", None);
        let q = parse(&bytes, &mut key).unwrap();
        assert_eq!(key, b"\x00\x01\x00\x01\x03web\x04shop\x00");
        assert_eq!(q.question.len(), 14);
        assert_eq!(q.edns_payload, None);
        assert_eq!((q.rd, q.cd), (1, 0x10));
    }

    #[test]
    fn unusual_queries_are_left_to_the_slow_path() {
        let mut key = Vec::new();
        let ok = query(b"\x03web\x00", None);
        for bad in [
            {
                let mut q = ok.clone();
                q[2] |= 0x80; // a response
                q
            },
            {
                let mut q = ok.clone();
                q[2] |= 0x08; // opcode 1
                q
            },
            {
                let mut q = ok.clone();
                q[5] = 2; // two questions
                q
            },
            {
                let mut q = ok.clone();
                q.push(0); // trailing byte
                q
            },
            query(b"\xC0\x0C", None),    // a pointer in the question
            query(b"\x05web\x00", None), // a label past the end
            ok[..ok.len() - 1].to_vec(), // cut in the class
            query(
                b"\x03web\x00",
                Some(b"\x00\x00\x29\x04\xd0\x00\x01\x00\x00\x00\x00"),
            ), // version 1
            query(
                b"\x03web\x00",
                Some(b"\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x04\x00\x08\x00\x00"),
            ), // client subnet
            query(
                b"\x03web\x00",
                Some(b"\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x05\x00\x0a\x00\x08\x00"),
            ), // option cut short
        ] {
            assert!(parse(&bad, &mut key).is_none(), "{bad:02x?}");
        }
        let long: Vec<u8> = std::iter::repeat_n(b"\x3f".iter().chain([b'a'; 63].iter()), 5)
            .flatten()
            .copied()
            .chain([0])
            .collect();
        assert!(
            parse(&query(&long, None), &mut key).is_none(),
            "a 321-byte name"
        );
    }

    #[test]
    fn an_opt_with_a_cookie_is_read() {
        let mut key = Vec::new();
        // Payload 1232, DO set, one 8-byte COOKIE option.
        let opt = b"\x00\x00\x29\x04\xd0\x00\x00\x80\x00\x00\x0c\
                    \x00\x0a\x00\x08\x01\x02\x03\x04\x05\x06\x07\x08";
        let bytes = query(b"\x03web\x00", Some(opt));
        assert_eq!(parse(&bytes, &mut key).unwrap().edns_payload, Some(1232));
    }

    #[test]
    fn a_response_is_rebuilt_around_another_querys_id_question_and_opt() {
        let mut key = Vec::new();
        // A response to "web." A with one answer (pointer to the question) and an OPT.
        let mut response = vec![0, 1, 0x84, 0x00, 0, 1, 0, 1, 0, 0, 0, 1];
        response.extend_from_slice(b"\x03web\x00\x00\x01\x00\x01");
        let record = b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x05\x00\x04\x7f\x00\x00\x01";
        response.extend_from_slice(record);
        response.extend_from_slice(b"\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x00");
        let s = Sections::of(b"key", &response, b"\x03web\x00\x00\x01\x00\x01", true).unwrap();
        assert_eq!(s.counts, [1, 0, 0]);

        let plain = query(b"\x03WEB\x00", None);
        let q = parse(&plain, &mut key).unwrap();
        let mut out = Vec::new();
        assert!(s.write(&q, 1232, &mut out));
        let mut want = vec![0xAB, 0xCD, 0x85, 0x10, 0, 1, 0, 1, 0, 0, 0, 0];
        want.extend_from_slice(b"\x03WEB\x00\x00\x01\x00\x01");
        want.extend_from_slice(record);
        assert_eq!(out, want);

        let opt = b"\x00\x00\x29\xff\xff\x00\x00\x00\x00\x00\x00";
        let with_opt = query(b"\x03web\x00", Some(opt));
        let q = parse(&with_opt, &mut key).unwrap();
        assert!(s.write(&q, 1232, &mut out));
        assert_eq!(out[11], 1, "the OPT is counted");
        assert_eq!(
            &out[out.len() - 11..],
            b"\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x00"
        );

        // Truncated responses are not remembered; over-size ones are not written.
        let mut truncated = response.clone();
        truncated[2] |= 0x02;
        assert!(Sections::of(b"key", &truncated, b"\x03web\x00\x00\x01\x00\x01", true).is_none());
        assert_eq!(s.key(), b"key");
        let big = Sections {
            bytes: vec![0; 603].into(),
            ..s
        };
        assert!(!big.write(&parse(&plain, &mut key).unwrap(), 1232, &mut out));
    }
}
