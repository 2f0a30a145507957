//! `sluice`: one binary, a subcommand per part. Argument parsing only; each part is a
//! library with its own `build`/`run`.

use std::net::SocketAddr;
use std::path::PathBuf;

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
enum Command {
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
        /// Serve one physical cluster (Service ClusterIP allocation, `default` and
        /// `kube-system` namespaces, the `kubernetes` Service).
        #[arg(long)]
        single_cluster: bool,
        /// Service ClusterIP range in single-cluster mode.
        #[arg(long, default_value = "10.96.0.0/16")]
        service_cidr: String,
    },
    /// Print a kubeconfig for a logical cluster of a control plane.
    Kubeconfig {
        #[arg(long, default_value = ".sluice/control")]
        data_dir: PathBuf,
        /// Logical cluster path, e.g. `root:shop`, or `*` for every logical cluster (admin).
        #[arg(long, default_value = "root")]
        workspace: String,
    },
}

fn init_tracing() {
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG").unwrap_or_else(|_| "info".into());
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Control {
            data_dir,
            listen,
            token_auth_file,
            watch_history,
            max_request_bytes,
            single_cluster,
            service_cidr,
        } => {
            init_tracing();
            let mut config = sluice_control::Config::new(data_dir, listen);
            if single_cluster {
                config.single_cluster = Some(service_cidr.parse().context("--service-cidr")?);
            }
            config.token_file = token_auth_file;
            config.watch_history = watch_history;
            config.limits.max_body = max_request_bytes;
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
        Command::Kubeconfig {
            data_dir,
            workspace,
        } => {
            let path: sluice_control::KubeconfigScope = workspace.parse().context("--workspace")?;
            print!("{}", sluice_control::kubeconfig_for(&data_dir, &path)?);
        }
    }
    Ok(())
}
