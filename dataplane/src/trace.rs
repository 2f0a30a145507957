//! W3C Trace Context (`traceparent`): every proxied request continues the client's trace
//! (or starts one) with a span id of its own, sent upstream, so a trace shows the hop
//! through each proxy and gateway.

use std::fmt;

use http::HeaderValue;

pub const TRACEPARENT: &str = "traceparent";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: u128,
    /// The span that is the parent of the receiver's span.
    pub span_id: u64,
    pub flags: u8,
}

fn hex<const N: usize>(s: &str) -> Option<u128> {
    (s.len() == N
        && s.bytes().all(|b| b.is_ascii_hexdigit())
        && !s.bytes().any(|b| b.is_ascii_uppercase()))
    .then(|| u128::from_str_radix(s, 16).ok())
    .flatten()
}

impl TraceParent {
    /// Parse a header value; `None` when it is not valid (then a new trace starts, as
    /// the specification asks).
    pub fn parse(v: &str) -> Option<Self> {
        let v = v.trim();
        let mut parts = v.split('-');
        let version = parts.next()?;
        let trace = parts.next()?;
        let span = parts.next()?;
        let flags = parts.next()?;
        let version = hex::<2>(version)?;
        // Version ff is invalid; version 00 has exactly four fields; later versions may
        // append fields.
        if version == 0xff || (version == 0 && parts.next().is_some()) {
            return None;
        }
        let trace_id = hex::<32>(trace)?;
        let span_id = u64::try_from(hex::<16>(span)?).ok()?;
        let flags = u8::try_from(hex::<2>(flags)?).ok()?;
        (trace_id != 0 && span_id != 0).then_some(Self {
            trace_id,
            span_id,
            flags,
        })
    }

    /// A new trace, sampled.
    pub fn root() -> Self {
        Self {
            trace_id: nonzero(rand::random()),
            span_id: nonzero(rand::random()),
            flags: 1,
        }
    }

    /// The same trace with a new span (this hop's), to send upstream.
    pub fn child(&self) -> Self {
        Self {
            span_id: nonzero(rand::random()),
            ..*self
        }
    }

    pub fn header_value(&self) -> HeaderValue {
        // Written digit by digit: the formatting machinery (`Display`, then a `String` to
        // validate) was half a percent of the proxy's CPU per gRPC request.
        let mut v = [0u8; 55];
        v[..3].copy_from_slice(b"00-");
        put_hex(&mut v[3..35], self.trace_id);
        v[35] = b'-';
        put_hex(&mut v[36..52], u128::from(self.span_id));
        v[52] = b'-';
        put_hex(&mut v[53..55], u128::from(self.flags));
        let mut value = HeaderValue::from_bytes(&v).unwrap_or_else(|_| {
            HeaderValue::from_static("00-00000000000000000000000000000001-0000000000000001-00")
        });
        // Never indexed by HPACK: a value unique to one request only churns the
        // connection's dynamic table, evicting the headers that do repeat.
        value.set_sensitive(true);
        value
    }
}

/// `n`'s lowest `out.len()` hex digits, lowercase, most significant first.
fn put_hex(out: &mut [u8], mut n: u128) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for d in out.iter_mut().rev() {
        *d = DIGITS[(n & 0xf) as usize];
        n >>= 4;
    }
}

fn nonzero<T: PartialEq + From<u8>>(v: T) -> T {
    if v == T::from(0) { T::from(1) } else { v }
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{:032x}-{:016x}-{:02x}",
            self.trace_id, self.span_id, self.flags
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_continue() {
        let v = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let t = TraceParent::parse(v).unwrap();
        assert_eq!(t.to_string(), v);
        let c = t.child();
        assert_eq!((c.trace_id, c.flags), (t.trace_id, t.flags));
        assert_ne!(c.span_id, t.span_id);
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-xyz-00f067aa0ba902b7-01",
        ] {
            assert!(TraceParent::parse(bad).is_none(), "{bad}");
        }
        // A later version may carry more fields.
        assert!(
            TraceParent::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x")
                .is_some()
        );
        assert_eq!(TraceParent::root().to_string().len(), 55);
        for t in [t, c, TraceParent::root()] {
            let h = t.header_value();
            assert_eq!(h.to_str().ok(), Some(t.to_string().as_str()));
            assert!(h.is_sensitive());
        }
    }
}
