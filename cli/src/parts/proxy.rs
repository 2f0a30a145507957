//! `sluice proxy`: the L4/L7 proxy, in cluster mode (configured from its cluster's API) or
//! from a file or flags.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::process::{init_tracing, kube_client, shutdown_signal, start_busy_poll};

/// The arguments of `sluice proxy`.
#[derive(clap::Args)]
pub struct Args {
    #[arg(long, conflicts_with_all = ["listen", "upstream", "kubeconfig"])]
    pub config: Option<PathBuf>,
    /// Cluster mode: serve this cluster's ClusterIPs and ServiceImport VIPs, configured
    /// from its API (with --cluster).
    #[arg(long, requires = "cluster", conflicts_with_all = ["listen", "upstream"])]
    pub kubeconfig: Option<PathBuf>,
    /// Cluster mode with the Pod's own ServiceAccount instead of --kubeconfig.
    #[arg(long, requires = "cluster", conflicts_with_all = ["listen", "upstream", "kubeconfig", "config"])]
    pub in_cluster: bool,
    /// Cluster mode: this cluster's name (its MCS cluster id).
    #[arg(long)]
    pub cluster: Option<String>,
    /// Cluster mode: the control plane's kubeconfig, for other clusters' gateways.
    #[arg(long)]
    pub control: Option<PathBuf>,
    /// Cluster mode: tunnel certificates (`ca.crt`, `<cluster>.crt`, `<cluster>.key`,
    /// as `sluice tunnel certs` writes them).
    #[arg(long)]
    pub tunnel_dir: Option<PathBuf>,
    /// Cluster mode: where this cluster's gateway listens (TCP and UDP).
    #[arg(long, requires = "tunnel_dir")]
    pub gateway: Option<SocketAddr>,
    /// Cluster mode: tunnels to other clusters over `h2` (mTLS TCP) or `quic`.
    #[arg(long, default_value = "h2")]
    pub tunnel_transport: String,
    /// Cluster mode: serve Ingress objects (class `sluice`, or none) on this address:
    /// this cluster's, and with --control every logical cluster's.
    #[arg(long, requires = "cluster")]
    pub ingress: Option<SocketAddr>,
    /// Quick mode: where to listen.
    #[arg(long, requires = "upstream")]
    pub listen: Option<SocketAddr>,
    /// Quick mode: the endpoints, `host:port[,host:port...]`.
    #[arg(long, value_delimiter = ',')]
    pub upstream: Vec<SocketAddr>,
    /// Quick mode: tcp, http, h2c, grpc or detect.
    #[arg(long, default_value = "detect")]
    pub protocol: String,
    /// Worker threads (default: one per core).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Keep polling sockets for this many microseconds after the last request
    /// instead of sleeping: lower tail latency where waking a CPU is slow (VMs),
    /// at the cost of CPU while traffic flows. 0: off.
    #[arg(long, default_value_t = 0)]
    pub busy_poll_us: u64,
    /// Keep polling sockets while a request awaits its upstream's response, for up
    /// to this many microseconds after it was sent and at most 50 µs of CPU per
    /// request: a fast upstream's response is picked up without a wake-up. 0: off.
    #[arg(long, default_value_t = 200)]
    pub poll_upstream_us: u64,
    /// Where to serve /metrics, /readyz and /config_dump.
    #[arg(long, default_value = "127.0.0.1:15000")]
    pub admin: SocketAddr,
}

/// Run the proxy until SIGINT or SIGTERM.
pub async fn run(args: Args) -> anyhow::Result<()> {
    match args.cluster.clone() {
        Some(cluster) if args.kubeconfig.is_some() || args.in_cluster => {
            cluster_mode(cluster, args).await
        }
        _ => quick_mode(args).await,
    }
}

/// Serve this cluster's Services, configured from its API.
async fn cluster_mode(cluster: String, args: Args) -> anyhow::Result<()> {
    let Args {
        kubeconfig,
        control,
        tunnel_dir,
        gateway,
        tunnel_transport,
        ingress,
        admin,
        workers,
        busy_poll_us,
        poll_upstream_us,
        ..
    } = args;
    init_tracing();
    start_busy_poll(busy_poll_us, poll_upstream_us, workers);
    let transport = match tunnel_transport.as_str() {
        "h2" => sluice_dataplane::TunnelTransport::H2,
        "quic" => sluice_dataplane::TunnelTransport::Quic,
        other => anyhow::bail!("--tunnel-transport {other:?}: h2 or quic"),
    };
    let tunnel = tunnel_dir.map(|dir| {
        let path = |f: String| dir.join(f).display().to_string();
        sluice_dataplane::TunnelConfig {
            cert: path(format!("{cluster}.crt")),
            key: path(format!("{cluster}.key")),
            trust_bundle: vec![path("ca.crt".into())],
            gateway,
            peers: vec![],
        }
    });
    // The tunnel (gateway) starts now; services follow from the cluster.
    let initial = sluice_dataplane::ProxyConfig {
        tunnel: tunnel.clone(),
        ingress: ingress.map(|listen| sluice_dataplane::IngressConfig {
            listen,
            routes: vec![],
        }),
        ..Default::default()
    };
    let bound = sluice_dataplane::build(&initial, admin).await?;
    bound.proxy.set_unsynced();
    let client = match &kubeconfig {
        Some(p) => kube_client(Some(p)).await?,
        None => sluice_kube::client::from_kubeconfig_or_in_cluster(None).await?,
    };
    let (control, upstream) = match control {
        Some(p) => {
            let config = sluice_kube::client::config_from_kubeconfig(&p, None).await?;
            let wildcard =
                sluice_kube::roots::Roots::new(config, "/clusters/").at("/clusters/*")?;
            (Some(kube_client(Some(&p)).await?), Some(wildcard))
        }
        None => (None, None),
    };
    let ingress = bound.proxy.ingress_addr();
    let gw = bound
        .proxy
        .tunnels
        .gateway_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|| "-".into());
    let ing = ingress.map_or_else(|| "-".into(), |a| a.to_string());
    println!(
        "proxy: cluster {cluster} gateway {gw} admin {} ingress {ing}",
        bound.admin
    );
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let run = tokio::spawn(
        sluice_dataplane::cluster::ClusterMode {
            cluster,
            client,
            control,
            upstream,
            ingress,
            tunnel,
            transport,
        }
        .run(bound.proxy.clone(), stopped),
    );
    shutdown_signal().await?;
    let _ = stop.send(true);
    let _ = run.await;
    Ok(())
}

/// Serve a configuration file (reloaded on change) or one service from flags.
async fn quick_mode(args: Args) -> anyhow::Result<()> {
    let Args {
        config,
        listen,
        upstream,
        protocol,
        workers,
        busy_poll_us,
        poll_upstream_us,
        admin,
        ..
    } = args;
    init_tracing();
    start_busy_poll(busy_poll_us, poll_upstream_us, workers);
    let initial = match (&config, listen) {
        (Some(path), _) => sluice_dataplane::ProxyConfig::from_file(path)?,
        (None, Some(listen)) => sluice_dataplane::ProxyConfig {
            services: vec![sluice_dataplane::ServiceConfig {
                name: "default".into(),
                listen,
                protocol: protocol.parse().map_err(anyhow::Error::msg)?,
                endpoints: upstream
                    .iter()
                    .map(|a| sluice_dataplane::EndpointConfig::new(*a))
                    .collect(),
                timeouts: Default::default(),
                retry_ratio: 0.2,
                exported: false,
                locality: Default::default(),
            }],
            ..Default::default()
        },
        (None, None) => anyhow::bail!("give --config FILE, or --listen and --upstream"),
    };
    let bound = sluice_dataplane::build(&initial, admin).await?;
    let first = bound
        .proxy
        .addresses()
        .first()
        .map(|(_, a)| a.to_string())
        .unwrap_or_default();
    println!("proxy: listening on {first} admin {}", bound.admin);
    let Some(path) = config else {
        shutdown_signal().await?;
        return Ok(());
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let reload = tokio::spawn(sluice_dataplane::reload::watch_file(
        bound.proxy.clone(),
        path,
        stopped,
    ));
    shutdown_signal().await?;
    let _ = stop.send(true);
    reload.await??;
    Ok(())
}
