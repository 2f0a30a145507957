//! Where an HTTP/1.1 message body ends, found while its bytes pass through unchanged:
//! by length, by chunked coding (sizes, extensions and trailers scanned, not decoded), or
//! at the connection's end.

/// How a message's body is delimited (RFC 9112 §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// No body: HEAD responses, 1xx, 204, 304, requests without Content-Length.
    Empty,
    Length(u64),
    Chunked,
    /// A response without length or chunking ends when the upstream closes.
    UntilClose,
}

#[derive(Debug, thiserror::Error)]
#[error("malformed chunked body")]
pub struct BadChunk;

/// Follows one body through the bytes that carry it.
pub struct BodyScan {
    framing: Framing,
    remaining: u64,
    chunk: Chunk,
}

#[derive(Clone, Copy, Debug)]
enum Chunk {
    Size { value: u64, digits: u8 },
    Extension { value: u64 },
    SizeLf { value: u64 },
    Data(u64),
    DataCr,
    DataLf,
    TrailerStart,
    TrailerLine,
    EndLf,
}

impl BodyScan {
    pub fn new(framing: Framing) -> Self {
        Self {
            framing,
            remaining: match framing {
                Framing::Length(n) => n,
                _ => 0,
            },
            chunk: Chunk::Size {
                value: 0,
                digits: 0,
            },
        }
    }

    pub fn framing(&self) -> Framing {
        self.framing
    }

    /// How many of `bytes` belong to the body, and whether the body ends with them.
    pub fn take(&mut self, bytes: &[u8]) -> Result<(usize, bool), BadChunk> {
        match self.framing {
            Framing::Empty => Ok((0, true)),
            Framing::UntilClose => Ok((bytes.len(), false)),
            Framing::Length(_) => {
                let n = (bytes.len() as u64).min(self.remaining);
                self.remaining -= n;
                Ok((n as usize, self.remaining == 0))
            }
            Framing::Chunked => self.scan_chunked(bytes),
        }
    }

    fn scan_chunked(&mut self, bytes: &[u8]) -> Result<(usize, bool), BadChunk> {
        let mut i = 0;
        while i < bytes.len() {
            if let Chunk::Data(rem) = self.chunk {
                let n = (bytes.len() - i).min(usize::try_from(rem).unwrap_or(usize::MAX));
                i += n;
                let rem = rem - n as u64;
                self.chunk = if rem == 0 {
                    Chunk::DataCr
                } else {
                    Chunk::Data(rem)
                };
                continue;
            }
            let b = bytes[i];
            i += 1;
            self.chunk = match (self.chunk, b) {
                (Chunk::Size { value, digits }, _) if b.is_ascii_hexdigit() => {
                    if digits >= 15 {
                        return Err(BadChunk);
                    }
                    let d = u64::from(char::from(b).to_digit(16).ok_or(BadChunk)?);
                    Chunk::Size {
                        value: value * 16 + d,
                        digits: digits + 1,
                    }
                }
                (Chunk::Size { digits: 0, .. }, _) => return Err(BadChunk),
                (Chunk::Size { value, .. }, b'\r') => Chunk::SizeLf { value },
                (Chunk::Size { value, .. }, b';' | b' ' | b'\t') => Chunk::Extension { value },
                (Chunk::Size { .. }, _) => return Err(BadChunk),
                (Chunk::Extension { value }, b'\r') => Chunk::SizeLf { value },
                (Chunk::Extension { .. }, b'\n') => return Err(BadChunk),
                (Chunk::Extension { value }, _) => Chunk::Extension { value },
                (Chunk::SizeLf { value: 0 }, b'\n') => Chunk::TrailerStart,
                (Chunk::SizeLf { value }, b'\n') => Chunk::Data(value),
                (Chunk::SizeLf { .. }, _) => return Err(BadChunk),
                (Chunk::DataCr, b'\r') => Chunk::DataLf,
                (Chunk::DataLf, b'\n') => Chunk::Size {
                    value: 0,
                    digits: 0,
                },
                (Chunk::DataCr | Chunk::DataLf, _) => return Err(BadChunk),
                (Chunk::TrailerStart, b'\r') => Chunk::EndLf,
                (Chunk::TrailerStart | Chunk::TrailerLine, b'\n') => Chunk::TrailerStart,
                (Chunk::TrailerStart | Chunk::TrailerLine, _) => Chunk::TrailerLine,
                (Chunk::EndLf, b'\n') => return Ok((i, true)),
                (Chunk::EndLf, _) => return Err(BadChunk),
                (Chunk::Data(_), _) => unreachable!("handled above"),
            };
        }
        Ok((i, false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `body` in pieces of `step` bytes; the offset where the body ended.
    fn scan(body: &[u8], step: usize) -> Result<Option<usize>, BadChunk> {
        let mut s = BodyScan::new(Framing::Chunked);
        let mut at = 0;
        for piece in body.chunks(step) {
            let (n, done) = s.take(piece)?;
            if done {
                return Ok(Some(at + n));
            }
            assert_eq!(n, piece.len());
            at += n;
        }
        Ok(None)
    }

    #[test]
    fn chunked_bodies_end_where_they_end_however_they_are_split() {
        let body = b"5\r\nhello\r\n1a;ext=\"x\"\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nx-trailer: 1\r\n\r\nGET /next";
        let end = body.len() - "GET /next".len();
        for step in [1, 2, 3, 7, 64, 1024] {
            assert_eq!(scan(body, step).unwrap(), Some(end), "step {step}");
        }
        assert_eq!(scan(b"0\r\n\r\n", 1).unwrap(), Some(5));
        assert_eq!(scan(b"A\r\n0123456789\r\n0\r\n", 4).unwrap(), None);
    }

    #[test]
    fn malformed_chunks_are_refused() {
        for bad in [
            &b"\r\n"[..],
            b"5\r\nhelloX\r\n",
            b"zz\r\n",
            b"5\nhello",
            b"ffffffffffffffffff\r\n",
            b"0\r\n\rX",
        ] {
            assert!(scan(bad, 3).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn lengths_and_close() {
        let mut s = BodyScan::new(Framing::Length(10));
        assert_eq!(s.take(b"0123").unwrap(), (4, false));
        assert_eq!(s.take(b"456789extra").unwrap(), (6, true));
        let mut s = BodyScan::new(Framing::UntilClose);
        assert_eq!(s.take(b"abc").unwrap(), (3, false));
        let mut s = BodyScan::new(Framing::Empty);
        assert_eq!(s.take(b"abc").unwrap(), (0, true));
    }
}
