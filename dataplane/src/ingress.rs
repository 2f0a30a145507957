//! North-south: one HTTP listener for clients outside the clusterset, routing each request
//! by its Host to a service. The service's balancer decides where it runs now, so an
//! external client follows a move exactly as an internal one does.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use http::header;
use http::{Request, Response};
use http_body_util::Either;
use hyper::body::Incoming;
use tokio::sync::watch;

use crate::accept::{bind, spawn_accept};
use crate::config::PathType;
use crate::http::forward::handle;
use crate::http::local::{self, LocalError, ProxyBody};
use crate::http::server::serve_http;
use crate::reason::Reason;
use crate::service::Service;

/// The live service behind a route (the listener's handle: it follows a service replaced
/// on reload).
pub type ServiceHandle = Arc<RwLock<Arc<Service>>>;

/// One path rule of a host, resolved to its service.
struct Rule {
    /// Without a trailing `/` (except the root itself) for prefixes.
    path: String,
    exact: bool,
    svc: ServiceHandle,
}

impl Rule {
    fn matches(&self, path: &str) -> bool {
        if self.exact {
            return path == self.path;
        }
        self.path == "/"
            || path
                .strip_prefix(self.path.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    }

    /// Exact paths first, then longer prefixes before shorter ones.
    fn rank(&self) -> (bool, std::cmp::Reverse<usize>) {
        (!self.exact, std::cmp::Reverse(self.path.len()))
    }
}

/// The routes of an ingress: by exact host, by wildcard host (`*.example.com`, keyed by
/// `example.com`), and for any host, each with its path rules in match order.
#[derive(Default)]
pub struct Table {
    hosts: HashMap<String, Vec<Rule>>,
    wildcards: HashMap<String, Vec<Rule>>,
    any: Vec<Rule>,
}

impl Table {
    /// Add a route; `host` as an Ingress rule gives it (empty: any host).
    pub fn add(&mut self, host: &str, path: Option<&str>, path_type: PathType, svc: ServiceHandle) {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let exact = path_type == PathType::Exact;
        let mut path = path.filter(|p| !p.is_empty()).unwrap_or("/").to_string();
        if !exact {
            while path.len() > 1 && path.ends_with('/') {
                path.pop();
            }
        }
        let rules = if host.is_empty() || host == "*" {
            &mut self.any
        } else if let Some(suffix) = host.strip_prefix("*.") {
            self.wildcards.entry(suffix.to_string()).or_default()
        } else {
            self.hosts.entry(host).or_default()
        };
        rules.push(Rule { path, exact, svc });
        rules.sort_by_key(Rule::rank);
    }

    /// The service for a request to `host` (lower case, no port) and `path`: the exact
    /// host's rules, then its wildcard's, then those for any host.
    fn find(&self, host: Option<&str>, path: &str) -> Option<&ServiceHandle> {
        let exact = host.and_then(|h| self.hosts.get(h));
        let wildcard = host
            .and_then(|h| h.split_once('.'))
            .and_then(|(_, suffix)| self.wildcards.get(suffix));
        [exact, wildcard, Some(&self.any)]
            .into_iter()
            .flatten()
            .find_map(|rules| rules.iter().find(|r| r.matches(path)))
            .map(|r| &r.svc)
    }

    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty() && self.wildcards.is_empty() && self.any.is_empty()
    }
}

#[derive(Clone, Default)]
pub struct Routes(Arc<RwLock<Arc<Table>>>);

impl Routes {
    pub fn set(&self, table: Table) {
        let mut w = self.0.write().unwrap_or_else(|p| p.into_inner());
        *w = Arc::new(table);
    }

    fn get(&self, host: Option<&str>, path: &str) -> Option<Arc<Service>> {
        let table = self
            .0
            .read()
            .map(|r| r.clone())
            .unwrap_or_else(|p| p.into_inner().clone());
        let handle = table.find(host, path)?;
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
    match routes.get(host.as_deref(), req.uri().path()) {
        Some(svc) => handle(svc, req.map(Either::Left)).await,
        None => {
            let path = req.uri().path();
            let detail = match host {
                Some(h) => format!("no route for host {h:?} and path {path:?}"),
                None => format!(
                    "the request names no host, and no route for any host has path {path:?}"
                ),
            };
            local::response(LocalError::new(Reason::NoRoute, detail))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ServiceConfig;
    use crate::metrics::ProxyMetrics;
    use crate::tunnel::Tunnels;

    fn svc(name: &str) -> ServiceHandle {
        let c = ServiceConfig {
            name: name.into(),
            listen: ([127, 0, 0, 1], 0).into(),
            protocol: Default::default(),
            endpoints: vec![],
            timeouts: Default::default(),
            retry_ratio: 0.2,
            exported: false,
            locality: Default::default(),
        };
        Arc::new(RwLock::new(Arc::new(Service::new(
            &c,
            ProxyMetrics::default(),
            &Tunnels::default(),
        ))))
    }

    #[test]
    fn routes_match_as_kubernetes_ingress_rules_do() {
        let mut t = Table::default();
        t.add("Shop.Example", None, PathType::Prefix, svc("root"));
        t.add("shop.example", Some("/api/"), PathType::Prefix, svc("api"));
        t.add("shop.example", Some("/api/v2"), PathType::Prefix, svc("v2"));
        t.add("shop.example", Some("/api"), PathType::Exact, svc("exact"));
        t.add("*.example", Some("/"), PathType::Prefix, svc("wild"));
        t.add("", Some("/health"), PathType::Exact, svc("any"));
        let at = |host: Option<&str>, path: &str| {
            t.find(host, path)
                .map(|h| h.read().unwrap().name.clone())
                .unwrap_or_default()
        };
        assert_eq!(at(Some("shop.example"), "/"), "root");
        assert_eq!(at(Some("shop.example"), "/api"), "exact");
        assert_eq!(at(Some("shop.example"), "/api/"), "api");
        assert_eq!(at(Some("shop.example"), "/api/cart"), "api");
        assert_eq!(at(Some("shop.example"), "/apix"), "root");
        assert_eq!(at(Some("shop.example"), "/api/v2/x"), "v2");
        assert_eq!(at(Some("shop.example"), "/api/v23"), "api");
        assert_eq!(at(Some("cart.example"), "/x"), "wild");
        assert_eq!(at(Some("a.cart.example"), "/health"), "any");
        assert_eq!(at(Some("example"), "/x"), "");
        assert_eq!(at(None, "/health"), "any");
        assert_eq!(at(None, "/"), "");
        assert!(!t.is_empty());
    }

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
