//! `sluice node`: the node agent and controllers of a local cluster.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::process::{init_tracing, kube_client, shutdown_signal};

/// The arguments of `sluice node`.
#[derive(clap::Args)]
pub struct Args {
    /// Kubeconfig of the cluster's API server.
    #[arg(long)]
    pub kubeconfig: PathBuf,
    /// The cluster's name.
    #[arg(long)]
    pub cluster: String,
    /// The cluster's index (Pod IPs from 127.(20+index).0.0/16).
    #[arg(long, default_value_t = 0)]
    pub index: u8,
    #[arg(long)]
    pub logs_dir: PathBuf,
    #[arg(long, default_value_t = 110)]
    pub max_pods: u32,
    /// Run only the built-in images (`sluice/echo`, `sluice/loadgen`), never another
    /// container's command: for manifests whose commands are not meant for this machine.
    #[arg(long)]
    pub builtin_images_only: bool,
    /// The cluster's DNS server, given to each Pod as `SLUICE_DNS_SERVER` with its
    /// search path (what kubelet writes into a Pod's resolv.conf).
    #[arg(long)]
    pub dns: Option<SocketAddr>,
    /// Where to serve /metrics and /readyz.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub admin: std::net::SocketAddr,
    /// The Unix socket of the streaming endpoint (`exec` into containers), for the
    /// cluster's API server (its `--node-streaming`); none without it.
    #[arg(long)]
    pub streaming_socket: Option<PathBuf>,
    /// A directory every cluster of the clusterset reaches (the local clusters' stand-in
    /// for a network file server): the cluster gets the StorageClass `shared`, whose
    /// claims mount the same data on every cluster (docs/stateful.md).
    #[arg(long)]
    pub shared_storage: Option<PathBuf>,
}

/// Run the node agent and the controllers until SIGINT or SIGTERM.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let Args {
        kubeconfig,
        cluster,
        index,
        logs_dir,
        max_pods,
        builtin_images_only,
        dns,
        admin,
        streaming_socket,
        shared_storage,
    } = args;
    init_tracing();
    let client = kube_client(Some(&kubeconfig)).await?;
    let cfg = sluice_local::node::NodeConfig {
        node_name: format!("{cluster}-node"),
        cluster,
        index,
        logs_dir,
        sluice_bin: std::env::current_exe()?,
        max_pods,
        builtin_images_only,
        dns,
        metrics: Default::default(),
        api: match sluice_local::node::service_account::ApiEndpoint::from_kubeconfig(&kubeconfig) {
            Ok(api) => Some(std::sync::Arc::new(api)),
            Err(e) => {
                tracing::warn!(error = %e, "pods get no ServiceAccount credentials");
                None
            }
        },
        running: Default::default(),
        shared_storage,
    };
    let cfg_controllers = cfg.metrics.controllers.clone();
    let (tx, rx) = tokio::sync::watch::channel(false);
    let admin = sluice_local::node::admin::serve(admin, cfg.metrics.clone(), rx.clone()).await?;
    tracing::info!(%admin, "node agent admin endpoint (/metrics, /readyz)");
    let streaming = streaming_socket.map(|socket| {
        tokio::spawn(sluice_local::node::streaming::serve(
            socket,
            cfg.running.clone(),
            Default::default(),
            rx.clone(),
        ))
    });
    let node = tokio::spawn(sluice_local::node::run(client.clone(), cfg, rx.clone()));
    let controllers = tokio::spawn(sluice_local::controllers::run(client, cfg_controllers, rx));
    shutdown_signal().await?;
    let _ = tx.send(true);
    node.await??;
    controllers.await??;
    if let Some(streaming) = streaming {
        streaming.await??;
    }
    Ok(())
}
