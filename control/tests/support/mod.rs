//! In-process test server (`build(config) -> Bound` on port 0) and kube-rs clients for it.

#![allow(dead_code)]

use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use sluice_control::{Bound, Config};

pub struct TestServer {
    pub bound: Bound,
    pub dir: tempfile::TempDir,
}

impl TestServer {
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(configure: impl FnOnce(&mut Config)) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = Config::new(dir.path(), "127.0.0.1:0".parse().expect("addr"));
        configure(&mut config);
        let bound = sluice_control::build(config).await.expect("start server");
        Self { bound, dir }
    }

    /// A kube-rs client for logical cluster `root`.
    pub async fn client(&self) -> kube::Client {
        client_for(&self.bound.admin_kubeconfig, None).await
    }

    /// A kube-rs client for another logical cluster (or `*`).
    pub async fn client_for_cluster(&self, cluster: &str) -> kube::Client {
        client_for(
            &self.bound.admin_kubeconfig,
            Some(&format!("{}/clusters/{cluster}", self.bound.url)),
        )
        .await
    }

    pub fn revision(&self) -> u64 {
        self.bound.state.store.revision().0
    }
}

pub async fn client_for(kubeconfig: &std::path::Path, server: Option<&str>) -> kube::Client {
    let kc = Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kube config");
    if let Some(s) = server {
        config.cluster_url = s.parse().expect("url");
    }
    config.read_timeout = Some(Duration::from_secs(60));
    kube::Client::try_from(config).expect("client")
}

/// Poll an async condition until true or `timeout` passes.
pub async fn eventually<F, Fut>(timeout: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = std::time::Instant::now();
    while start.elapsed() < timeout {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f().await
}
