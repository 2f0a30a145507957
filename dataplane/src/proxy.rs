//! The running proxy: its listeners, and configuration changes applied without dropping
//! a connection (same listener: endpoints updated in place; new: bound; gone: stops
//! accepting while its connections finish).

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Mutex;

use prometheus_client::registry::Registry;

use crate::config::{ConfigError, ProxyConfig};
use crate::ingress::Ingress;
use crate::listener::{self, Running};
use crate::metrics::ProxyMetrics;
use crate::service::Service;
use crate::tunnel::{TunnelError, Tunnels};

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(transparent)]
    Invalid(#[from] ConfigError),
    #[error("service {0}: binding {1}: {2}")]
    Bind(String, SocketAddr, std::io::Error),
    #[error("tunnels: {0}")]
    Tunnel(#[from] TunnelError),
    #[error("ingress: binding {0}: {1}")]
    Ingress(SocketAddr, std::io::Error),
}

pub struct Proxy {
    pub metrics: ProxyMetrics,
    pub tunnels: Tunnels,
    registry: Registry,
    running: Mutex<Vec<Running>>,
    ingress: Mutex<Option<Ingress>>,
    /// False in cluster mode until the first configuration from the cluster is applied.
    synced: std::sync::atomic::AtomicBool,
}

impl Default for Proxy {
    fn default() -> Self {
        let metrics = ProxyMetrics::default();
        let tunnels = Tunnels::default();
        let mut registry = Registry::with_prefix("sluice_proxy");
        metrics.register(&mut registry);
        tunnels.metrics.register(&mut registry);
        Self {
            metrics,
            tunnels,
            registry,
            running: Mutex::new(Vec::new()),
            ingress: Mutex::new(None),
            synced: std::sync::atomic::AtomicBool::new(true),
        }
    }
}

impl Proxy {
    /// Make `config` the running configuration. An invalid configuration changes nothing;
    /// tunnels are applied first (services resolve their peers), so a listener that then
    /// fails to bind leaves the new tunnels in place with the old services.
    pub fn apply(&self, config: &ProxyConfig) -> Result<(), ApplyError> {
        config.validate()?;
        let peers_replaced = self.tunnels.apply(config.tunnel.as_ref())?;
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        // Which running listener each configured service means (see `Running::serves`),
        // found through indexes: a cluster's configuration has thousands of services.
        let by_addr: HashMap<SocketAddr, usize> = running
            .iter()
            .enumerate()
            .map(|(i, r)| (r.addr, i))
            .collect();
        let by_config: HashMap<(SocketAddr, &str), usize> = running
            .iter()
            .enumerate()
            .map(|(i, r)| ((r.config.listen, r.config.name.as_str()), i))
            .collect();
        let by_listen: HashMap<SocketAddr, usize> = running
            .iter()
            .enumerate()
            .filter(|(_, r)| r.config.listen.port() != 0)
            .map(|(i, r)| (r.config.listen, i))
            .collect();
        let matched: Vec<Option<usize>> = config
            .services
            .iter()
            .map(|sc| {
                by_addr
                    .get(&sc.listen)
                    .or_else(|| match sc.listen.port() {
                        0 => by_config.get(&(sc.listen, sc.name.as_str())),
                        _ => by_listen.get(&sc.listen),
                    })
                    .copied()
            })
            .collect();
        drop((by_addr, by_config, by_listen));
        // Bind new listeners first: a bind error leaves the running set untouched.
        let mut fresh: Vec<Option<Running>> = Vec::with_capacity(config.services.len());
        for (sc, m) in config.services.iter().zip(&matched) {
            fresh.push(match m {
                Some(_) => None,
                None => {
                    let svc = Service::new(sc, self.metrics.clone(), &self.tunnels);
                    let r = listener::start(sc, svc)
                        .map_err(|e| ApplyError::Bind(sc.name.clone(), sc.listen, e))?;
                    Some(r)
                }
            });
        }
        let mut old: Vec<Option<Running>> = running.drain(..).map(Some).collect();
        let mut next = Vec::with_capacity(config.services.len());
        for ((sc, m), fresh) in config.services.iter().zip(&matched).zip(fresh) {
            if let Some(r) = fresh {
                next.push(r);
                continue;
            }
            let Some(mut r) = m.and_then(|i| old[i].take()) else {
                continue;
            };
            if r.config == *sc && !peers_replaced {
                next.push(r);
                continue;
            }
            let current = r.service();
            if current.name == sc.name && current.protocol == sc.protocol {
                current.update(sc, &self.tunnels);
            } else {
                // A new identity or protocol: new connections get a new service.
                let mut w = r.svc.write().unwrap_or_else(|p| p.into_inner());
                *w = std::sync::Arc::new(Service::new(sc, self.metrics.clone(), &self.tunnels));
            }
            r.config = sc.clone();
            next.push(r);
        }
        for gone in old.into_iter().flatten() {
            tracing::info!(service = %gone.config.name, addr = %gone.addr, "listener removed");
            gone.stop();
            gone.service().balancer.update(&[], &self.tunnels);
        }
        *running = next;
        // The gateway admits only local endpoints of exported services.
        let exported: HashSet<SocketAddr> = config
            .services
            .iter()
            .filter(|s| s.exported)
            .flat_map(|s| s.endpoints.iter().filter(|e| e.via.is_none()))
            .map(|e| e.address)
            .collect();
        self.tunnels.allow.set(exported);
        self.apply_ingress(config, &running)?;
        self.metrics.reloads.inc();
        Ok(())
    }

    fn apply_ingress(&self, config: &ProxyConfig, running: &[Running]) -> Result<(), ApplyError> {
        let mut ingress = self.ingress.lock().unwrap_or_else(|p| p.into_inner());
        let Some(ic) = &config.ingress else {
            if let Some(old) = ingress.take() {
                old.stop();
            }
            return Ok(());
        };
        let rebind = ingress
            .as_ref()
            .is_none_or(|i| i.addr != ic.listen && ic.listen.port() != 0);
        if rebind {
            let fresh = Ingress::start(ic.listen).map_err(|e| ApplyError::Ingress(ic.listen, e))?;
            if let Some(old) = ingress.replace(fresh) {
                old.stop();
            }
        }
        let mut routes = HashMap::new();
        for r in &ic.routes {
            if let Some(run) = running.iter().find(|run| run.config.name == r.service) {
                let host = r.host.trim_end_matches('.').to_ascii_lowercase();
                routes.insert(host, run.svc.clone());
            }
        }
        if let Some(i) = ingress.as_ref() {
            i.routes.set(routes);
        }
        Ok(())
    }

    /// `/readyz` fails until [`Proxy::set_synced`] (cluster mode's first configuration).
    pub fn set_unsynced(&self) {
        self.synced
            .store(false, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn set_synced(&self) {
        self.synced
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Where the ingress listens, once bound.
    pub fn ingress_addr(&self) -> Option<SocketAddr> {
        let ingress = self.ingress.lock().unwrap_or_else(|p| p.into_inner());
        ingress.as_ref().map(|i| i.addr)
    }

    /// Where each service listens (port 0 in the configuration resolved).
    pub fn addresses(&self) -> Vec<(String, SocketAddr)> {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running
            .iter()
            .map(|r| (r.config.name.clone(), r.addr))
            .collect()
    }

    pub fn addr_of(&self, service: &str) -> Option<SocketAddr> {
        self.addresses()
            .into_iter()
            .find(|(n, _)| n == service)
            .map(|(_, a)| a)
    }

    /// In-flight requests and open connections per service and source cluster.
    pub fn active(&self) -> Vec<(String, String, u64)> {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        for r in running.iter() {
            let svc = r.service();
            for (cluster, n) in svc.balancer.active_by_cluster() {
                out.push((svc.name.clone(), cluster, n));
            }
        }
        out
    }

    /// The running configuration and live state, as `/config_dump` shows it.
    pub fn dump(&self) -> serde_json::Value {
        self.dump_services(None)
    }

    /// The dump, with only the service called `only` if given.
    pub fn dump_services(&self, only: Option<&str>) -> serde_json::Value {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let services: Vec<serde_json::Value> = running
            .iter()
            .filter(|r| only.is_none_or(|n| r.config.name == n))
            .map(|r| {
                let svc = r.service();
                let endpoints: Vec<serde_json::Value> = svc
                    .balancer
                    .endpoints()
                    .iter()
                    .map(|e| {
                        serde_json::json!({
                            "address": e.address, "cluster": e.cluster, "weight": e.weight(),
                            "draining": e.draining(), "active": e.active(),
                            "via": e.via.as_ref().map(|p| p.cluster.clone()),
                        })
                    })
                    .collect();
                serde_json::json!({
                    "name": r.config.name, "listen": r.addr, "protocol": r.config.protocol,
                    "timeouts": r.config.timeouts, "endpoints": endpoints,
                })
            })
            .collect();
        serde_json::json!({
            "services": services,
            "tunnels": self.tunnels.dump(),
            "ingress": self.ingress_addr(),
        })
    }
}

impl sluice_observe::AdminSource for Proxy {
    fn registry(&self) -> &Registry {
        &self.registry
    }

    fn ready(&self) -> bool {
        self.synced.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `/config_dump`, or `/config_dump?service=NAME` for one service's entry.
    fn page(&self, path: &str) -> Option<(&'static str, String)> {
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        if path != "/config_dump" {
            return None;
        }
        let only = form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == "service")
            .map(|(_, v)| v.into_owned());
        let dump = self.dump_services(only.as_deref());
        let body = serde_json::to_string_pretty(&dump).unwrap_or_default();
        Some(("application/json", body))
    }
}
