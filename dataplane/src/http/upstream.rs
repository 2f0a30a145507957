//! Upstream connections of one endpoint, owned by the HTTP layer: hyper's pooled client
//! (HTTP/1.1), the shared HTTP/2 connection ([`H2Upstream`]) and the lean path's idle
//! connections. They hang in the
//! endpoint's attachment slot, so draining the endpoint drops them and closes the idle
//! connections while in-flight requests finish on theirs.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

use super::h2_client::H2Upstream;
use super::idle::IdlePool;
use super::replay::ReplayBody;
use crate::balance::Endpoint;
use crate::dial::Upstream;
use crate::tunnel::Peer;

/// How long an idle upstream connection is kept.
const POOL_IDLE: Duration = Duration::from_secs(30);

/// Dials one endpoint (directly or through its cluster's gateway) whatever the request's
/// authority says: requests keep the client's authority (Host, :authority) while
/// connections go to the endpoint picked.
#[derive(Clone)]
pub struct EndpointConnector {
    addr: SocketAddr,
    via: Option<Arc<Peer>>,
    timeout: Duration,
}

type Connecting = Pin<Box<dyn Future<Output = Result<TokioIo<Upstream>, std::io::Error>> + Send>>;

impl tower_service::Service<http::Uri> for EndpointConnector {
    type Response = TokioIo<Upstream>;
    type Error = std::io::Error;
    type Future = Connecting;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Uri) -> Self::Future {
        Box::pin(crate::dial::dial_for_pool(
            self.addr,
            self.via.clone(),
            self.timeout,
        ))
    }
}

pub type UpstreamClient = Client<EndpointConnector, ReplayBody>;

/// Upstream connections of one endpoint: hyper's HTTP/1.1 pool, the HTTP/2 connection,
/// and the lean HTTP/1.1 path's idle connections.
pub struct Pool {
    pub h1: UpstreamClient,
    pub h2: H2Upstream,
    pub lean: Arc<IdlePool>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pool")
    }
}

impl Pool {
    pub fn new(addr: SocketAddr, via: Option<Arc<Peer>>, timeout: Duration) -> Self {
        let connector = EndpointConnector {
            addr,
            via: via.clone(),
            timeout,
        };
        let h1 = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(POOL_IDLE)
            .pool_timer(TokioTimer::new())
            .build(connector);
        let h2 = H2Upstream::new(addr, via.clone(), timeout);
        let lean = Arc::new(IdlePool::new(addr, via, timeout, POOL_IDLE));
        Self { h1, h2, lean }
    }
}

/// The pools of `ep`, made on first use.
pub fn pool_of(ep: &Endpoint, connect_timeout: Duration) -> Arc<Pool> {
    ep.attached(|| Pool::new(ep.address, ep.via.clone(), connect_timeout))
}
