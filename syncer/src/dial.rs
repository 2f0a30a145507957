//! The syncer's leg of the control plane's path to a Service (an admission webhook's): the
//! control plane's upgraded `GET /services/<namespace>/<service>/<port>` (protocol
//! `sluice-tcp`) is answered with a byte stream to one ready endpoint of that Service's
//! port, chosen from the cluster's EndpointSlices, for namespaces the syncer synced only.
//! The control plane runs TLS to the webhook over the stream; the syncer reads nothing of it.

use std::net::SocketAddr;
use std::time::Duration;

use http::{Request, Response, StatusCode, header};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};

use crate::connect::{Body, answer};

/// The path prefix of the endpoint.
pub const PREFIX: &str = "/services/";

/// The upgrade protocol asked for.
pub const PROTOCOL: &str = "sluice-tcp";

/// How long connecting to one endpoint may take before the next is tried.
const CONNECT_WITHIN: Duration = Duration::from_secs(3);

/// `<namespace>/<service>/<port>` of a path under [`PREFIX`].
pub fn target(path: &str) -> Option<(&str, &str, u16)> {
    let rest = path.strip_prefix(PREFIX)?;
    let mut parts = rest.split('/');
    let (ns, svc, port) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let port = port.parse().ok().filter(|p| *p > 0)?;
    Some((ns, svc, port))
}

/// The ready endpoints of `service`'s port `port` in namespace `ns`.
async fn endpoints(
    downstream: &kube::Client,
    ns: &str,
    service: &str,
    port: u16,
) -> Result<Vec<SocketAddr>, String> {
    let svc = Api::<Service>::namespaced(downstream.clone(), ns)
        .get_opt(service)
        .await
        .map_err(|e| format!("reading service {service:?}: {e}"))?
        .ok_or_else(|| format!("service {service:?} not found"))?;
    let port_name = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .into_iter()
        .flatten()
        .find(|p| p.port == i32::from(port))
        .map(|p| p.name.clone().unwrap_or_default())
        .ok_or_else(|| format!("service {service:?} has no port {port}"))?;
    let slices = Api::<EndpointSlice>::namespaced(downstream.clone(), ns)
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={service}")))
        .await
        .map_err(|e| format!("listing the endpoints of {service:?}: {e}"))?;
    let mut out = Vec::new();
    for slice in slices.items {
        let Some(target) = slice
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.clone().unwrap_or_default() == port_name)
            .and_then(|p| p.port)
            .and_then(|p| u16::try_from(p).ok())
        else {
            continue;
        };
        for ep in slice.endpoints.into_iter().flatten() {
            if ep.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
                continue;
            }
            out.extend(
                ep.addresses
                    .iter()
                    .filter_map(|a| a.parse().ok())
                    .map(|ip| SocketAddr::new(ip, target)),
            );
        }
    }
    if out.is_empty() {
        return Err(format!("service {service:?} has no ready endpoints"));
    }
    Ok(out)
}

/// Answer the upgrade `req` with a stream to a ready endpoint of `service`'s `port` in
/// namespace `ns` (checked to be one the syncer synced).
pub async fn relay(
    mut req: Request<hyper::body::Incoming>,
    downstream: &kube::Client,
    ns: &str,
    service: &str,
    port: u16,
) -> Response<Body> {
    let asked = req
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case(PROTOCOL));
    if !asked {
        return answer(
            StatusCode::BAD_REQUEST,
            format!("an upgrade to {PROTOCOL} is required\n"),
        );
    }
    let addrs = match endpoints(downstream, ns, service, port).await {
        Ok(a) => a,
        Err(why) => return answer(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    };
    let mut last = String::new();
    let mut stream = None;
    for addr in addrs {
        match tokio::time::timeout(CONNECT_WITHIN, tokio::net::TcpStream::connect(addr)).await {
            Ok(Ok(s)) => {
                stream = Some(s);
                break;
            }
            Ok(Err(e)) => last = format!("dial tcp {addr}: {e}"),
            Err(_) => last = format!("dial tcp {addr}: i/o timeout"),
        }
    }
    let Some(mut tcp) = stream else {
        return answer(StatusCode::BAD_GATEWAY, format!("{last}\n"));
    };
    let control_side = hyper::upgrade::on(&mut req);
    let span = tracing::info_span!("service stream", namespace = %ns, %service, port);
    tokio::spawn(tracing::Instrument::instrument(
        async move {
            match control_side.await {
                Ok(upgraded) => {
                    let mut upgraded = TokioIo::new(upgraded);
                    if let Err(e) = tokio::io::copy_bidirectional(&mut upgraded, &mut tcp).await {
                        tracing::debug!(error = %e, "service stream ended");
                    }
                }
                Err(e) => tracing::debug!(error = %e, "the control plane did not upgrade"),
            }
        },
        span,
    ));
    let mut back = answer(StatusCode::SWITCHING_PROTOCOLS, String::new());
    back.headers_mut().insert(
        header::CONNECTION,
        http::HeaderValue::from_static("Upgrade"),
    );
    back.headers_mut()
        .insert(header::UPGRADE, http::HeaderValue::from_static(PROTOCOL));
    back
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_namespace_a_service_and_a_port_are_a_target() {
        assert_eq!(target("/services/ns/svc/443"), Some(("ns", "svc", 443)));
        assert_eq!(target("/services/ns/svc/0"), None);
        assert_eq!(target("/services/ns/svc/443/x"), None);
        assert_eq!(target("/services/ns/svc/http"), None);
    }
}
