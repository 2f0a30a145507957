//! North-south: one HTTP listener for clients outside the clusterset, routing each request
//! by its Host to a service. The service's balancer decides where it runs now, so an
//! external client follows a move exactly as an internal one does.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use http::header;
use http::{Request, Response};
use hyper::body::Incoming;
use tokio::sync::watch;

use crate::accept::{bind, spawn_accept};
use crate::http::forward::handle;
use crate::http::local::{self, LocalError, ProxyBody};
use crate::http::server::serve_http;
use crate::reason::Reason;
use crate::service::Service;

/// The live service behind a route (the listener's handle: it follows a service replaced
/// on reload).
pub type ServiceHandle = Arc<RwLock<Arc<Service>>>;

#[derive(Clone, Default)]
pub struct Routes(Arc<RwLock<Arc<HashMap<String, ServiceHandle>>>>);

impl Routes {
    pub fn set(&self, routes: HashMap<String, ServiceHandle>) {
        let mut w = self.0.write().unwrap_or_else(|p| p.into_inner());
        *w = Arc::new(routes);
    }

    fn get(&self, host: &str) -> Option<Arc<Service>> {
        let routes = self
            .0
            .read()
            .map(|r| r.clone())
            .unwrap_or_else(|p| p.into_inner().clone());
        let handle = routes.get(host)?;
        Some(
            handle
                .read()
                .map(|s| s.clone())
                .unwrap_or_else(|p| p.into_inner().clone()),
        )
    }
}

/// The Host a request is for: `:authority` (HTTP/2, absolute-form) or the Host header,
/// without port, lower-cased.
pub fn host_of<B>(req: &Request<B>) -> Option<String> {
    let raw = req.uri().host().map(str::to_string).or_else(|| {
        req.headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(|h| match h.rsplit_once(':') {
                Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host.to_string(),
                _ => h.to_string(),
            })
    })?;
    Some(raw.trim_end_matches('.').to_ascii_lowercase())
}

pub struct Ingress {
    pub addr: SocketAddr,
    pub routes: Routes,
    stop: watch::Sender<bool>,
}

impl Ingress {
    pub fn start(listen: SocketAddr) -> std::io::Result<Self> {
        let listener = bind(listen)?;
        let addr = listener.local_addr()?;
        let routes = Routes::default();
        let (stop, stopped) = watch::channel(false);
        let shared = routes.clone();
        spawn_accept(listener, stopped, "ingress", move |stream, _| {
            let _ = stream.set_nodelay(true);
            let routes = shared.clone();
            tokio::spawn(serve_http(stream, false, move |req| {
                route(routes.clone(), req)
            }));
        });
        tracing::info!(%addr, "ingress listening");
        Ok(Self { addr, routes, stop })
    }

    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }
}

async fn route(routes: Routes, req: Request<Incoming>) -> Response<ProxyBody> {
    let host = host_of(&req);
    match host.as_deref().and_then(|h| routes.get(h)) {
        Some(svc) => handle(svc, req).await,
        None => {
            let detail = match host {
                Some(h) => format!("no route for host {h:?}"),
                None => "the request names no host".to_string(),
            };
            local::response(LocalError::new(Reason::NoRoute, detail))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::host_of;

    #[test]
    fn hosts() {
        let r = |uri: &str, host: Option<&str>| {
            let mut b = http::Request::builder().uri(uri);
            if let Some(h) = host {
                b = b.header("host", h);
            }
            host_of(&b.body(()).unwrap())
        };
        assert_eq!(
            r("/", Some("Shop.Example:8080")),
            Some("shop.example".into())
        );
        assert_eq!(r("/", Some("shop.example.")), Some("shop.example".into()));
        assert_eq!(r("http://a.b/x", Some("c.d")), Some("a.b".into()));
        assert_eq!(r("/", None), None);
    }
}
