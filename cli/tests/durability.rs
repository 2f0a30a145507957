#![allow(clippy::unwrap_used)]
//! Every acknowledged write survives `kill -9`, and revisions keep increasing after a
//! restart (issue: control, done-when 5).

use crate::support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use support::Control;

async fn client(kubeconfig: &std::path::Path) -> kube::Client {
    let mut config = sluice_test_support::client::config(kubeconfig, None).await;
    config.connect_timeout = Some(Duration::from_secs(2));
    config.read_timeout = Some(Duration::from_secs(5));
    kube::Client::try_from(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_kill_9() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let control = Control::start(dir.path(), &[]);
    let c = client(&control.kubeconfig).await;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "d"}})).unwrap();
    Api::<Namespace>::all(c.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();

    // Four writers create objects as fast as they are acknowledged.
    let acked: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let mut writers = Vec::new();
    for w in 0..4 {
        let api: Api<ConfigMap> = Api::namespaced(c.clone(), "d");
        let acked = acked.clone();
        writers.push(tokio::spawn(async move {
            for i in 0.. {
                let name = format!("w{w}-{i}");
                let cm: ConfigMap = serde_json::from_value(
                    json!({"metadata": {"name": name}, "data": {"i": i.to_string()}}),
                )
                .unwrap();
                match api.create(&PostParams::default(), &cm).await {
                    Ok(created) => {
                        let rv = created.metadata.resource_version.unwrap().parse().unwrap();
                        acked.lock().unwrap().insert(name, rv);
                    }
                    Err(_) => return,
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    control.kill9();
    for w in writers {
        let _ = w.await;
    }
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() > 50,
        "too few writes before the kill: {}",
        acked.len()
    );

    let control = Control::start(dir.path(), &[]);
    let c = client(&control.kubeconfig).await;
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), "d");
    let stored: BTreeMap<String, u64> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|cm| {
            (
                cm.metadata.name.unwrap(),
                cm.metadata.resource_version.unwrap().parse().unwrap(),
            )
        })
        .collect();
    for (name, rv) in &acked {
        assert_eq!(
            stored.get(name),
            Some(rv),
            "acknowledged write {name}@{rv} lost or changed"
        );
    }
    let max = acked.values().max().copied().unwrap_or(0);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "after-restart"}})).unwrap();
    let after: u64 = api
        .create(&PostParams::default(), &cm)
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap()
        .parse()
        .unwrap();
    assert!(after > max, "revision went backwards: {after} <= {max}");
    eprintln!(
        "{} acknowledged writes survived kill -9; revision {max} -> {after}",
        acked.len()
    );
}
