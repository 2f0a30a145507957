//! kube-rs clients for a test's API server, from the kubeconfig it wrote.

use std::path::Path;
use std::time::Duration;

/// The kubeconfig's configuration; `server` overrides its URL (another logical cluster:
/// `<url>/clusters/<path>`). Reads wait up to 60 s: a busy CI machine is slow, not broken.
pub async fn config(kubeconfig: &Path, server: Option<&str>) -> kube::Config {
    let mut config = sluice_kube::client::config_from_kubeconfig(kubeconfig, server)
        .await
        .unwrap_or_else(|e| panic!("kubeconfig {}: {e}", kubeconfig.display()));
    config.read_timeout = Some(Duration::from_secs(60));
    config
}

/// A client for the kubeconfig's API server (see [`config`]).
pub async fn client(kubeconfig: &Path, server: Option<&str>) -> kube::Client {
    kube::Client::try_from(config(kubeconfig, server).await)
        .unwrap_or_else(|e| panic!("client for {}: {e}", kubeconfig.display()))
}
