//! L4: a connection is balanced once, then bytes flow both ways until either side closes.
//! A connection to a draining endpoint keeps running; only new connections avoid it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use tokio::net::TcpStream;

use crate::service::Service;

/// Buffer per direction: large enough for bulk transfers at loopback speed.
const BUFFER: usize = 64 * 1024;
const MAX_ATTEMPTS: usize = 3;

pub async fn proxy(svc: Arc<Service>, mut inbound: TcpStream) {
    let mut tried: Vec<SocketAddr> = Vec::with_capacity(MAX_ATTEMPTS);
    for attempt in 0..MAX_ATTEMPTS {
        let Some(ep) = svc.balancer.pick(&tried) else {
            break;
        };
        if attempt > 0 {
            svc.metrics.retry(&svc.name);
        }
        tried.push(ep.address);
        let start = Instant::now();
        let mut outbound =
            match crate::dial::dial(ep.address, ep.via.as_ref(), svc.connect_timeout()).await {
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
        match tokio::io::copy_bidirectional_with_sizes(&mut inbound, &mut outbound, BUFFER, BUFFER)
            .await
        {
            Ok((up, down)) => {
                ep.metrics.to_endpoint.inc_by(up);
                ep.metrics.to_client.inc_by(down);
            }
            Err(e) => {
                tracing::debug!(endpoint = %ep.address, error = %e, "connection ended with an error");
                svc.metrics.failure(&svc.name, &ep.cluster, "reset");
            }
        }
        return;
    }
    svc.metrics.failure(&svc.name, "", "no_endpoint");
}
