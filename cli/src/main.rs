//! `sluice`: one binary, a subcommand per part. Argument parsing only; each part is a
//! library with its own `build`/`run`.

use std::net::SocketAddr;
use std::path::PathBuf;

mod demo;
mod drain;
mod parent;

use anyhow::Context;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "Transparent multi-cluster networking for Kubernetes"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum DevCommand {
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

#[derive(Subcommand)]
enum McsCommand {
    /// Print the CustomResourceDefinitions of ServiceExport, ServiceImport and
    /// ClusterProperty (a `v1` List), for `kubectl apply -f -` on a real cluster.
    Crds,
}

#[derive(Subcommand)]
enum TunnelCommand {
    /// Issue tunnel certificates: a clusterset CA (created in OUT unless present) and,
    /// per cluster, a certificate with `spiffe://<clusterset>/cluster/<name>/proxy`.
    Certs {
        #[arg(long, default_value = "sluice")]
        clusterset: String,
        #[arg(long, value_delimiter = ',', required = true)]
        clusters: Vec<String>,
        #[arg(long)]
        out: PathBuf,
        /// Validity of the cluster certificates.
        #[arg(long, default_value_t = 365)]
        days: i64,
    },
}

#[derive(Subcommand)]
enum Command {
    /// The whole promise in one run: a local clusterset, a sample app in logical cluster
    /// `root:shop` on `east`, consumers in `west` (HTTP/1.1, HTTP/2, gRPC, TCP streams), a
    /// move to `west` by one label, a drain of `east`; live progress, a report and a plot
    /// (`<state>/demo.svg`, `.png`, `demo.json`). Exit status 0 only if no request failed.
    Demo {
        #[arg(long, default_value = ".sluice/demo")]
        state: PathBuf,
        /// Leave the clusterset running after the report, for kubectl, until Ctrl-C.
        #[arg(long)]
        keep: bool,
        /// Requests per second of each consumer.
        #[arg(long, default_value_t = 100)]
        rate: u32,
        /// Seconds of each steady phase.
        #[arg(long, default_value_t = 6)]
        steady: u64,
    },
    /// Run the logical-cluster API server.
    Control {
        /// Where storage, the CA, certificates and kubeconfigs live.
        #[arg(long, default_value = ".sluice/control")]
        data_dir: PathBuf,
        /// Address to serve HTTPS on.
        #[arg(long, default_value = "127.0.0.1:6443")]
        listen: SocketAddr,
        /// Static token file: `token,user,uid[,"group1,group2"]` per line.
        #[arg(long)]
        token_auth_file: Option<PathBuf>,
        /// Watch events kept per resource type for watches resuming from a revision.
        #[arg(long, default_value_t = 10_000)]
        watch_history: usize,
        /// Largest request body in bytes.
        #[arg(long, default_value_t = 3 * 1024 * 1024)]
        max_request_bytes: usize,
        /// Queue tenants' requests fairly (256 slots, 32 per logical cluster, 429 after a
        /// 4 s wait) while the system's parts go first; `false` runs every request at once.
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        enable_priority_and_fairness: bool,
        /// Shortest ServiceAccount token a TokenRequest may ask for, in seconds
        /// (kube-apiserver's 600 unless lowered, e.g. to test expiry).
        #[arg(long, default_value_t = 600)]
        service_account_min_token_seconds: i64,
        /// Serve one physical cluster (Service ClusterIP allocation, the `kubernetes`
        /// Service; no logical-cluster annotation on objects).
        #[arg(long)]
        single_cluster: bool,
        /// Service ClusterIP range in single-cluster mode.
        #[arg(long, default_value = "10.96.0.0/16")]
        service_cidr: String,
        /// Container logs of a local cluster's node agent, served as `kubectl logs`.
        #[arg(long)]
        pod_logs_dir: Option<PathBuf>,
        /// Write one JSON line per request here (user, verb, logical cluster, resource,
        /// name, code, latency); off when absent.
        #[arg(long)]
        audit_log: Option<PathBuf>,
        /// Rotate the audit log when it would grow past this many MiB.
        #[arg(long, default_value_t = 100)]
        audit_log_max_mb: u64,
        /// Rotated audit logs kept (`PATH.1` … `PATH.N`).
        #[arg(long, default_value_t = 5)]
        audit_log_keep: usize,
        #[command(flatten)]
        etcd: EtcdArgs,
        /// Read the CA, tokens and signing key from this directory (made by `sluice pki`,
        /// e.g. a mounted Secret) and never write to it; else they live in --data-dir.
        #[arg(long)]
        pki_dir: Option<PathBuf>,
        /// More names or addresses for the serving certificate (a Service's DNS names, a
        /// load balancer's address); comma-separated or repeated.
        #[arg(long, value_delimiter = ',')]
        tls_san: Vec<String>,
    },
    /// Make a control plane's credentials (CA, ServiceAccount signing key, admin token)
    /// in a directory, for `sluice control --pki-dir` and
    /// `sluice kubeconfig`. What is there already is kept.
    Pki {
        #[arg(long)]
        out: PathBuf,
    },
    /// Run a local clusterset.
    Dev {
        #[command(subcommand)]
        command: DevCommand,
    },
    /// The node agent and controllers of a local cluster.
    Node {
        /// Kubeconfig of the cluster's API server.
        #[arg(long)]
        kubeconfig: PathBuf,
        /// The cluster's name.
        #[arg(long)]
        cluster: String,
        /// The cluster's index (Pod IPs from 127.(20+index).0.0/16).
        #[arg(long, default_value_t = 0)]
        index: u8,
        #[arg(long)]
        logs_dir: PathBuf,
        #[arg(long, default_value_t = 110)]
        max_pods: u32,
        /// Run only the built-in images (`sluice/echo`, `sluice/loadgen`), never another
        /// container's command: for manifests whose commands are not meant for this machine.
        #[arg(long)]
        builtin_images_only: bool,
        /// The cluster's DNS server, given to each Pod as `SLUICE_DNS_SERVER` with its
        /// search path (what kubelet writes into a Pod's resolv.conf).
        #[arg(long)]
        dns: Option<SocketAddr>,
        /// Where to serve /metrics and /readyz.
        #[arg(long, default_value = "127.0.0.1:0")]
        admin: std::net::SocketAddr,
    },
    /// The `sluice/echo` test image: HTTP/1.1, h2c and gRPC echo on $ECHO_HTTP_PORT (8080),
    /// TCP echo on $ECHO_TCP_PORT (9000), bound to $POD_IP.
    Echo,
    /// The `sluice/loadgen` test image: constant-rate load; every failure counted with its
    /// reason; a line per second on stderr; a JSON report on stdout (also when SIGINT or
    /// SIGTERM ends it early); exit 1 if any failed.
    Loadgen {
        /// http1, h2, grpc or tcp.
        #[arg(long, default_value = "http1")]
        protocol: String,
        /// Requests (or TCP connections) per second.
        #[arg(long, default_value_t = 100)]
        rate: u32,
        /// Seconds to run.
        #[arg(long, default_value_t = 10.0)]
        duration: f64,
        /// Targets (`ip:port`, or `name:port` resolved through --dns or the Pod's DNS
        /// server and search path, again every 5 s); or use --service.
        #[arg(long)]
        target: Vec<String>,
        /// `namespace/name`: the Service whose ready endpoints (from its EndpointSlices,
        /// followed live) receive the load, on --port.
        #[arg(long)]
        service: Option<String>,
        #[arg(long, default_value_t = 8080)]
        port: u16,
        /// Kubeconfig for --service (default: $KUBECONFIG).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        #[arg(long, default_value = "/")]
        path: String,
        /// The DNS server for `name:port` targets (default: $SLUICE_DNS_SERVER, with the
        /// search path $SLUICE_DNS_SEARCH, asked from $POD_IP).
        #[arg(long)]
        dns: Option<SocketAddr>,
        /// The Host (HTTP/1.1) or :authority (HTTP/2, gRPC) to send, as a client of a name
        /// would (an ingress routes by it); default: the target's address.
        #[arg(long)]
        host: Option<String>,
        /// Per-request timeout in seconds.
        #[arg(long, default_value_t = 5.0)]
        timeout: f64,
    },
    /// The clusterset DNS server: `clusterset.local` (MCS DNS specification 1.0.0) from
    /// ServiceImports and MCS EndpointSlices, `cluster.local` for local clusters, everything
    /// else forwarded.
    Dns {
        /// UDP and TCP address (port 0 picks one; the bound address is printed).
        #[arg(long, default_value = "127.0.0.1:5353")]
        listen: SocketAddr,
        /// Kubeconfig of the cluster whose ServiceImports and EndpointSlices are served.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// This cluster's MCS cluster id (its endpoints come first in headless answers).
        #[arg(long)]
        cluster_id: String,
        #[arg(long, default_value = "clusterset.local")]
        zone: String,
        /// The local cluster's zone; empty to leave it to the cluster's own DNS.
        #[arg(long, default_value = "cluster.local")]
        cluster_zone: String,
        /// Upstream for every other name (none: REFUSED).
        #[arg(long)]
        forward: Option<SocketAddr>,
        /// TTL of every answer in seconds.
        #[arg(long, default_value_t = sluice_dns::DEFAULT_TTL)]
        ttl: u32,
        /// Where to serve /metrics and /readyz.
        #[arg(long, default_value = "127.0.0.1:0")]
        admin: SocketAddr,
        /// The control plane's kubeconfig: answer the hosts of every logical cluster's
        /// Ingresses with the ingress addresses of the clusters that take clients.
        #[arg(long)]
        control: Option<PathBuf>,
        /// Worker threads (default: one per core).
        #[arg(long)]
        threads: Option<usize>,
    },
    /// The L4/L7 proxy. Either a configuration file (YAML; reloaded on change and on
    /// SIGHUP without dropping a connection) or the quick mode for one service.
    Proxy {
        #[arg(long, conflicts_with_all = ["listen", "upstream", "kubeconfig"])]
        config: Option<PathBuf>,
        /// Cluster mode: serve this cluster's ClusterIPs and ServiceImport VIPs, configured
        /// from its API (with --cluster).
        #[arg(long, requires = "cluster", conflicts_with_all = ["listen", "upstream"])]
        kubeconfig: Option<PathBuf>,
        /// Cluster mode with the Pod's own ServiceAccount instead of --kubeconfig.
        #[arg(long, requires = "cluster", conflicts_with_all = ["listen", "upstream", "kubeconfig", "config"])]
        in_cluster: bool,
        /// Cluster mode: this cluster's name (its MCS cluster id).
        #[arg(long)]
        cluster: Option<String>,
        /// Cluster mode: the control plane's kubeconfig, for other clusters' gateways.
        #[arg(long)]
        control: Option<PathBuf>,
        /// Cluster mode: tunnel certificates (`ca.crt`, `<cluster>.crt`, `<cluster>.key`,
        /// as `sluice tunnel certs` writes them).
        #[arg(long)]
        tunnel_dir: Option<PathBuf>,
        /// Cluster mode: where this cluster's gateway listens (TCP and UDP).
        #[arg(long, requires = "tunnel_dir")]
        gateway: Option<SocketAddr>,
        /// Cluster mode: tunnels to other clusters over `h2` (mTLS TCP) or `quic`.
        #[arg(long, default_value = "h2")]
        tunnel_transport: String,
        /// Cluster mode: serve Ingress objects (class `sluice`, or none) on this address:
        /// this cluster's, and with --control every logical cluster's.
        #[arg(long, requires = "cluster")]
        ingress: Option<SocketAddr>,
        /// Quick mode: where to listen.
        #[arg(long, requires = "upstream")]
        listen: Option<SocketAddr>,
        /// Quick mode: the endpoints, `host:port[,host:port...]`.
        #[arg(long, value_delimiter = ',')]
        upstream: Vec<SocketAddr>,
        /// Quick mode: tcp, http, h2c, grpc or detect.
        #[arg(long, default_value = "detect")]
        protocol: String,
        /// Worker threads (default: one per core).
        #[arg(long)]
        workers: Option<usize>,
        /// Keep polling sockets for this many microseconds after the last request
        /// instead of sleeping: lower tail latency where waking a CPU is slow (VMs),
        /// at the cost of CPU while traffic flows. 0: off.
        #[arg(long, default_value_t = 0)]
        busy_poll_us: u64,
        /// Keep polling sockets while a request awaits its upstream's response, for up
        /// to this many microseconds after it was sent and at most 50 µs of CPU per
        /// request: a fast upstream's response is picked up without a wake-up. 0: off.
        #[arg(long, default_value_t = 200)]
        poll_upstream_us: u64,
        /// Where to serve /metrics, /readyz and /config_dump.
        #[arg(long, default_value = "127.0.0.1:15000")]
        admin: SocketAddr,
    },
    /// East-west tunnels between clusters' proxies and gateways.
    Tunnel {
        #[command(subcommand)]
        command: TunnelCommand,
    },
    /// Multi-Cluster Services.
    /// The Multi-Cluster Services controller (`sluice mcs --control KUBECONFIG`), or
    /// `sluice mcs crds`.
    #[command(args_conflicts_with_subcommands = true)]
    Mcs {
        #[command(subcommand)]
        command: Option<McsCommand>,
        /// Kubeconfig of the control plane (logical cluster `root`, where the `Cluster`
        /// objects are).
        #[arg(long)]
        control: Option<PathBuf>,
        /// Directory of member kubeconfigs, `<cluster>.kubeconfig` (default: `clusters/`
        /// next to the control kubeconfig, as `sluice dev up` writes them).
        #[arg(long)]
        kubeconfigs: Option<PathBuf>,
        /// Where to serve /metrics and /readyz.
        #[arg(long, default_value = "127.0.0.1:0")]
        admin: SocketAddr,
    },
    /// The syncer of one physical cluster: copies what is placed on it (label
    /// `state.sluice.dev/<cluster>`) from every logical cluster of the control plane down
    /// to the cluster, and reverts drift.
    Syncer {
        /// Kubeconfig of the control plane; the syncer reads every logical cluster
        /// (`/clusters/*`) through it.
        #[arg(long)]
        control: PathBuf,
        /// This physical cluster's name in the control plane's registry.
        #[arg(long)]
        cluster: String,
        /// Kubeconfig of the physical cluster (default: in-cluster configuration).
        #[arg(long)]
        downstream: Option<PathBuf>,
        /// Where to serve /metrics and /readyz.
        #[arg(long, default_value = "127.0.0.1:0")]
        admin: SocketAddr,
        /// Where to serve the log endpoint the control plane forwards `kubectl logs` to
        /// (TLS with the certificate of the `--control` kubeconfig; only the control plane's
        /// certificate is answered).
        #[arg(long, default_value = "127.0.0.1:0")]
        logs: SocketAddr,
    },
    /// Cordon a physical cluster and move every namespace off it (make-before-break, a
    /// few at a time); `--wait` follows it until nothing runs there.
    Drain {
        /// The cluster's name in the control plane's registry.
        name: String,
        /// Follow the drain until the cluster is empty.
        #[arg(long)]
        wait: bool,
        /// How long `--wait` waits, in seconds.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
        /// Kubeconfig of the control plane.
        #[arg(long, default_value = ".sluice/dev/control.kubeconfig")]
        kubeconfig: PathBuf,
    },
    /// Undo `sluice drain` (or a cordon): the cluster takes new placements again.
    Uncordon {
        name: String,
        #[arg(long, default_value = ".sluice/dev/control.kubeconfig")]
        kubeconfig: PathBuf,
    },
    /// Ask the API server who this process is (SelfSubjectReview), as `kubectl auth
    /// whoami` does: through the in-cluster configuration (a Pod's ServiceAccount token)
    /// with `--in-cluster`, else a kubeconfig (`$KUBECONFIG`, `~/.kube/config`) or the
    /// in-cluster configuration, whichever is there. Prints the user and its groups.
    Whoami {
        #[arg(long)]
        in_cluster: bool,
    },
    /// Print a kubeconfig for a logical cluster of a control plane.
    Kubeconfig {
        #[arg(long, default_value = ".sluice/control")]
        data_dir: PathBuf,
        /// Logical cluster path, e.g. `root:shop`, or `*` for every logical cluster (admin).
        #[arg(long, default_value = "root")]
        workspace: String,
        /// Instead: the identity of the syncer of this physical cluster (a client
        /// certificate that reads only what is placed on it).
        #[arg(long, conflicts_with = "workspace")]
        syncer: Option<String>,
        /// Instead: the identity of a part of the clusterset, `dataplane`, `dns` or `mcs`
        /// (a client certificate that reads the registry of clusters, and Ingresses where
        /// that part serves them).
        #[arg(long, conflicts_with_all = ["workspace", "syncer"])]
        component: Option<sluice_control::rbac::clusterset::Component>,
        /// The server's URL (`https://host:port`), for a directory of `sluice pki`;
        /// by default the `server.url` the server wrote into --data-dir.
        #[arg(long)]
        server: Option<String>,
    },
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
        .unwrap_or_else(|_| "info,hickory_server=warn".into());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

async fn shutdown_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}

/// A kube-rs client from a kubeconfig file (with TCP_NODELAY, see
/// `sluice_kube::client::build`), or `$KUBECONFIG`/`~/.kube/config`.
/// A client from `kubeconfig`; without one, a Pod's own ServiceAccount (in-cluster
/// configuration) where the Pod environment says so and `$KUBECONFIG` does not point
/// elsewhere, else kube's defaults (`$KUBECONFIG`, `~/.kube/config`).
async fn kube_client(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<kube::Client> {
    match kubeconfig {
        Some(p) => Ok(sluice_kube::client::from_kubeconfig(p).await?),
        None if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
            && std::env::var_os("KUBECONFIG").is_none() =>
        {
            Ok(sluice_kube::client::from_kubeconfig_or_in_cluster(None).await?)
        }
        None => Ok(kube::Client::try_default().await?),
    }
}

/// `--busy-poll-us` and `--poll-upstream-us`: one spinner per worker thread.
fn start_busy_poll(after_us: u64, upstream_us: u64, workers: Option<usize>) {
    let threads =
        workers.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
    sluice_dataplane::busy_poll::start(
        std::time::Duration::from_micros(after_us),
        std::time::Duration::from_micros(upstream_us),
        threads,
    );
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    parent::watch();
    let threads = match &cli.command {
        Command::Dns { threads, .. } => *threads,
        Command::Proxy { workers, .. } => *workers,
        _ => None,
    };
    let runtime = match threads {
        Some(1) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?,
        Some(n) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n.max(1))
            .enable_all()
            .build()?,
        None => tokio::runtime::Runtime::new()?,
    };
    runtime.block_on(run(cli))
}

/// Where the control plane keeps objects when not in its data directory: etcd (the
/// flags are kube-apiserver's).
#[derive(clap::Args, Debug)]
struct EtcdArgs {
    /// etcd client URLs, comma-separated; the embedded store when absent.
    #[arg(long, value_delimiter = ',')]
    etcd_servers: Vec<String>,
    /// Key prefix of this installation (replicas of one control plane share it).
    #[arg(long, default_value = "/sluice/")]
    etcd_prefix: String,
    /// CA bundle of etcd's server certificates.
    #[arg(long)]
    etcd_cafile: Option<PathBuf>,
    /// Client certificate for etcd.
    #[arg(long)]
    etcd_certfile: Option<PathBuf>,
    /// Client key for etcd.
    #[arg(long)]
    etcd_keyfile: Option<PathBuf>,
    /// Seconds between compactions of old revisions; 0: never.
    #[arg(long, default_value_t = 300)]
    etcd_compaction_interval: u64,
}

impl EtcdArgs {
    fn config(self) -> Option<sluice_control::storage::EtcdConfig> {
        if self.etcd_servers.is_empty() {
            return None;
        }
        let mut c = sluice_control::storage::EtcdConfig::new(self.etcd_servers);
        c.prefix = self.etcd_prefix;
        c.ca_file = self.etcd_cafile;
        c.cert_file = self.etcd_certfile;
        c.key_file = self.etcd_keyfile;
        c.compaction_interval = (self.etcd_compaction_interval > 0)
            .then(|| std::time::Duration::from_secs(self.etcd_compaction_interval));
        Some(c)
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Control {
            data_dir,
            listen,
            token_auth_file,
            watch_history,
            max_request_bytes,
            enable_priority_and_fairness,
            service_account_min_token_seconds,
            single_cluster,
            service_cidr,
            pod_logs_dir,
            audit_log,
            audit_log_max_mb,
            audit_log_keep,
            etcd,
            pki_dir,
            tls_san,
        } => {
            init_tracing();
            let mut config = sluice_control::Config::new(data_dir, listen);
            config.etcd = etcd.config();
            config.pki_dir = pki_dir;
            config.tls_sans = tls_san;
            config.audit = audit_log.map(|path| sluice_control::audit::AuditConfig {
                path,
                max_bytes: audit_log_max_mb.saturating_mul(1024 * 1024),
                keep: audit_log_keep,
            });
            if single_cluster {
                config.single_cluster = Some(service_cidr.parse().context("--service-cidr")?);
            }
            config.pod_logs_dir = pod_logs_dir;
            config.token_file = token_auth_file;
            config.watch_history = watch_history;
            config.limits.max_body = max_request_bytes;
            config.limits.fairness.enabled = enable_priority_and_fairness;
            config.limits.min_token_seconds = service_account_min_token_seconds;
            let bound = sluice_control::build(config)
                .await
                .context("starting the control plane")?;
            println!(
                "serving {} (kubeconfig: {})",
                bound.url,
                bound.admin_kubeconfig.display()
            );
            shutdown_signal().await?;
            tracing::info!("shutting down");
            bound.shutdown().await;
        }
        Command::Demo {
            state,
            keep,
            rate,
            steady,
        } => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let ok = demo::run(demo::DemoConfig {
                state,
                keep,
                rate,
                steady: std::time::Duration::from_secs(steady),
            })
            .await?;
            if !ok {
                std::process::exit(1);
            }
        }
        Command::Dev {
            command:
                DevCommand::Up {
                    state,
                    clusters,
                    verbose,
                    builtin_images_only,
                    bare,
                },
        } => {
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
        }
        Command::Node {
            kubeconfig,
            cluster,
            index,
            logs_dir,
            max_pods,
            builtin_images_only,
            dns,
            admin,
        } => {
            init_tracing();
            let _ = rustls::crypto::ring::default_provider().install_default();
            let client = kube_client(Some(&kubeconfig)).await?;
            let cfg = sluice_local::node::NodeConfig {
                node_name: format!("{cluster}-node"),
                cluster,
                index,
                logs_dir,
                sluice_bin: std::env::current_exe()?,
                max_pods,
                builtin_images_only,
                dns,
                metrics: Default::default(),
                api: match sluice_local::node::service_account::ApiEndpoint::from_kubeconfig(
                    &kubeconfig,
                ) {
                    Ok(api) => Some(std::sync::Arc::new(api)),
                    Err(e) => {
                        tracing::warn!(error = %e, "pods get no ServiceAccount credentials");
                        None
                    }
                },
            };
            let (tx, rx) = tokio::sync::watch::channel(false);
            let admin =
                sluice_local::node::admin::serve(admin, cfg.metrics.clone(), rx.clone()).await?;
            tracing::info!(%admin, "node agent admin endpoint (/metrics, /readyz)");
            let node = tokio::spawn(sluice_local::node::run(client.clone(), cfg, rx.clone()));
            let controllers = tokio::spawn(sluice_local::controllers::run(client, rx));
            shutdown_signal().await?;
            let _ = tx.send(true);
            node.await??;
            controllers.await??;
        }
        Command::Loadgen {
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
        } => {
            use sluice_local::loadgen::{LoadgenConfig, Targets, run};
            let _ = rustls::crypto::ring::default_provider().install_default();
            let targets = match service {
                Some(svc) => {
                    let (namespace, name) =
                        svc.split_once('/').context("--service is namespace/name")?;
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
        }
        Command::Echo => {
            let bound =
                sluice_local::echo::build(sluice_local::echo::EchoConfig::from_env()?).await?;
            println!("echo: http {} tcp {}", bound.http, bound.tcp);
            shutdown_signal().await?;
            bound.shutdown().await;
        }
        Command::Dns {
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
        } => {
            init_tracing();
            let _ = rustls::crypto::ring::default_provider().install_default();
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
        }
        Command::Proxy {
            kubeconfig,
            in_cluster,
            cluster: Some(cluster),
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
        } if kubeconfig.is_some() || in_cluster => {
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
        }
        Command::Proxy {
            config,
            listen,
            upstream,
            protocol,
            workers,
            busy_poll_us,
            poll_upstream_us,
            admin,
            ..
        } => {
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
        }
        Command::Tunnel {
            command:
                TunnelCommand::Certs {
                    clusterset,
                    clusters,
                    out,
                    days,
                },
        } => {
            for id in sluice_dataplane::tunnel::certs::issue(&out, &clusterset, &clusters, days)? {
                println!("{}: {id}", id.cluster());
            }
        }
        Command::Mcs {
            command: None,
            control,
            kubeconfigs,
            admin,
        } => {
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
        }
        Command::Mcs {
            command: Some(McsCommand::Crds),
            ..
        } => {
            let list = serde_json::json!({
                "apiVersion": "v1",
                "kind": "List",
                "items": sluice_api::mcs::crds(),
            });
            println!("{}", serde_json::to_string_pretty(&list)?);
        }
        Command::Syncer {
            control,
            cluster,
            downstream,
            admin,
            logs,
        } => {
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
                    let bound = sluice_syncer::logs::serve(
                        logs,
                        downstream.clone(),
                        &identity,
                        stopped.clone(),
                    )
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
                },
                stopped,
            ));
            shutdown_signal().await?;
            let _ = stop.send(true);
            run.await??;
        }
        Command::Drain {
            name,
            wait,
            timeout,
            kubeconfig,
        } => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            drain::drain(
                &kubeconfig,
                &name,
                wait,
                std::time::Duration::from_secs(timeout),
            )
            .await?;
        }
        Command::Uncordon { name, kubeconfig } => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            drain::uncordon(&kubeconfig, &name).await?;
        }
        Command::Whoami { in_cluster } => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let config = if in_cluster {
                kube::Config::incluster().context("in-cluster configuration")?
            } else {
                kube::Config::infer()
                    .await
                    .context("client configuration")?
            };
            let client = kube::Client::try_from(config)?;
            let review: k8s_openapi::api::authentication::v1::SelfSubjectReview = client
                .request(
                    http::Request::post("/apis/authentication.k8s.io/v1/selfsubjectreviews")
                        .header("content-type", "application/json")
                        .body(
                            br#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#
                                .to_vec(),
                        )?,
                )
                .await
                .context("SelfSubjectReview")?;
            let info = review.status.and_then(|s| s.user_info).unwrap_or_default();
            println!(
                "{} {}",
                info.username.unwrap_or_default(),
                info.groups.unwrap_or_default().join(",")
            );
        }
        Command::Pki { out } => {
            sluice_control::pki::Pki::create_credentials(&out)?;
            for f in sluice_control::pki::CREDENTIAL_FILES {
                println!("{}", out.join(f).display());
            }
        }
        Command::Kubeconfig {
            data_dir,
            workspace,
            syncer,
            component,
            server,
        } => {
            let source = sluice_control::KubeconfigSource {
                dir: &data_dir,
                server: server.as_deref(),
            };
            match (syncer, component) {
                (Some(cluster), _) => {
                    let cluster = sluice_api::ClusterName::new(cluster);
                    print!("{}", sluice_control::syncer_kubeconfig(&source, &cluster)?);
                }
                (None, Some(part)) => {
                    print!("{}", sluice_control::component_kubeconfig(&source, part)?);
                }
                (None, None) => {
                    let path: sluice_control::KubeconfigScope =
                        workspace.parse().context("--workspace")?;
                    print!("{}", sluice_control::kubeconfig_for(&source, &path)?);
                }
            }
        }
    }
    Ok(())
}
