//! `sluice echo`: the `sluice/echo` test image (HTTP/1.1, h2c, gRPC and TCP echo).

use crate::process::shutdown_signal;

/// Run it until SIGINT or SIGTERM.
pub async fn run() -> anyhow::Result<()> {
    let bound = sluice_local::echo::build(sluice_local::echo::EchoConfig::from_env()?).await?;
    println!("echo: http {} tcp {}", bound.http, bound.tcp);
    shutdown_signal().await?;
    bound.shutdown().await;
    Ok(())
}
