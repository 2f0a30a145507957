//! Cluster mode: `sluice proxy --kubeconfig K --cluster NAME` fills the configuration
//! from its cluster's Services, EndpointSlices and ServiceImports, and its peers from the
//! control plane's `Cluster` objects, through informers; every change rebuilds the
//! configuration ([`build`]) and applies it live. It also renews the cluster's lease, the
//! signal the MCS controller uses to keep this cluster's endpoints in every import.

pub mod build;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher;
use kube::{Api, Client};
use sluice_api::mcs::ServiceImport;
use sluice_api::sluice::Cluster;
use sluice_mcs::informer::Informer;
use sluice_mcs::lease::{LEASE_NAMESPACE, renew_forever};
use tokio::sync::{Notify, watch};

use crate::config::{PeerConfig, TunnelConfig, TunnelTransport};
use crate::proxy::Proxy;

pub struct ClusterMode {
    /// This cluster's name, which is also its MCS cluster id and its SPIFFE cluster.
    pub cluster: String,
    pub client: Client,
    /// The control plane (logical cluster `root`): other clusters' gateways.
    pub control: Option<Client>,
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

impl ClusterMode {
    /// Keep `proxy` configured from the cluster until `stop` turns true.
    pub async fn run(self, proxy: Arc<Proxy>, mut stop: watch::Receiver<bool>) {
        let changed = Arc::new(Notify::new());
        let all = watcher::Config::default;
        let services: Informer<Service> = Informer::start(
            Api::all(self.client.clone()),
            all(),
            changed.clone(),
            "services",
        );
        let slices: Informer<EndpointSlice> = Informer::start(
            Api::all(self.client.clone()),
            all(),
            changed.clone(),
            "endpointslices",
        );
        let imports: Informer<ServiceImport> = Informer::start(
            Api::all(self.client.clone()),
            all(),
            changed.clone(),
            "serviceimports",
        );
        let clusters: Option<Informer<Cluster>> = self
            .control
            .as_ref()
            .map(|c| Informer::start(Api::all(c.clone()), all(), changed.clone(), "clusters"));
        let lease = tokio::spawn(renew_forever(
            Api::namespaced(self.client.clone(), LEASE_NAMESPACE),
            self.cluster.clone(),
        ));
        let mut last: Option<crate::config::ProxyConfig> = None;
        loop {
            tokio::select! {
                _ = stop.changed() => break,
                _ = changed.notified() => {}
            }
            let synced = services.is_ready()
                && slices.is_ready()
                && imports.is_ready()
                && clusters.as_ref().is_none_or(|c| c.is_ready());
            if !synced {
                continue;
            }
            let started = Instant::now();
            let peers = clusters
                .as_ref()
                .map(|c| peers(&c.state(), &self.cluster, self.transport))
                .unwrap_or_default();
            let config = build::build(build::Inputs {
                cluster: &self.cluster,
                services: &services.state(),
                slices: &slices.state(),
                imports: &imports.state(),
                tunnel: self.tunnel.clone(),
                peers,
            });
            if last.as_ref() == Some(&config) {
                continue;
            }
            match proxy.apply(&config) {
                Ok(()) => {
                    tracing::debug!(
                        services = config.services.len(),
                        took_us = started.elapsed().as_micros() as u64,
                        "cluster configuration applied"
                    );
                    proxy.set_synced();
                    last = Some(config);
                }
                Err(e) => tracing::warn!(error = %e, "cluster configuration rejected"),
            }
        }
        lease.abort();
    }
}
