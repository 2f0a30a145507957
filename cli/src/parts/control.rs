//! `sluice control`: the logical-cluster API server.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;

use crate::process::{init_tracing, shutdown_signal};

/// The arguments of `sluice control`.
#[derive(clap::Args)]
pub struct Args {
    /// Where storage, the CA, certificates and kubeconfigs live.
    #[arg(long, default_value = ".sluice/control")]
    pub data_dir: PathBuf,
    /// Address to serve HTTPS on.
    #[arg(long, default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,
    /// Static token file: `token,user,uid[,"group1,group2"]` per line.
    #[arg(long)]
    pub token_auth_file: Option<PathBuf>,
    /// Watch events kept per resource type for watches resuming from a revision.
    #[arg(long, default_value_t = 10_000)]
    pub watch_history: usize,
    /// Largest request body in bytes.
    #[arg(long, default_value_t = 3 * 1024 * 1024)]
    pub max_request_bytes: usize,
    /// Queue tenants' requests fairly (256 slots, 32 per logical cluster, 429 after a
    /// 4 s wait) while the system's parts go first; `false` runs every request at once.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub enable_priority_and_fairness: bool,
    /// Shortest ServiceAccount token a TokenRequest may ask for, in seconds
    /// (kube-apiserver's 600 unless lowered, e.g. to test expiry).
    #[arg(long, default_value_t = 600)]
    pub service_account_min_token_seconds: i64,
    /// Serve one physical cluster (Service ClusterIP allocation, the `kubernetes`
    /// Service; no logical-cluster annotation on objects).
    #[arg(long)]
    pub single_cluster: bool,
    /// Service ClusterIP range in single-cluster mode.
    #[arg(long, default_value = "10.96.0.0/16")]
    pub service_cidr: String,
    /// Container logs of a local cluster's node agent, served as `kubectl logs`.
    #[arg(long)]
    pub pod_logs_dir: Option<PathBuf>,
    /// The Unix socket of a local cluster's node agent streaming endpoint (its
    /// `--streaming-socket`): `kubectl exec` is proxied there.
    #[arg(long)]
    pub node_streaming: Option<PathBuf>,
    /// Write one JSON line per request here (user, verb, logical cluster, resource,
    /// name, code, latency); off when absent.
    #[arg(long)]
    pub audit_log: Option<PathBuf>,
    /// Rotate the audit log when it would grow past this many MiB.
    #[arg(long, default_value_t = 100)]
    pub audit_log_max_mb: u64,
    /// Rotated audit logs kept (`PATH.1` … `PATH.N`).
    #[arg(long, default_value_t = 5)]
    pub audit_log_keep: usize,
    #[command(flatten)]
    pub etcd: EtcdArgs,
    /// Read the CA, tokens and signing key from this directory (made by `sluice pki`,
    /// e.g. a mounted Secret) and never write to it; else they live in --data-dir.
    #[arg(long)]
    pub pki_dir: Option<PathBuf>,
    /// More names or addresses for the serving certificate (a Service's DNS names, a
    /// load balancer's address); comma-separated or repeated.
    #[arg(long, value_delimiter = ',')]
    pub tls_san: Vec<String>,
}

/// Where the control plane keeps objects when not in its data directory: etcd (the
/// flags are kube-apiserver's).
#[derive(clap::Args, Debug)]
pub struct EtcdArgs {
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
    /// The etcd configuration, or `None` for the embedded store.
    pub fn config(self) -> Option<sluice_control::storage::EtcdConfig> {
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

/// Serve until SIGINT or SIGTERM, then shut down.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let Args {
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
        node_streaming,
        audit_log,
        audit_log_max_mb,
        audit_log_keep,
        etcd,
        pki_dir,
        tls_san,
    } = args;
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
    config.node_streaming = node_streaming;
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
    Ok(())
}
