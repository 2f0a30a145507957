//! `sluice console`: the live console in the browser, with the kubeconfig's identity.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::process::{init_tracing, shutdown_signal};

/// The arguments of `sluice console`.
#[derive(clap::Args)]
pub struct Args {
    /// Whose identity the console uses, and which control plane (default: the one
    /// `sluice dev up` writes).
    #[arg(long, default_value = ".sluice/dev/control.kubeconfig")]
    pub kubeconfig: PathBuf,
    /// Where to serve the page: loopback unless told otherwise.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// The access token the URL carries (default: a random one). `$SLUICE_CONSOLE_TOKEN`.
    #[arg(long, env = "SLUICE_CONSOLE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

/// Serve until SIGINT or SIGTERM; print the URL (with its token) on a line of its own.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let Args {
        kubeconfig,
        listen,
        token,
    } = args;
    init_tracing();
    let bound = sluice_console::build(sluice_console::Config {
        kubeconfig,
        listen,
        token,
    })
    .await?;
    println!("console: {}", bound.url);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let serve = tokio::spawn(bound.serve(stopped));
    shutdown_signal().await?;
    let _ = stop.send(true);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), serve).await;
    Ok(())
}
