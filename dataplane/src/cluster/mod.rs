//! Cluster mode: `sluice proxy --kubeconfig K --cluster NAME` fills the configuration
//! from its cluster's Services, EndpointSlices and ServiceImports, and its peers from the
//! control plane's `Cluster` objects, through informers. It keeps the listeners of each
//! service (a Service, its ServiceImport and their slices share a key) and rebuilds only
//! the services whose objects changed ([`build`]); a change of peers rebuilds all. The
//! result is applied live, and the proxy touches only listeners whose configuration
//! changed. It also renews the cluster's lease, the signal the MCS controller uses to keep
//! this cluster's endpoints in every import, and reports its live traffic to draining
//! clusters on their namespaces ([`traffic`]), what a move waits for. With an ingress
//! listener it serves the `Ingress` objects of its cluster and of every logical cluster
//! (through the control plane's wildcard), each backend through its Service's clusterset
//! VIP, so any cluster's ingress reaches an app wherever it runs.

pub mod build;
pub mod traffic;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use kube::runtime::watcher;
use kube::{Api, Client};
use sluice_api::ServiceKey;
use sluice_api::liveness::{LEASE_NAME, LEASE_NAMESPACE, LEASE_TTL, RENEW_EVERY};
use sluice_api::mcs::ServiceImport;
use sluice_api::mcs::slice_service;
use sluice_api::sluice::Cluster;
use sluice_api::sync::{ANNOTATION_LOGICAL_CLUSTER, LABEL_SYNCED, downstream_namespace_of};
use sluice_kube::Informer;
use sluice_kube::controller::{Action, Backoff, BatchController, BatchReconciler};
use sluice_kube::lease::{LeaseHolder, renew_forever};

type Changes = sluice_kube::Changes<ServiceKey>;
type Scope = sluice_kube::Scope<ServiceKey>;
type ServiceIndex<K> = sluice_kube::Index<K, ServiceKey>;
use tokio::sync::watch;

use crate::config::{
    IngressConfig, IngressRoute, PeerConfig, ServiceConfig, TunnelConfig, TunnelTransport,
};
use crate::proxy::Proxy;

pub struct ClusterMode {
    /// This cluster's name, which is also its MCS cluster id and its SPIFFE cluster.
    pub cluster: String,
    pub client: Client,
    /// The control plane (logical cluster `root`): other clusters' gateways.
    pub control: Option<Client>,
    /// The control plane's wildcard (`/clusters/*`): every logical cluster's Ingresses.
    pub upstream: Option<Client>,
    /// Where the ingress listens (the proxy was started with it); `None`: no ingress.
    pub ingress: Option<SocketAddr>,
    /// Identity, trust bundle and this cluster's gateway address.
    pub tunnel: Option<TunnelConfig>,
    pub transport: TunnelTransport,
}

/// Peers from `Cluster` objects: every other cluster that lists a gateway.
fn peers(clusters: &[Arc<Cluster>], me: &str, transport: TunnelTransport) -> Vec<PeerConfig> {
    let mut out: Vec<PeerConfig> = clusters
        .iter()
        .filter_map(|c| {
            let name = c.metadata.name.clone()?;
            let spec = c.spec.as_ref()?;
            let id = spec.cluster_id.clone().unwrap_or(name);
            let address: SocketAddr = spec.gateways.first()?.parse().ok()?;
            (id != me).then_some(PeerConfig {
                cluster: id,
                address,
                transport,
            })
        })
        .collect();
    out.sort_by(|a, b| a.cluster.cmp(&b.cluster));
    out
}

/// The Ingresses to serve, each with the namespace here its backends live in: this
/// cluster's own (not the syncer's copies, which `upstream` has at their source) and every
/// logical cluster's, in the downstream namespace of its namespace.
fn ingresses(
    local: &[Arc<Ingress>],
    upstream: Option<&[Arc<Ingress>]>,
) -> Vec<(String, Arc<Ingress>)> {
    let mut out = Vec::new();
    for ing in local {
        let synced = ing
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(LABEL_SYNCED));
        if synced && upstream.is_some() {
            continue;
        }
        if let Some(ns) = &ing.metadata.namespace {
            out.push((ns.clone(), ing.clone()));
        }
    }
    for ing in upstream.into_iter().flatten() {
        let path = ing
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_LOGICAL_CLUSTER))
            .and_then(|p| p.parse::<sluice_api::LogicalClusterPath>().ok());
        // Its namespace here is the one the control plane stamped on it (an Ingress written
        // before stamps lives under its namespace's legacy name).
        if let (Some(path), Some(ns)) = (path, &ing.metadata.namespace) {
            let down = downstream_namespace_of(ing.metadata.annotations.as_ref(), &path, ns);
            out.push((down, ing.clone()));
        }
    }
    // Two Ingresses claiming one host and path: the older wins, as Kubernetes' controllers
    // settle it (the route table keeps the first), whatever order the stores list them in.
    out.sort_by(|(a_ns, a), (b_ns, b)| {
        let key = |ns: &String, i: &Ingress| {
            (
                i.metadata.creation_timestamp.as_ref().map(|t| t.0),
                ns.clone(),
                i.metadata.name.clone(),
            )
        };
        key(a_ns, a).cmp(&key(b_ns, b))
    });
    out
}

/// The listeners one round changes, when it can be applied without the rest.
#[derive(Default)]
struct Delta {
    upsert: Vec<ServiceConfig>,
    remove: Vec<SocketAddr>,
}

impl Delta {
    /// Add service `key`'s change from `old` to `new` listeners. False if another service
    /// owns one of the addresses involved: who wins there is decided over the whole
    /// configuration, so the round must be applied whole.
    fn add(
        &mut self,
        key: &ServiceKey,
        old: &[ServiceConfig],
        new: &[ServiceConfig],
        owners: &mut HashMap<SocketAddr, ServiceKey>,
    ) -> bool {
        let contested = old
            .iter()
            .chain(new)
            .any(|c| owners.get(&c.listen).is_some_and(|o| o != key));
        if contested {
            return false;
        }
        for c in old {
            if !new.iter().any(|n| n.listen == c.listen) {
                owners.remove(&c.listen);
                self.remove.push(c.listen);
            }
        }
        for c in new {
            owners.insert(c.listen, key.clone());
            if old.iter().all(|o| o != c) {
                self.upsert.push(c.clone());
            }
        }
        true
    }
}

/// The cluster mode's reconciler: its informers, what it built, and the proxy it keeps.
struct Configuring {
    mode: ClusterMode,
    proxy: Arc<Proxy>,
    changes: Arc<Changes>,
    services: Informer<Service>,
    slices: Informer<EndpointSlice>,
    slices_by_service: Arc<ServiceIndex<EndpointSlice>>,
    imports: Informer<ServiceImport>,
    clusters: Option<Informer<Cluster>>,
    local_ingresses: Option<Informer<Ingress>>,
    upstream_ingresses: Option<Informer<Ingress>>,
    /// An Ingress changed: the routes are made again.
    ingress_dirty: Arc<AtomicBool>,
    routes: Vec<IngressRoute>,
    listeners: traffic::Listeners,
    /// Each service's listeners, and the peers they were built with.
    built: BTreeMap<ServiceKey, Vec<ServiceConfig>>,
    peers: Vec<PeerConfig>,
    /// Which service owns each listen address (the first, as `build::assemble` keeps).
    owners: HashMap<SocketAddr, ServiceKey>,
    /// The next configuration is applied whole (the first: it also brings up the tunnels).
    whole_next: bool,
}

/// Retries after the proxy rejected a configuration (a listen address taken, say).
const BACKOFF: Backoff = Backoff {
    first: std::time::Duration::from_millis(250),
    max: std::time::Duration::from_secs(10),
};

impl ClusterMode {
    /// Keep `proxy` configured from the cluster until `stop` turns true.
    pub async fn run(self, proxy: Arc<Proxy>, stop: watch::Receiver<bool>) {
        let changes = Arc::new(Changes::default());
        let all = watcher::Config::default;
        let services: Informer<Service> = Informer::start_with(
            Api::all(self.client.clone()),
            all(),
            "services",
            changes.recorder(|o: &Service| ServiceKey::from_meta(&o.metadata)),
        );
        let (slices, slices_by_service) = ServiceIndex::start(
            Api::<EndpointSlice>::all(self.client.clone()),
            "endpointslices",
            slice_service,
            &changes,
        );
        let imports: Informer<ServiceImport> = Informer::start_with(
            Api::all(self.client.clone()),
            all(),
            "serviceimports",
            changes.recorder(|o: &ServiceImport| ServiceKey::from_meta(&o.metadata)),
        );
        // Peers change every service's endpoints through other clusters.
        let clusters: Option<Informer<Cluster>> = self.control.as_ref().map(|c| {
            Informer::start_with(Api::all(c.clone()), all(), "clusters", changes.widener())
        });
        // Ingresses change only the ingress's routes: a flag, and a wake-up.
        let ingress_dirty = Arc::new(AtomicBool::new(true));
        let ingress_changed = || {
            let (dirty, changes) = (ingress_dirty.clone(), changes.clone());
            move |_: &watcher::Event<Ingress>| {
                dirty.store(true, Ordering::Relaxed);
                changes.wake();
            }
        };
        let local_ingresses: Option<Informer<Ingress>> = self.ingress.map(|_| {
            Informer::start_with(
                Api::all(self.client.clone()),
                all(),
                "ingresses",
                ingress_changed(),
            )
        });
        // Every logical cluster has its `default/web`: told apart by their logical cluster.
        let upstream_ingresses: Option<Informer<Ingress>> =
            self.ingress.and(self.upstream.as_ref()).map(|c| {
                Informer::start_across(
                    Api::all(c.clone()),
                    all(),
                    "logical clusters' ingresses",
                    ANNOTATION_LOGICAL_CLUSTER,
                    ingress_changed(),
                )
            });
        let lease = tokio::spawn(renew_forever(
            Api::namespaced(self.client.clone(), LEASE_NAMESPACE),
            LEASE_NAMESPACE.to_string(),
            LeaseHolder {
                name: LEASE_NAME.to_string(),
                holder: self.cluster.clone(),
                ttl: LEASE_TTL,
                renew_every: RENEW_EVERY,
            },
        ));
        let listeners = traffic::Listeners::default();
        let report = tokio::spawn(traffic::report_forever(
            self.client.clone(),
            proxy.clone(),
            listeners.clone(),
            stop.clone(),
        ));
        let metrics = proxy.cluster_mode.clone();
        let mut configuring = Configuring {
            mode: self,
            proxy,
            changes: changes.clone(),
            services,
            slices,
            slices_by_service,
            imports,
            clusters,
            local_ingresses,
            upstream_ingresses,
            ingress_dirty,
            routes: Vec::new(),
            listeners,
            built: BTreeMap::new(),
            peers: Vec::new(),
            owners: HashMap::new(),
            whole_next: true,
        };
        let _ = BatchController::new("cluster mode", changes, metrics)
            .with_backoff(BACKOFF)
            .run(&mut configuring, stop)
            .await;
        lease.abort();
        let _ = report.await;
    }
}

impl BatchReconciler for Configuring {
    type Key = ServiceKey;
    type Error = crate::proxy::ApplyError;

    async fn reconcile(&mut self, scope: &Scope) -> Result<Action, Self::Error> {
        let synced = self.services.is_ready()
            && self.slices.is_ready()
            && self.imports.is_ready()
            && self.clusters.as_ref().is_none_or(|c| c.is_ready())
            && self.local_ingresses.as_ref().is_none_or(|c| c.is_ready())
            && self
                .upstream_ingresses
                .as_ref()
                .is_none_or(|c| c.is_ready());
        if !synced {
            // Each informer's first list wakes the controller again.
            self.changes.restore(scope.clone());
            return Ok(Action::AwaitChange);
        }
        // Routes name listeners: new Ingresses, and listeners that came or went.
        let reroute = self.mode.ingress.is_some()
            && (self.ingress_dirty.swap(false, Ordering::Relaxed) || !scope.is_empty());
        if scope.is_empty() {
            if reroute {
                self.routes = self.routes();
                self.proxy.set_ingress_routes(&self.routes);
            }
            return Ok(Action::AwaitChange);
        }
        let started = Instant::now();
        let cluster = self.mode.cluster.as_str();
        if scope.is_all() {
            self.peers = self
                .clusters
                .as_ref()
                .map(|c| self::peers(&c.state(), cluster, self.mode.transport))
                .unwrap_or_default();
            self.built.clear();
            self.listeners.clear();
        }
        let all_objects;
        let mut scoped = Vec::new();
        let objects: BTreeMap<ServiceKey, build::ServiceObjects<'_>> = match scope {
            Scope::All => {
                all_objects = (
                    self.services.state(),
                    self.slices.state(),
                    self.imports.state(),
                );
                build::group(&all_objects.0, &all_objects.1, &all_objects.2)
            }
            Scope::Keys(keys) => {
                for k in keys {
                    scoped.push((
                        k.clone(),
                        self.services.get(&k.namespace, &k.name),
                        self.imports.get(&k.namespace, &k.name),
                        self.slices_by_service.objects(&self.slices.store, k),
                    ));
                }
                scoped
                    .iter()
                    .map(|(k, svc, imp, sl)| {
                        let mut o = build::ServiceObjects {
                            service: svc.as_deref(),
                            import: imp.as_deref(),
                            ..Default::default()
                        };
                        for s in sl {
                            o.add_slice(s);
                        }
                        (k.clone(), o)
                    })
                    .collect()
            }
        };
        // Only the listeners this reconcile touched, unless it goes whole.
        let mut delta = (!scope.is_all() && !self.whole_next).then(Delta::default);
        for (key, o) in objects {
            let configs = build::service_configs(cluster, &self.peers, &o);
            let shifting = build::shifting(&o);
            let old = if configs.is_empty() {
                self.built.remove(&key)
            } else {
                self.built.insert(key.clone(), configs)
            };
            self.listeners.set(
                &key,
                old.iter().flatten().map(|c| c.name.as_str()),
                self.built
                    .get(&key)
                    .into_iter()
                    .flatten()
                    .map(|c| c.name.as_str()),
                shifting,
            );
            if let Some(d) = delta.as_mut()
                && !d.add(
                    &key,
                    old.as_deref().unwrap_or(&[]),
                    self.built.get(&key).map(Vec::as_slice).unwrap_or(&[]),
                    &mut self.owners,
                )
            {
                delta = None;
            }
        }
        if reroute {
            self.routes = self.routes();
        }
        let applied = match delta {
            Some(d) => self.proxy.apply_services(&d.upsert, &d.remove).map(|()| {
                if reroute {
                    self.proxy.set_ingress_routes(&self.routes);
                }
                d.upsert.len() + d.remove.len()
            }),
            None => {
                let mut config = build::assemble(
                    self.built.values().map(Vec::as_slice),
                    self.mode.tunnel.clone(),
                    &self.peers,
                );
                config.ingress = self.mode.ingress.map(|listen| IngressConfig {
                    listen,
                    routes: self.routes.clone(),
                });
                // While two services name one address, who wins is decided whole.
                (self.owners, self.whole_next) = build::owners(&self.built);
                self.proxy.apply(&config).map(|()| config.services.len())
            }
        };
        match applied {
            Ok(listeners) => {
                tracing::debug!(
                    listeners,
                    services = scope.len(),
                    took_us = started.elapsed().as_micros() as u64,
                    "cluster configuration applied"
                );
                self.proxy.set_synced();
                Ok(Action::AwaitChange)
            }
            Err(e) => {
                // The proxy does not run what `built` says: the retry goes whole.
                self.whole_next = true;
                tracing::warn!(error = %e, "cluster configuration rejected");
                Err(e)
            }
        }
    }
}

impl Configuring {
    /// The ingress's routes from the Ingresses the informers hold.
    fn routes(&self) -> Vec<IngressRoute> {
        let local = self
            .local_ingresses
            .as_ref()
            .map(|i| i.state())
            .unwrap_or_default();
        let upstream = self.upstream_ingresses.as_ref().map(|i| i.state());
        let all = ingresses(&local, upstream.as_deref());
        build::ingress_routes(
            all.iter().map(|(ns, i)| (ns.as_str(), i.as_ref())),
            &self.built,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(name: &str, listen: &str, endpoints: usize) -> ServiceConfig {
        let mut c: ServiceConfig =
            serde_json::from_value(serde_json::json!({"name": name, "listen": listen}))
                .expect("a valid service");
        c.endpoints = (0..endpoints)
            .map(|i| {
                serde_json::from_value(serde_json::json!({
                    "address": format!("127.9.0.{}:80", i + 1), "cluster": "east",
                }))
                .expect("a valid endpoint")
            })
            .collect();
        c
    }

    #[test]
    fn a_delta_carries_only_changed_listeners() {
        let key = ServiceKey::new("shop", "web");
        let mut owners = HashMap::new();
        let old = vec![
            config("web", "127.40.0.1:80", 1),
            config("web vip", "127.50.0.1:80", 1),
        ];
        owners.insert(old[0].listen, key.clone());
        owners.insert(old[1].listen, key.clone());
        let new = vec![config("web", "127.40.0.1:80", 2)];
        let mut d = Delta::default();
        assert!(d.add(&key, &old, &new, &mut owners));
        assert_eq!(d.upsert, new);
        assert_eq!(d.remove, vec![old[1].listen]);
        assert_eq!(owners.len(), 1);

        // Unchanged: nothing to do.
        let mut d = Delta::default();
        assert!(d.add(&key, &new, &new, &mut owners));
        assert!(d.upsert.is_empty() && d.remove.is_empty());
    }

    #[test]
    fn an_address_another_service_owns_needs_a_whole_apply() {
        let mut owners = HashMap::new();
        let theirs = config("api", "127.40.0.2:80", 1);
        owners.insert(theirs.listen, ServiceKey::new("shop", "api"));
        let mine = vec![config("web", "127.40.0.2:80", 1)];
        let mut d = Delta::default();
        assert!(!d.add(&ServiceKey::new("shop", "web"), &[], &mine, &mut owners));
        assert_eq!(owners[&theirs.listen], ServiceKey::new("shop", "api"));
    }
}
