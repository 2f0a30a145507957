//! `sluice dns`: the clusterset DNS server.
//!
//! Serves `clusterset.local` per the MCS DNS specification 1.0.0 from ServiceImports and
//! MCS EndpointSlices, `cluster.local` from Services, EndpointSlices and Pods (local
//! clusters), and forwards everything else to an upstream with a cache. A pod that Sluice
//! placed (known by its source address) asking for an ordinary `cluster.local` name of its
//! own logical cluster gets the clusterset answer of that Service, wherever it runs. With
//! the control plane, the hosts of every logical cluster's Ingresses are answered with
//! the ingress addresses of the clusters that take clients. Built on
//! hickory-server: [`handler`] answers, [`answer`] computes records from [`model`], which
//! the [`informers`] keep current. Over UDP, [`responder`] answers a query it has seen
//! since the model last changed from [`memo`], writing the bytes with [`wire`].

pub mod answer;
pub mod forward;
pub mod handler;
pub mod informers;
pub mod memo;
pub mod metrics;
pub mod model;
pub mod responder;
pub mod state;
pub mod udp;
pub mod wire;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::rr::Name;
use hickory_server::server::Server;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use sluice_api::mcs::ServiceImport;
use sluice_api::sluice::Cluster;
use tokio::sync::{oneshot, watch};

use crate::answer::Zones;
use crate::forward::Forwarder;
use crate::handler::DnsHandler;
use crate::state::DnsState;

/// Default TTL of every answer: a few seconds, as in the MCS DNS specification's examples.
/// ClusterSetIP answers are VIPs that never change while the import lives, so a longer TTL
/// would gain little; headless answers change with endpoint readiness, and a short TTL
/// bounds how long a client keeps an endpoint that went away.
pub const DEFAULT_TTL: u32 = 5;

/// How long an idle TCP client may hold its connection.
const TCP_IDLE: Duration = Duration::from_secs(10);

pub struct Config {
    /// UDP and TCP on the same address; port 0 picks one.
    pub listen: SocketAddr,
    pub admin: SocketAddr,
    pub client: kube::Client,
    /// This cluster's MCS cluster id.
    pub cluster_id: String,
    pub zone: String,
    /// `Some("cluster.local")` also serves the local cluster's zone.
    pub cluster_zone: Option<String>,
    pub forward: Option<SocketAddr>,
    pub ttl: u32,
    /// The control plane: its `Cluster`s (root) and every logical cluster's Ingresses (the
    /// wildcard `/clusters/*`), so Ingress hosts are answered with the clusters' ingress
    /// addresses.
    pub control: Option<Control>,
}

/// Clients of the control plane.
pub struct Control {
    /// Logical cluster `root`, where `Cluster` objects live.
    pub root: kube::Client,
    /// `/clusters/*`: every logical cluster at once (list and watch).
    pub wildcard: kube::Client,
}

impl Config {
    pub fn new(client: kube::Client, cluster_id: &str) -> Self {
        Self {
            listen: ([127, 0, 0, 1], 0).into(),
            admin: ([127, 0, 0, 1], 0).into(),
            client,
            cluster_id: cluster_id.to_string(),
            zone: "clusterset.local".into(),
            cluster_zone: Some("cluster.local".into()),
            forward: None,
            ttl: DEFAULT_TTL,
            control: None,
        }
    }
}

/// A running server.
pub struct Bound {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub state: Arc<DnsState>,
    stop: Option<oneshot::Sender<()>>,
    _admin_stop: watch::Sender<bool>,
}

impl Bound {
    /// Stop serving (also happens on drop).
    pub fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Drop for Bound {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Why the DNS server could not start.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("zone {0:?} is not a DNS name: {1}")]
    Zone(String, String),
    #[error("binding {0} {1}: {2}")]
    Bind(&'static str, SocketAddr, std::io::Error),
    #[error("no port free for both UDP and TCP near {0}: {1}")]
    NoCommonPort(SocketAddr, std::io::Error),
}

fn zone_name(zone: &str) -> Result<Name, BuildError> {
    let name = Name::from_ascii(format!("{}.", zone.trim_end_matches('.')))
        .map_err(|e| BuildError::Zone(zone.to_string(), e.to_string()))?;
    Ok(name.to_lowercase())
}

/// Bind UDP then TCP on the same port (for port 0, retry until both are free).
async fn bind(
    listen: SocketAddr,
) -> Result<(tokio::net::UdpSocket, tokio::net::TcpListener), BuildError> {
    let mut last = None;
    for _ in 0..20 {
        let udp = tokio::net::UdpSocket::bind(listen)
            .await
            .map_err(|e| BuildError::Bind("udp", listen, e))?;
        let addr = udp
            .local_addr()
            .map_err(|e| BuildError::Bind("udp", listen, e))?;
        match tokio::net::TcpListener::bind(addr).await {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(e) if listen.port() == 0 => last = Some(e),
            Err(e) => return Err(BuildError::Bind("tcp", addr, e)),
        }
    }
    Err(BuildError::NoCommonPort(
        listen,
        last.unwrap_or_else(|| std::io::Error::other("no attempt")),
    ))
}

/// Start the informers and the server; returns once the sockets are bound (answers are
/// SERVFAIL until the informers have listed: see `/readyz`).
pub async fn build(config: Config) -> Result<Bound, BuildError> {
    let (udp, tcp) = bind(config.listen).await?;
    let addr = udp
        .local_addr()
        .map_err(|e| BuildError::Bind("udp", config.listen, e))?;
    let mut zones = Zones::new(
        zone_name(&config.zone)?,
        config.cluster_zone.as_deref().map(zone_name).transpose()?,
        config.ttl,
        addr.ip(),
    );
    zones.local_cluster = config.cluster_id.to_ascii_lowercase();
    let serve_cluster = zones.cluster.is_some();
    let informers = if serve_cluster { 5 } else { 2 };
    let state = Arc::new(DnsState::new(
        zones,
        informers,
        config.forward.map(Forwarder::new),
    ));

    let client = config.client;
    tokio::spawn(informers::run::<ServiceImport>(
        client.clone(),
        state.clone(),
    ));
    tokio::spawn(informers::run::<EndpointSlice>(
        client.clone(),
        state.clone(),
    ));
    if let Some(control) = config.control {
        tokio::spawn(informers::run::<Cluster>(control.root, state.clone()));
        tokio::spawn(informers::run::<Ingress>(control.wildcard, state.clone()));
    }
    if serve_cluster {
        tokio::spawn(informers::run::<Service>(client.clone(), state.clone()));
        tokio::spawn(informers::run::<Namespace>(client.clone(), state.clone()));
        tokio::spawn(informers::run::<Pod>(client, state.clone()));
    }

    let (admin_stop, admin_rx) = watch::channel(false);
    let admin = sluice_observe::serve(config.admin, state.clone(), admin_rx)
        .await
        .map_err(|e| BuildError::Bind("admin", config.admin, e))?;

    let handler = DnsHandler {
        state: state.clone(),
    };
    let udp = Arc::new(udp);
    let workers = tokio::runtime::Handle::current()
        .metrics()
        .num_workers()
        .max(1);
    let memo_bytes = memo::MAX_BYTES / workers;
    let udp_tasks: Vec<_> = (0..workers)
        .map(|_| tokio::spawn(udp::serve(udp.clone(), handler.clone(), memo_bytes)))
        .collect();
    let mut server = Server::new(handler);
    server.register_listener(tcp, TCP_IDLE, 64);
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = stopped.await;
        for t in udp_tasks {
            t.abort();
        }
        if let Err(e) = server.shutdown_gracefully().await {
            tracing::debug!(error = %e, "dns server stopped with an error");
        }
    });
    tracing::info!(%addr, %admin, cluster = %config.cluster_id, "dns serving");
    Ok(Bound {
        addr,
        admin,
        state,
        stop: Some(stop),
        _admin_stop: admin_stop,
    })
}
