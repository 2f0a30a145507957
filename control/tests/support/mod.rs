//! In-process test server (`build(config) -> Bound` on port 0) and kube-rs clients for it.

#![allow(dead_code, unused_imports)]

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
        if sluice_test_support::etcd::enabled() {
            let mut etcd = sluice_control::storage::EtcdConfig::new(vec![
                sluice_test_support::etcd::shared().url.clone(),
            ]);
            etcd.prefix = sluice_test_support::etcd::prefix_for(dir.path());
            config.etcd = Some(etcd);
        }
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

pub use sluice_test_support::client::client as client_for;
pub use sluice_test_support::poll::eventually;
