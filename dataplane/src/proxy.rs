//! The running proxy: its listeners, and configuration changes applied without dropping
//! a connection (same listener: endpoints updated in place; new: bound; gone: stops
//! accepting while its connections finish).

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Mutex;

use prometheus_client::registry::Registry;

use crate::config::{ConfigError, IngressRoute, ProxyConfig, ServiceConfig, validate_services};
use crate::ingress::{Ingress, Table};
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
    /// Cluster mode's reconciles (`sluice_proxy_cluster_mode_reconciles_total{outcome}`,
    /// ...): how often the cluster's changes were applied, and how long that took.
    pub cluster_mode: sluice_kube::controller::ControllerMetrics,
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
        let cluster_mode = sluice_kube::controller::ControllerMetrics::default();
        cluster_mode.register(registry.sub_registry_with_prefix("cluster_mode"));
        Self {
            metrics,
            tunnels,
            cluster_mode,
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
        let matched = ListenerIndex::new(&running).find_all(&config.services);
        let fresh = self.bind_fresh(&config.services, &matched)?;
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
            self.update(&mut r, sc, peers_replaced);
            next.push(r);
        }
        for gone in old.into_iter().flatten() {
            self.retire(gone);
        }
        *running = next;
        // The gateway admits only local endpoints of exported services.
        self.tunnels
            .allow
            .set(config.services.iter().flat_map(admitted));
        self.apply_ingress(config, &running)?;
        self.metrics.reloads.inc();
        Ok(())
    }

    /// Change some listeners only, leaving tunnels, ingress and every other listener as
    /// they are: `upsert` adds or replaces listeners (matched as [`Proxy::apply`] matches
    /// them), `remove` stops the listeners configured on those addresses. Cluster mode
    /// calls this for each endpoint change, so its cost follows the change, not the
    /// thousands of services around it. Nothing changes if an upsert is invalid or fails
    /// to bind.
    pub fn apply_services(
        &self,
        upsert: &[ServiceConfig],
        remove: &[SocketAddr],
    ) -> Result<(), ApplyError> {
        validate_services(upsert, |peer| self.tunnels.peer(peer).is_some())?;
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let index = ListenerIndex::new(&running);
        let matched = index.find_all(upsert);
        let mut gone: HashSet<usize> = remove.iter().filter_map(|l| index.find_listen(l)).collect();
        drop(index);
        let fresh = self.bind_fresh(upsert, &matched)?;
        let mut denied = Vec::new();
        let mut admitted_now = Vec::new();
        let mut added = Vec::new();
        for ((sc, m), fresh) in upsert.iter().zip(&matched).zip(fresh) {
            admitted_now.extend(admitted(sc));
            match (fresh, m) {
                (Some(r), _) => added.push(r),
                (None, Some(i)) => {
                    gone.remove(i);
                    let r = &mut running[*i];
                    denied.extend(admitted(&r.config));
                    self.update(r, sc, false);
                }
                (None, None) => {}
            }
        }
        if !gone.is_empty() {
            for (i, r) in std::mem::take(&mut *running).into_iter().enumerate() {
                if gone.contains(&i) {
                    denied.extend(admitted(&r.config));
                    self.retire(r);
                } else {
                    running.push(r);
                }
            }
        }
        running.extend(added);
        self.tunnels.allow.adjust(denied, admitted_now);
        self.metrics.reloads.inc();
        Ok(())
    }

    /// Bind the listeners `matched` has no running listener for, before anything changes:
    /// a bind error leaves the running set untouched.
    fn bind_fresh(
        &self,
        services: &[ServiceConfig],
        matched: &[Option<usize>],
    ) -> Result<Vec<Option<Running>>, ApplyError> {
        let mut fresh = Vec::with_capacity(services.len());
        for (sc, m) in services.iter().zip(matched) {
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
        Ok(fresh)
    }

    /// Give a running listener its new configuration: endpoints updated in place, or a
    /// new service for new connections if its identity or protocol changed.
    fn update(&self, r: &mut Running, sc: &ServiceConfig, peers_replaced: bool) {
        if r.config == *sc && !peers_replaced {
            return;
        }
        let current = r.service();
        if current.name == sc.name && current.protocol == sc.protocol {
            current.update(sc, &self.tunnels);
        } else {
            let mut w = r.svc.write().unwrap_or_else(|p| p.into_inner());
            *w = std::sync::Arc::new(Service::new(sc, self.metrics.clone(), &self.tunnels));
        }
        r.config = sc.clone();
    }

    /// Stop accepting; open connections finish on their own.
    fn retire(&self, gone: Running) {
        tracing::info!(service = %gone.config.name, addr = %gone.addr, "listener removed");
        gone.stop();
        gone.service().balancer.update(&[], &self.tunnels);
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
        if let Some(i) = ingress.as_ref() {
            i.routes.set(route_table(&ic.routes, running));
        }
        Ok(())
    }

    /// Replace the ingress's routes (cluster mode: from Ingress objects), leaving its
    /// listener as it is; routes naming a service that has no listener are left out.
    /// False when no ingress runs.
    pub fn set_ingress_routes(&self, routes: &[IngressRoute]) -> bool {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let ingress = self.ingress.lock().unwrap_or_else(|p| p.into_inner());
        match ingress.as_ref() {
            Some(i) => {
                i.routes.set(route_table(routes, &running));
                true
            }
            None => false,
        }
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

    /// For each running listener named in `only`, what `per_cluster` says of its balancer,
    /// as (listener, source cluster, value).
    fn by_listener_and_cluster<T>(
        &self,
        only: &dyn Fn(&str) -> bool,
        per_cluster: impl Fn(&crate::balance::Balancer) -> Vec<(String, T)>,
    ) -> Vec<(String, String, T)> {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        for r in running.iter().filter(|r| only(&r.config.name)) {
            let svc = r.service();
            for (cluster, v) in per_cluster(&svc.balancer) {
                out.push((svc.name.clone(), cluster, v));
            }
        }
        out
    }

    /// In-flight requests and open connections per service and source cluster.
    pub fn active(&self) -> Vec<(String, String, u64)> {
        self.by_listener_and_cluster(&|_| true, |b| b.active_by_cluster())
    }

    /// Per service, live traffic to each source cluster that drains there as a whole
    /// ([`crate::balance::Balancer::draining_by_cluster`]).
    pub fn draining_active(&self) -> Vec<(String, String, u64)> {
        self.by_listener_and_cluster(&|_| true, |b| b.draining_by_cluster())
    }

    /// Per listener named in `only`, attempts, errors and latencies so far per source
    /// cluster.
    pub fn tallies(
        &self,
        only: &dyn Fn(&str) -> bool,
    ) -> Vec<(String, String, crate::balance::outcomes::Tally)> {
        self.by_listener_and_cluster(only, |b| b.tally_by_cluster())
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

/// The gateway admits a service's local endpoints if the service is exported.
/// The ingress's table: each route bound to the running listener of its service.
fn route_table(routes: &[IngressRoute], running: &[Running]) -> Table {
    let by_name: HashMap<&str, &Running> = running
        .iter()
        .map(|run| (run.config.name.as_str(), run))
        .collect();
    let mut table = Table::default();
    for r in routes {
        if let Some(run) = by_name.get(r.service.as_str()) {
            table.add(&r.host, r.path.as_deref(), r.path_type, run.svc.clone());
        }
    }
    table
}

fn admitted(sc: &ServiceConfig) -> impl Iterator<Item = SocketAddr> + '_ {
    sc.endpoints
        .iter()
        .filter(move |e| sc.exported && e.via.is_none())
        .map(|e| e.address)
}

/// Which running listener a configured service means (see `Running::serves`), found
/// through indexes: a cluster's configuration has thousands of services.
struct ListenerIndex<'a> {
    by_addr: HashMap<SocketAddr, usize>,
    by_config: HashMap<(SocketAddr, &'a str), usize>,
    by_listen: HashMap<SocketAddr, usize>,
}

impl<'a> ListenerIndex<'a> {
    fn new(running: &'a [Running]) -> Self {
        let mut index = Self {
            by_addr: HashMap::with_capacity(running.len()),
            by_config: HashMap::with_capacity(running.len()),
            by_listen: HashMap::with_capacity(running.len()),
        };
        for (i, r) in running.iter().enumerate() {
            index.by_addr.insert(r.addr, i);
            index
                .by_config
                .insert((r.config.listen, r.config.name.as_str()), i);
            if r.config.listen.port() != 0 {
                index.by_listen.insert(r.config.listen, i);
            }
        }
        index
    }

    fn find(&self, sc: &ServiceConfig) -> Option<usize> {
        self.by_addr
            .get(&sc.listen)
            .or_else(|| match sc.listen.port() {
                0 => self.by_config.get(&(sc.listen, sc.name.as_str())),
                _ => self.by_listen.get(&sc.listen),
            })
            .copied()
    }

    fn find_all(&self, services: &[ServiceConfig]) -> Vec<Option<usize>> {
        services.iter().map(|sc| self.find(sc)).collect()
    }

    /// The listener configured on, or bound to, `listen`.
    fn find_listen(&self, listen: &SocketAddr) -> Option<usize> {
        self.by_listen
            .get(listen)
            .or_else(|| self.by_addr.get(listen))
            .copied()
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
