//! The preamble of a QUIC tunnel stream. Over TCP the HTTP/2 CONNECT request carries the
//! target and the response status the verdict; a QUIC stream has neither, so it opens
//! with this small framing:
//!
//! client → gateway: `SLT1` · target length (u16, big-endian) · target (`ip:port`, UTF-8)
//! gateway → client: code (u8) · message length (u16, big-endian) · message (UTF-8)

use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

const MAGIC: &[u8; 4] = b"SLT1";
/// Longest target accepted (an IPv6 address with port is under 50 bytes).
const MAX_TARGET: usize = 255;
const MAX_MESSAGE: usize = 1024;

/// The gateway's verdict on a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Connected = 0,
    /// The target is not an endpoint of an exported service.
    NotExported = 1,
    /// The target did not accept the connection.
    Unreachable = 2,
    /// The preamble was malformed.
    BadRequest = 3,
}

impl Verdict {
    fn from_u8(b: u8) -> Option<Self> {
        Some(match b {
            0 => Self::Connected,
            1 => Self::NotExported,
            2 => Self::Unreachable,
            3 => Self::BadRequest,
            _ => return None,
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("not a Sluice tunnel stream (bad magic)")]
    BadMagic,
    #[error("target of {0} bytes is too long")]
    TooLong(usize),
    #[error("target {0:?} is not an ip:port")]
    BadTarget(String),
    #[error("unknown verdict code {0}")]
    BadVerdict(u8),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

pub async fn write_request<W: AsyncWrite + Unpin>(
    w: &mut W,
    target: SocketAddr,
) -> Result<(), FrameError> {
    let t = target.to_string();
    let mut buf = Vec::with_capacity(6 + t.len());
    buf.extend_from_slice(MAGIC);
    buf.extend_from_slice(&(t.len() as u16).to_be_bytes());
    buf.extend_from_slice(t.as_bytes());
    w.write_all(&buf).await?;
    Ok(())
}

pub async fn read_request<R: AsyncRead + Unpin>(r: &mut R) -> Result<SocketAddr, FrameError> {
    let mut head = [0u8; 6];
    r.read_exact(&mut head).await?;
    if &head[..4] != MAGIC {
        return Err(FrameError::BadMagic);
    }
    let len = usize::from(u16::from_be_bytes([head[4], head[5]]));
    if len > MAX_TARGET {
        return Err(FrameError::TooLong(len));
    }
    let mut target = vec![0u8; len];
    r.read_exact(&mut target).await?;
    let text = String::from_utf8_lossy(&target).into_owned();
    text.parse().map_err(|_| FrameError::BadTarget(text))
}

pub async fn write_verdict<W: AsyncWrite + Unpin>(
    w: &mut W,
    verdict: Verdict,
    message: &str,
) -> Result<(), FrameError> {
    let m = &message.as_bytes()[..message.len().min(MAX_MESSAGE)];
    let mut buf = Vec::with_capacity(3 + m.len());
    buf.push(verdict as u8);
    buf.extend_from_slice(&(m.len() as u16).to_be_bytes());
    buf.extend_from_slice(m);
    w.write_all(&buf).await?;
    Ok(())
}

pub async fn read_verdict<R: AsyncRead + Unpin>(
    r: &mut R,
) -> Result<(Verdict, String), FrameError> {
    let mut head = [0u8; 3];
    r.read_exact(&mut head).await?;
    let verdict = Verdict::from_u8(head[0]).ok_or(FrameError::BadVerdict(head[0]))?;
    let len = usize::from(u16::from_be_bytes([head[1], head[2]])).min(MAX_MESSAGE);
    let mut msg = vec![0u8; len];
    r.read_exact(&mut msg).await?;
    Ok((verdict, String::from_utf8_lossy(&msg).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn round_trip_and_garbage() {
        let mut buf = Vec::new();
        let target: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        write_request(&mut buf, target).await.unwrap();
        assert_eq!(read_request(&mut &buf[..]).await.unwrap(), target);
        let mut v = Vec::new();
        write_verdict(&mut v, Verdict::NotExported, "no")
            .await
            .unwrap();
        assert_eq!(
            read_verdict(&mut &v[..]).await.unwrap(),
            (Verdict::NotExported, "no".to_string())
        );
        assert!(matches!(
            read_request(&mut &b"GET / HTTP/1.1\r\n"[..]).await,
            Err(FrameError::BadMagic)
        ));
        assert!(matches!(
            read_request(&mut &b"SLT1\xff\xff"[..]).await,
            Err(FrameError::TooLong(_))
        ));
        assert!(matches!(
            read_request(&mut &b"SLT1\x00\x03abc"[..]).await,
            Err(FrameError::BadTarget(_))
        ));
        assert!(read_request(&mut &b"SLT1\x00"[..]).await.is_err());
    }
}
