//! `sluice dns`: the clusterset DNS server (`clusterset.local` from ServiceImports,
//! `cluster.local` for local clusters, everything else forwarded).

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::process::{init_tracing, kube_client, shutdown_signal};

/// The arguments of `sluice dns`.
#[derive(clap::Args)]
pub struct Args {
    /// UDP and TCP address (port 0 picks one; the bound address is printed).
    #[arg(long, default_value = "127.0.0.1:5353")]
    pub listen: SocketAddr,
    /// Kubeconfig of the cluster whose ServiceImports and EndpointSlices are served.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// This cluster's MCS cluster id (its endpoints come first in headless answers).
    #[arg(long)]
    pub cluster_id: String,
    #[arg(long, default_value = "clusterset.local")]
    pub zone: String,
    /// The local cluster's zone; empty to leave it to the cluster's own DNS.
    #[arg(long, default_value = "cluster.local")]
    pub cluster_zone: String,
    /// Upstream for every other name (none: REFUSED).
    #[arg(long)]
    pub forward: Option<SocketAddr>,
    /// TTL of every answer in seconds.
    #[arg(long, default_value_t = sluice_dns::DEFAULT_TTL)]
    pub ttl: u32,
    /// Where to serve /metrics and /readyz.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub admin: SocketAddr,
    /// The control plane's kubeconfig: answer the hosts of every logical cluster's
    /// Ingresses with the ingress addresses of the clusters that take clients.
    #[arg(long)]
    pub control: Option<PathBuf>,
    /// Worker threads (default: one per core).
    #[arg(long)]
    pub threads: Option<usize>,
}

/// Serve until SIGINT or SIGTERM.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let Args {
        listen,
        kubeconfig,
        cluster_id,
        zone,
        cluster_zone,
        forward,
        ttl,
        admin,
        control,
        threads: _,
    } = args;
    init_tracing();
    let client = kube_client(kubeconfig.as_deref()).await?;
    let mut config = sluice_dns::Config::new(client, &cluster_id);
    config.listen = listen;
    config.admin = admin;
    config.zone = zone;
    config.cluster_zone = Some(cluster_zone).filter(|z| !z.is_empty());
    config.forward = forward;
    config.ttl = ttl;
    if let Some(p) = control {
        let root = sluice_kube::client::config_from_kubeconfig(&p, None).await?;
        let wildcard =
            sluice_kube::roots::Roots::new(root.clone(), "/clusters/").at("/clusters/*")?;
        config.control = Some(sluice_dns::Control {
            root: sluice_kube::client::build(root)?,
            wildcard,
        });
    }
    let mut bound = sluice_dns::build(config).await?;
    println!("dns: listening on {} admin {}", bound.addr, bound.admin);
    shutdown_signal().await?;
    bound.shutdown();
    Ok(())
}
