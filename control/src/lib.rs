//! Sluice's logical-cluster Kubernetes API server.
//!
//! [`build`] starts a server from a [`Config`] and returns a [`Bound`] handle; the `sluice`
//! binary and the tests both use it, binding port 0 in tests.

pub mod admission;
pub mod agent_client;
pub mod apply;
pub mod audit;
pub mod auth;
pub mod bootstrap;
pub mod catalog;
pub mod cel;
pub mod codec;
pub mod controllers;
pub mod conversion;
pub mod crd;
pub mod defaults;
pub mod downstream_names;
pub mod errors;
pub mod events;
pub mod fairness;
pub mod handlers;
pub mod immutable;
pub mod jsonpath;
pub mod leader;
pub mod metrics;
pub mod object;
pub mod patch;
pub mod pipeline;
pub mod pki;
pub mod policies;
pub mod rbac;
pub mod request;
pub mod resources;
pub mod schema;
pub mod selectors;
pub mod server;
pub mod single_cluster;
pub mod state;
pub mod storage;
pub mod table;
pub mod tenancy;
pub mod validation;
pub mod webhooks;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use prometheus_client::registry::Registry;
use tokio::sync::watch;

pub use state::Limits;

use crate::auth::Authenticator;
use crate::controllers::termination::{self, Container};
use crate::metrics::ApiMetrics;
use crate::pki::Pki;
use crate::schema::SchemaSet;
use crate::state::{ApiState, SharedState};
use crate::storage::{EtcdBackend, RedbBackend, Store};

/// Server configuration.
#[derive(Clone, Debug)]
pub struct Config {
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    /// kube-apiserver style static token file.
    pub token_file: Option<PathBuf>,
    /// Watch events retained per resource type.
    pub watch_history: usize,
    pub limits: Limits,
    /// Serve one physical cluster: allocate Service ClusterIPs from this CIDR, keep the
    /// `default` and `kube-system` namespaces and the `kubernetes` Service.
    pub single_cluster: Option<single_cluster::Ipv4Cidr>,
    /// Container logs written by a local cluster's node agent, served as `pods/log`.
    pub pod_logs_dir: Option<PathBuf>,
    /// A local cluster's node agent streaming socket: `pods/exec`, `pods/attach` and
    /// `pods/portforward` are proxied there.
    pub node_streaming: Option<PathBuf>,
    /// One JSON line per request, when set.
    pub audit: Option<audit::AuditConfig>,
    /// Keep objects in etcd instead of the embedded store in the data directory.
    pub etcd: Option<storage::EtcdConfig>,
    /// Read the CA, tokens and signing key from here, never writing to it (a mounted
    /// Secret shared by replicas, made by `sluice pki`), instead of keeping them in the
    /// data directory.
    pub pki_dir: Option<PathBuf>,
    /// Names and addresses the serving certificate carries besides the listen address and
    /// loopback (a Service's DNS names, a load balancer's address).
    pub tls_sans: Vec<String>,
}

impl Config {
    pub fn new(data_dir: impl Into<PathBuf>, listen: SocketAddr) -> Self {
        Self {
            data_dir: data_dir.into(),
            listen,
            token_file: None,
            watch_history: storage::cache::DEFAULT_HISTORY,
            limits: Limits::default(),
            single_cluster: None,
            pod_logs_dir: None,
            node_streaming: None,
            audit: None,
            etcd: None,
            pki_dir: None,
            tls_sans: Vec::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error(transparent)]
    Pki(#[from] pki::PkiError),
    #[error("storage: {0}")]
    Storage(#[from] storage::StorageError),
    #[error("binding {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    #[error(transparent)]
    TokenFile(#[from] auth::TokenFileError),
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("{0}: not a server URL (https://host:port)")]
    ServerUrl(String),
    #[error("the controllers' client: {0}")]
    Client(#[source] sluice_kube::ClientError),
}

/// A running server.
pub struct Bound {
    pub addr: SocketAddr,
    /// `https://host:port`
    pub url: String,
    pub admin_kubeconfig: PathBuf,
    pub state: SharedState,
    shutdown: watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
}

impl Bound {
    /// Stop accepting, end open connections and controllers.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.server.await;
    }
}

/// This machine's name, for the leader Lease's holder identity.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

fn server_host(listen: SocketAddr) -> String {
    match listen.ip() {
        ip if ip.is_unspecified() => "127.0.0.1".to_string(),
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        ip => ip.to_string(),
    }
}

/// Start the API server.
pub async fn build(config: Config) -> Result<Bound, ControlError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    std::fs::create_dir_all(&config.data_dir)
        .map_err(|e| ControlError::Io(config.data_dir.clone(), e))?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| ControlError::Bind(config.listen, e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| ControlError::Bind(config.listen, e))?;
    let host = server_host(addr);
    let mut hosts = vec![host.trim_matches(['[', ']']).to_string()];
    hosts.extend(config.tls_sans.iter().cloned());
    let pki = match &config.pki_dir {
        Some(dir) => Pki::load(dir, &hosts)?,
        None => Pki::load_or_create(&config.data_dir, &hosts)?,
    };
    let tls = Arc::new(pki.server_config()?);
    let signer = auth::service_account::TokenSigner::from_pkcs8(&pki.service_account_key_der)
        .map_err(|e| {
            ControlError::Io(
                config.data_dir.join("service-account.key"),
                std::io::Error::other(e),
            )
        })?;
    let mut auth = Authenticator::new(&pki.admin_token).with_signer(Arc::new(signer));
    // The placement controllers' own identity: an administrator, and one of the system's
    // controllers (which a human administrator is not). Its token lives in memory only.
    let placement_token = pki::random_token();
    auth.add_token(
        &placement_token,
        auth::User {
            name: "system:sluice:placement".into(),
            groups: vec![auth::ADMIN_GROUP.into(), auth::CONTROLLERS_GROUP.into()],
            binding: None,
        },
    );
    if let Some(f) = &config.token_file {
        auth.load_token_file(f)?;
    }
    let store = match &config.etcd {
        Some(etcd) => Store::open(EtcdBackend::connect(etcd).await?, config.watch_history)?,
        None => Store::open(
            RedbBackend::open(&config.data_dir.join("sluice.redb"))?,
            config.watch_history,
        )?,
    };
    let downstream_names = downstream_names::DownstreamNames::derive(&pki.service_account_key_der);
    let metrics = ApiMetrics::default();
    let mut registry = Registry::with_prefix("sluice_apiserver");
    metrics.register(&mut registry);
    let placement_metrics = sluice_placement::PlacementMetrics::default();
    placement_metrics.register(registry.sub_registry_with_prefix("placement"));
    let (gc_tx, gc_rx) = tokio::sync::mpsc::unbounded_channel();
    match config.single_cluster {
        Some(cidr) => bootstrap::single_cluster(&store, cidr.first(), addr.port()).await?,
        None => bootstrap::logical_clusters(&store, &downstream_names).await?,
    }
    let ips = config
        .single_cluster
        .map(|cidr| Arc::new(single_cluster::IpAllocator::new(cidr, &store)));
    let audit = match &config.audit {
        Some(a) => Some(
            audit::AuditLog::open(a.clone()).map_err(|e| ControlError::Io(a.path.clone(), e))?,
        ),
        None => None,
    };
    let state = Arc::new(ApiState {
        write: state::WriteState {
            store,
            crds: Default::default(),
            schemas: SchemaSet::builtin(),
            limits: config.limits.clone(),
            gc: gc_tx.clone(),
            ips: ips.clone(),
            rbac: Default::default(),
            downstream_names,
            parsed_namespaces: Default::default(),
        },
        fairness: fairness::Fairness::new(config.limits.fairness.clone()),
        openapi: Default::default(),
        metrics,
        registry,
        auth,
        ready: AtomicBool::new(false),
        pod_logs_dir: config.pod_logs_dir.clone(),
        node_streaming: config.node_streaming.clone(),
        audit,
        agents: agent_client::AgentClient::new(pki.agent_client_config()?),
        webhook_connections: Default::default(),
        hooks: admission::builtin(ips),
    });
    let url = format!("https://{host}:{}", addr.port());
    std::fs::write(config.data_dir.join("server.url"), &url)
        .map_err(|e| ControlError::Io(config.data_dir.join("server.url"), e))?;
    let admin_kubeconfig = config.data_dir.join("admin.kubeconfig");
    pki::write_private(
        &admin_kubeconfig,
        &pki::kubeconfig(
            &format!("{url}/clusters/root"),
            &pki.ca_cert_pem,
            "root",
            "admin",
            &pki.admin_token,
        ),
    )?;

    state.crds.rebuild_all(&state.store);
    // Namespaces synced before downstream names were keyed keep the name they have.
    if config.single_cluster.is_none() {
        let stamped = admission::downstream_names::restamp_namespaces(
            &state.store,
            &sluice_api::LogicalClusterPath::root(),
        )
        .await?;
        if stamped > 0 {
            tracing::info!(
                stamped,
                "namespaces keep the downstream names they were synced under"
            );
        }
    }
    // Namespaces written before their pod security level was recorded get it now.
    admission::pod_security::restamp_namespaces(&state, &sluice_api::LogicalClusterPath::root())
        .await?;
    // Ingresses written before their hosts were owned are admitted now, oldest first.
    admission::ingress_hosts::restamp_ingresses(&state, &sluice_api::LogicalClusterPath::root())
        .await?;
    let (shutdown, shutdown_rx) = watch::channel(false);
    if let Some(ips) = &state.ips {
        tokio::spawn(single_cluster::run_releaser(
            state.store.clone(),
            ips.clone(),
            shutdown_rx.clone(),
        ));
    }
    tokio::spawn(crate::controllers::gc::run(
        state.clone(),
        gc_rx,
        gc_tx,
        shutdown_rx.clone(),
    ));
    // Other replicas' CRDs (a shared store): served here too.
    tokio::spawn(crate::controllers::crd_catalog::run(
        state.clone(),
        shutdown_rx.clone(),
    ));
    // Other replicas' Roles and bindings: policies dropped when they change.
    tokio::spawn(crate::controllers::rbac_policy::run(
        state.clone(),
        shutdown_rx.clone(),
    ));
    // Controllers that must run once: on the replica holding the leader Lease when the
    // store is shared (etcd); the embedded store has one process by construction.
    let (leading_tx, leading) = watch::channel(config.etcd.is_none());
    if config.etcd.is_some() {
        tokio::spawn(leader::run(
            state.store.clone(),
            format!("{}-{}", hostname(), addr),
            leading_tx,
            shutdown_rx.clone(),
        ));
    }
    for container in [
        Container::Namespace,
        Container::Workspace,
        Container::CustomResourceDefinition,
    ] {
        let state = state.clone();
        tokio::spawn(leader::while_leading(
            leading.clone(),
            shutdown_rx.clone(),
            container.name(),
            move |stop| termination::run(state.clone(), container, stop),
        ));
    }
    let server = tokio::spawn(server::serve(
        listener,
        tls,
        state.clone(),
        shutdown_rx.clone(),
    ));
    if config.single_cluster.is_none() {
        // The placement controllers: clients of this server like any other.
        let mut client = sluice_kube::client::config_from_kubeconfig(&admin_kubeconfig, None)
            .await
            .map_err(ControlError::Client)?;
        client.auth_info.token = Some(placement_token.into());
        tokio::spawn(leader::while_leading(
            leading,
            shutdown_rx,
            "placement",
            move |stop| {
                let client = client.clone();
                let metrics = placement_metrics.clone();
                async move {
                    if let Err(e) = sluice_placement::run(client, stop, metrics).await {
                        tracing::error!(error = %e, "the placement controllers stopped");
                    }
                }
            },
        ));
    }
    state.ready.store(true, Ordering::Release);
    tracing::info!(%url, data_dir = %config.data_dir.display(), revision = %state.store.revision(), "control plane ready");
    Ok(Bound {
        addr,
        url,
        admin_kubeconfig,
        state,
        shutdown,
        server,
    })
}

/// Which logical cluster(s) a kubeconfig addresses.
pub enum KubeconfigScope {
    One(sluice_api::LogicalClusterPath),
    /// `/clusters/*`: list and watch across every logical cluster (admin only).
    Wildcard,
}

impl std::str::FromStr for KubeconfigScope {
    type Err = sluice_api::PathError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "*" {
            Ok(KubeconfigScope::Wildcard)
        } else {
            s.parse().map(KubeconfigScope::One)
        }
    }
}

/// Where kubeconfigs made away from the server get their credentials and URL.
pub struct KubeconfigSource<'a> {
    /// A data directory, or a credentials directory of `sluice pki`.
    pub dir: &'a Path,
    /// The server's URL (`https://host:port`); when absent, the `server.url` the server
    /// wrote into its data directory.
    pub server: Option<&'a str>,
}

impl KubeconfigSource<'_> {
    fn url(&self) -> Result<String, ControlError> {
        match self.server {
            Some(s) if s.starts_with("https://") && s.len() > "https://".len() => {
                Ok(s.trim_end_matches('/').to_string())
            }
            Some(s) => Err(ControlError::ServerUrl(s.to_string())),
            None => std::fs::read_to_string(self.dir.join("server.url"))
                .map(|u| u.trim().to_string())
                .map_err(|e| ControlError::Io(self.dir.join("server.url"), e)),
        }
    }
}

/// A kubeconfig for the syncer of physical cluster `cluster`: its own identity (a client
/// certificate for `system:sluice:syncer:<cluster>` in `system:sluice:syncers`, signed by the
/// CA in `dir`), which reads only what is placed on that cluster ([`rbac::syncer`]).
pub fn syncer_kubeconfig(
    source: &KubeconfigSource<'_>,
    cluster: &sluice_api::ClusterName,
) -> Result<String, ControlError> {
    let url = source.url()?;
    let pki = Pki::load(source.dir, &[])?;
    let user = format!("{}{cluster}", rbac::syncer::USER_PREFIX);
    let (cert, key) = pki.issue_agent_cert(
        &user,
        &[rbac::syncer::GROUP],
        &sluice_api::liveness::syncer_server_name(cluster),
    )?;
    Ok(pki::kubeconfig_with_cert(
        &format!("{}/clusters/root", url.trim()),
        &pki.ca_cert_pem,
        &format!("syncer-{cluster}"),
        &cert,
        &key,
    ))
}

/// A kubeconfig for part `component` of the clusterset (root, a client certificate for
/// its own identity, [`rbac::clusterset`]): it reads the registry, and the Ingresses
/// across logical clusters where that part serves them.
pub fn component_kubeconfig(
    source: &KubeconfigSource<'_>,
    component: rbac::clusterset::Component,
) -> Result<String, ControlError> {
    let url = source.url()?;
    let pki = Pki::load(source.dir, &[])?;
    let (cert, key) = pki.issue_client_cert(&component.user(), &[rbac::clusterset::GROUP])?;
    Ok(pki::kubeconfig_with_cert(
        &format!("{url}/clusters/root"),
        &pki.ca_cert_pem,
        &format!("sluice-{}", component.name()),
        &cert,
        &key,
    ))
}

/// A kubeconfig for logical cluster `scope` of the server whose data directory is `dir`.
pub fn kubeconfig_for(
    source: &KubeconfigSource<'_>,
    scope: &KubeconfigScope,
) -> Result<String, ControlError> {
    let dir = source.dir;
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name)).map_err(|e| ControlError::Io(dir.join(name), e))
    };
    let url = source.url()?;
    let ca = read("ca.crt")?;
    let token = read("admin.token")?;
    let (path, context) = match scope {
        KubeconfigScope::One(p) => (p.to_string(), p.to_string()),
        KubeconfigScope::Wildcard => ("*".to_string(), "wildcard".to_string()),
    };
    Ok(pki::kubeconfig(
        &format!("{}/clusters/{path}", url.trim()),
        &ca,
        &context,
        "admin",
        token.trim(),
    ))
}
