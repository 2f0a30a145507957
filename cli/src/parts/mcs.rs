//! `sluice mcs`: the Multi-Cluster Services controller, or its CRDs (`sluice mcs crds`).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;

use crate::process::{init_tracing, kube_client, shutdown_signal};

#[derive(clap::Subcommand)]
pub enum McsCommand {
    /// Print the CustomResourceDefinitions of ServiceExport, ServiceImport and
    /// ClusterProperty (a `v1` List), for `kubectl apply -f -` on a real cluster.
    Crds,
}

/// The arguments of `sluice mcs`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<McsCommand>,
    /// Kubeconfig of the control plane (logical cluster `root`, where the `Cluster`
    /// objects are).
    #[arg(long)]
    pub control: Option<PathBuf>,
    /// Directory of member kubeconfigs, `<cluster>.kubeconfig` (default: `clusters/`
    /// next to the control kubeconfig, as `sluice dev up` writes them).
    #[arg(long)]
    pub kubeconfigs: Option<PathBuf>,
    /// Where to serve /metrics and /readyz.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub admin: SocketAddr,
}

/// Print the CRDs, or run the controller until SIGINT or SIGTERM.
pub async fn run(args: Args) -> anyhow::Result<()> {
    if let Some(McsCommand::Crds) = args.command {
        let list = serde_json::json!({
            "apiVersion": "v1",
            "kind": "List",
            "items": sluice_api::mcs::crds(),
        });
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(());
    }
    let Args {
        control,
        kubeconfigs,
        admin,
        ..
    } = args;
    init_tracing();
    let control = control.context("give --control KUBECONFIG")?;
    let kubeconfigs = kubeconfigs.unwrap_or_else(|| {
        control
            .parent()
            .unwrap_or(std::path::Path::new("."))
            .join("clusters")
    });
    let client = kube_client(Some(&control)).await?;
    let controller = sluice_mcs::controller::Controller::new();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let admin = sluice_observe::serve(admin, controller.clone(), stopped.clone()).await?;
    println!("mcs: running admin {admin}");
    let run = tokio::spawn(controller.run(
        sluice_mcs::controller::Config {
            control: client,
            kubeconfigs,
        },
        stopped,
    ));
    shutdown_signal().await?;
    let _ = stop.send(true);
    let _ = run.await;
    Ok(())
}
