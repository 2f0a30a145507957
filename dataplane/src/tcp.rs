//! L4: a connection is balanced once, then bytes flow both ways until either side closes.
//! A connection to a draining endpoint keeps running; only new connections avoid it.
//! A failed connect is retried on another endpoint, spending the service's retry budget
//! as HTTP retries do.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use tokio::net::TcpStream;

use crate::dial::{MAX_TRIED, Upstream, dial};
use crate::reason::Reason;
use crate::service::Service;

/// Buffer per direction: large enough for bulk transfers at loopback speed.
const BUFFER: usize = 64 * 1024;

/// Serve one client connection of a TCP service.
pub async fn serve(svc: Arc<Service>, mut inbound: TcpStream) {
    let mut tried: Vec<SocketAddr> = Vec::with_capacity(MAX_TRIED);
    svc.budget.request();
    // Every failure here is a connect: nothing was sent, so up to MAX_TRIED endpoints.
    for attempt in 0..MAX_TRIED {
        if attempt > 0 {
            if !svc.budget.try_retry() {
                break;
            }
            svc.metrics.retry(&svc.name);
        }
        let Some(ep) = svc.balancer.pick(&tried) else {
            break;
        };
        tried.push(ep.address);
        let start = Instant::now();
        let outbound = match dial(ep.address, ep.via.as_ref(), svc.connect_timeout()).await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(endpoint = %ep.address, error = %e, "connect failed");
                ep.failure(start.elapsed());
                svc.metrics.failure(&svc.name, &ep.cluster, e.reason());
                continue;
            }
        };
        ep.success(start.elapsed());
        let _ = inbound.set_nodelay(true);
        let _guard = ep.start();
        let carried = match outbound {
            Upstream::Tcp(mut outbound) => {
                tokio::io::copy_bidirectional_with_sizes(
                    &mut inbound,
                    &mut outbound,
                    BUFFER,
                    BUFFER,
                )
                .await
            }
            // Through a tunnel: its own relay, which hands h2 what it read as it is.
            Upstream::Tunnel(stream) => stream.relay(inbound).await.map(|(down, up)| (up, down)),
        };
        match carried {
            Ok((up, down)) => {
                ep.metrics.to_endpoint.inc_by(up);
                ep.metrics.to_client.inc_by(down);
            }
            Err(e) => {
                tracing::debug!(endpoint = %ep.address, error = %e, "connection ended with an error");
                svc.metrics.failure(&svc.name, &ep.cluster, Reason::Reset);
            }
        }
        return;
    }
    svc.metrics.failure(&svc.name, "", Reason::NoEndpoint);
}
