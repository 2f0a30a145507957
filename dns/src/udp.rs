//! The UDP fast path: receive, answer (from remembered bytes when the query was seen since
//! the model last changed: [`Responder`]) and send in one task, without a task or channel
//! per datagram. Queries that must be forwarded are handed to a task.
//! TCP stays on hickory-server's listener with the same [`DnsHandler`].

use std::sync::Arc;

use tokio::net::UdpSocket;

use crate::handler::DnsHandler;
use crate::responder::{Reply, Responder};

/// Largest datagram read; EDNS clients rarely offer more than 4096.
const MAX_DATAGRAM: usize = 65_535;

/// Serve datagrams on `socket` until the task is aborted, remembering up to `memo_bytes`
/// of answers.
pub async fn serve(socket: Arc<UdpSocket>, handler: DnsHandler, memo_bytes: usize) {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut responder = Responder::new(handler.clone(), memo_bytes);
    loop {
        let (n, src) = match socket.recv_from(&mut buf).await {
            Ok(r) => r,
            Err(e) => {
                // ICMP errors from earlier sends surface here on Linux; keep serving.
                tracing::debug!(error = %e, "udp receive failed");
                continue;
            }
        };
        if src.port() == 0 {
            continue;
        }
        match responder.answer(&buf[..n], src) {
            Reply::Send(response) => {
                if let Err(e) = socket.send_to(response, src).await {
                    tracing::debug!(error = %e, %src, "udp send failed");
                }
            }
            Reply::Drop => {}
            Reply::Forward(request) => {
                let socket = socket.clone();
                let handler = handler.clone();
                tokio::spawn(async move {
                    let response = handler.answer_forwarded(request).await;
                    let _ = socket.send_to(&response, src).await;
                });
            }
        }
    }
}
