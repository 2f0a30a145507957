//! What every part of the binary sets up the same way: logging, the stop signals, and a
//! Kubernetes client from a kubeconfig or a Pod's ServiceAccount.

/// Log to stderr, filtered by `SLUICE_LOG` (default `info`).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
        .unwrap_or_else(|_| "info,hickory_server=warn".into());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

/// Until SIGTERM or SIGINT.
pub async fn shutdown_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}

/// A kube-rs client from `kubeconfig` (with TCP_NODELAY, see `sluice_kube::client::build`); without one, a Pod's own ServiceAccount (in-cluster
/// configuration) where the Pod environment says so and `$KUBECONFIG` does not point
/// elsewhere, else kube's defaults (`$KUBECONFIG`, `~/.kube/config`).
pub async fn kube_client(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<kube::Client> {
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
pub fn start_busy_poll(after_us: u64, upstream_us: u64, workers: Option<usize>) {
    let threads =
        workers.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
    sluice_dataplane::busy_poll::start(
        std::time::Duration::from_micros(after_us),
        std::time::Duration::from_micros(upstream_us),
        threads,
    );
}
