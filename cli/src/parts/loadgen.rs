//! `sluice loadgen`: the `sluice/loadgen` test image — constant-rate load, every failure
//! counted with its reason, a JSON report.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;

use crate::process::{kube_client, shutdown_signal};

/// The arguments of `sluice loadgen`.
#[derive(clap::Args)]
pub struct Args {
    /// http1, h2, grpc or tcp.
    #[arg(long, default_value = "http1")]
    pub protocol: String,
    /// Requests (or TCP connections) per second.
    #[arg(long, default_value_t = 100)]
    pub rate: u32,
    /// Seconds to run.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Targets (`ip:port`, or `name:port` resolved through --dns or the Pod's DNS
    /// server and search path, again every 5 s); or use --service.
    #[arg(long)]
    pub target: Vec<String>,
    /// `namespace/name`: the Service whose ready endpoints (from its EndpointSlices,
    /// followed live) receive the load, on --port.
    #[arg(long)]
    pub service: Option<String>,
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Kubeconfig for --service (default: $KUBECONFIG).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    #[arg(long, default_value = "/")]
    pub path: String,
    /// The DNS server for `name:port` targets (default: $SLUICE_DNS_SERVER, with the
    /// search path $SLUICE_DNS_SEARCH, asked from $POD_IP).
    #[arg(long)]
    pub dns: Option<SocketAddr>,
    /// The Host (HTTP/1.1) or :authority (HTTP/2, gRPC) to send, as a client of a name
    /// would (an ingress routes by it); default: the target's address.
    #[arg(long)]
    pub host: Option<String>,
    /// Per-request timeout in seconds.
    #[arg(long, default_value_t = 5.0)]
    pub timeout: f64,
}

/// Send the load, print the report; exit 1 if any request failed.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let Args {
        protocol,
        rate,
        duration,
        target,
        service,
        port,
        kubeconfig,
        path,
        dns,
        host,
        timeout,
    } = args;
    use sluice_local::loadgen::{LoadgenConfig, Targets, run};
    let targets = match service {
        Some(svc) => {
            let (namespace, name) = svc.split_once('/').context("--service is namespace/name")?;
            let client = kube_client(kubeconfig.as_deref()).await?;
            Targets::Service {
                client,
                namespace: namespace.into(),
                name: name.into(),
                port,
            }
        }
        None => match target
            .iter()
            .map(|t| t.parse::<SocketAddr>())
            .collect::<Result<Vec<_>, _>>()
        {
            Ok(addrs) => Targets::Fixed(addrs),
            // Names: resolved as a Pod resolves them (its DNS server and search
            // path from the environment the node agent gives it), or by --dns.
            Err(_) => {
                let resolver = match dns {
                    Some(server) => sluice_local::resolve::Resolver::new(server),
                    None => sluice_local::resolve::Resolver::from_env().context(
                        "a --target NAME:PORT needs a DNS server: --dns, or SLUICE_DNS_SERVER (set in the local clusters' Pods)",
                    )?,
                };
                let names = target
                    .iter()
                    .map(|t| {
                        let (name, port) = t.rsplit_once(':')?;
                        Some((name.to_string(), port.parse::<u16>().ok()?))
                    })
                    .collect::<Option<Vec<_>>>()
                    .context("--target host:port or name:port")?;
                Targets::Names { names, resolver }
            }
        },
    };
    // SIGINT/SIGTERM end the run early; the report still covers what was sent.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        if shutdown_signal().await.is_ok() {
            let _ = stop.send(true);
        }
    });
    let report = run(LoadgenConfig {
        targets,
        protocol: protocol.parse().map_err(anyhow::Error::msg)?,
        rate,
        duration: std::time::Duration::from_secs_f64(duration),
        path,
        host,
        timeout: std::time::Duration::from_secs_f64(timeout),
        live: true,
        observe: None,
        stop: Some(stopped),
    })
    .await;
    println!("{}", report.to_json());
    if report.failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}
