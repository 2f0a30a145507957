//! `sluice syncer`: the syncer of one physical cluster — what is placed on it, copied down
//! from every logical cluster; status, Pods and Events copied up.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::process::{init_tracing, shutdown_signal};

/// The arguments of `sluice syncer`.
#[derive(clap::Args)]
pub struct Args {
    /// Kubeconfig of the control plane; the syncer reads every logical cluster
    /// (`/clusters/*`) through it.
    #[arg(long)]
    pub control: PathBuf,
    /// This physical cluster's name in the control plane's registry.
    #[arg(long)]
    pub cluster: String,
    /// Kubeconfig of the physical cluster (default: in-cluster configuration).
    #[arg(long)]
    pub downstream: Option<PathBuf>,
    /// Where to serve /metrics and /readyz.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub admin: SocketAddr,
    /// Where to serve the log endpoint the control plane forwards `kubectl logs` to
    /// (TLS with the certificate of the `--control` kubeconfig; only the control plane's
    /// certificate is answered).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub logs: SocketAddr,
    /// The image of the Pods that copy a claim's data when its namespace moves: the local
    /// clusters' built-in `sluice/mover`, or the `sluice` image on clusters installed from
    /// the charts.
    #[arg(long, default_value = sluice_api::claim_copy::MOVER_IMAGE)]
    pub mover_image: String,
}

/// Sync until SIGINT or SIGTERM.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let Args {
        control,
        cluster,
        downstream,
        admin,
        logs,
        mover_image,
    } = args;
    init_tracing();
    let upstream = sluice_kube::client::config_from_kubeconfig(&control, None).await?;
    let downstream =
        sluice_kube::client::from_kubeconfig_or_in_cluster(downstream.as_deref()).await?;
    let syncer = sluice_syncer::controller::Syncer::new();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let admin = sluice_observe::serve(admin, syncer.clone(), stopped.clone()).await?;
    // The log endpoint serves TLS as this cluster's syncer, with the certificate of
    // the syncer's kubeconfig, to the control plane only.
    let logs_url = match sluice_syncer::logs::Identity::of(&upstream) {
        Ok(identity) => {
            let bound =
                sluice_syncer::logs::serve(logs, downstream.clone(), &identity, stopped.clone())
                    .await?;
            Some(format!("https://{bound}"))
        }
        Err(e) => {
            tracing::warn!(
                error = %e,
                "no log endpoint: kubectl logs upstream will not reach this cluster"
            );
            None
        }
    };
    println!("syncer: cluster {cluster} admin {admin}");
    let run = tokio::spawn(syncer.run(
        sluice_syncer::controller::Config {
            upstream,
            downstream,
            cluster: sluice_api::ClusterName::new(cluster),
            logs_url,
            mover_image,
        },
        stopped,
    ));
    shutdown_signal().await?;
    let _ = stop.send(true);
    run.await??;
    Ok(())
}
