//! `sluice dev`: a local clusterset (`sluice dev up`).

use std::path::PathBuf;

use crate::process::{init_tracing, shutdown_signal};

#[derive(clap::Subcommand)]
pub enum DevCommand {
    /// Start the control plane and local physical clusters; `ready` once up; stops on
    /// SIGINT/SIGTERM.
    Up {
        #[arg(long, default_value = ".sluice/dev")]
        state: PathBuf,
        /// Cluster names; a cluster's index is its position.
        #[arg(long, value_delimiter = ',', default_value = "east,west")]
        clusters: Vec<String>,
        /// Stream every part's log here instead of writing it to `<state>/logs/`.
        #[arg(long)]
        verbose: bool,
        /// The node agents run only the built-in images, never another container's
        /// command (for trying manifests written by others).
        #[arg(long)]
        builtin_images_only: bool,
        /// Only the clusters' API servers and node agents, for installing the rest with
        /// the Helm charts in charts/ (docs/install.md).
        #[arg(long)]
        bare: bool,
    },
}

/// The arguments of `sluice dev`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: DevCommand,
}

/// Run the local clusterset until SIGINT or SIGTERM.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let Args {
        command:
            DevCommand::Up {
                state,
                clusters,
                verbose,
                builtin_images_only,
                bare,
            },
    } = args;
    init_tracing();
    let cfg = sluice_local::devup::DevUpConfig {
        state,
        clusters,
        sluice_bin: std::env::current_exe()?,
        verbose,
        builtin_images_only,
        bare,
    };
    let running = sluice_local::devup::up(&cfg).await?;
    shutdown_signal().await?;
    eprintln!("dev up: stopping");
    tokio::task::spawn_blocking(move || running.stop()).await?;
    eprintln!("dev up: stopped");
    Ok(())
}
