//! `sluice uncordon`: undo `sluice drain`; the cluster takes new placements again.

use std::path::PathBuf;

/// The arguments of `sluice uncordon`.
#[derive(clap::Args)]
pub struct Args {
    pub name: String,
    #[arg(long, default_value = ".sluice/dev/control.kubeconfig")]
    pub kubeconfig: PathBuf,
}

/// Uncordon the cluster.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let Args { name, kubeconfig } = args;
    crate::drain::uncordon(&kubeconfig, &name).await?;
    Ok(())
}
