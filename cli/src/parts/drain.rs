//! `sluice drain`: cordon a physical cluster and move every namespace off it.

use std::path::PathBuf;

/// The arguments of `sluice drain`.
#[derive(clap::Args)]
pub struct Args {
    /// The cluster's name in the control plane's registry.
    pub name: String,
    /// Follow the drain until the cluster is empty.
    #[arg(long)]
    pub wait: bool,
    /// How long `--wait` waits, in seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Kubeconfig of the control plane.
    #[arg(long, default_value = ".sluice/dev/control.kubeconfig")]
    pub kubeconfig: PathBuf,
}

/// Drain the cluster, following it to the end with `--wait`.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let Args {
        name,
        wait,
        timeout,
        kubeconfig,
    } = args;
    crate::drain::drain(
        &kubeconfig,
        &name,
        wait,
        std::time::Duration::from_secs(timeout),
    )
    .await?;
    Ok(())
}
