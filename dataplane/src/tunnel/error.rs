//! Why a tunnel could not be opened or set up.

use std::net::SocketAddr;

use super::identity::IdentityError;
use super::transport::HANDSHAKE_TIMEOUT;
use crate::reason::Reason;

#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    #[error("connecting to gateway {0}: {1}")]
    Connect(SocketAddr, std::io::Error),
    #[error("handshake with gateway {0}: {1}")]
    Handshake(SocketAddr, String),
    #[error("gateway {0} refused {1}: not an endpoint of an exported service")]
    NotExported(SocketAddr, SocketAddr),
    #[error("gateway {0} could not reach {1}: {2}")]
    Unreachable(SocketAddr, SocketAddr, String),
    #[error("tunnel to gateway {0}: {1}")]
    Protocol(SocketAddr, String),
    #[error("gateway {0} did not answer within {HANDSHAKE_TIMEOUT:?}")]
    Timeout(SocketAddr),
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error("binding the gateway on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
}

impl TunnelError {
    pub fn reason(&self) -> Reason {
        match self {
            Self::Connect(..) => Reason::Connect,
            Self::Handshake(..) => Reason::Handshake,
            Self::NotExported(..) => Reason::NotExported,
            Self::Unreachable(..) => Reason::Unreachable,
            Self::Protocol(..) => Reason::Protocol,
            Self::Timeout(_) => Reason::Timeout,
            Self::Identity(_) | Self::Bind(..) => Reason::Config,
        }
    }
}

impl From<TunnelError> for std::io::Error {
    fn from(e: TunnelError) -> Self {
        let kind = match e {
            TunnelError::Timeout(_) => std::io::ErrorKind::TimedOut,
            _ => std::io::ErrorKind::ConnectionRefused,
        };
        std::io::Error::new(kind, e)
    }
}
