#![allow(clippy::unwrap_used)]
//! The syncer between a real control plane and a real physical cluster's API server, both
//! in process: what is placed on the cluster appears there in its downstream namespace,
//! what is not placed does not, drift is reverted, and unplacing or deleting upstream
//! removes it downstream.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use sluice_api::sync::downstream_namespace;
use sluice_api::{ClusterName, LogicalClusterPath};
use sluice_test_support::client::client;
use sluice_test_support::poll::eventually;

const WITHIN: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placed_objects_are_synced_kept_and_removed() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let up_dir = tempfile::tempdir().unwrap();
    let control = sluice_control::build(sluice_control::Config::new(
        up_dir.path(),
        "127.0.0.1:0".parse().unwrap(),
    ))
    .await
    .unwrap();
    let down_dir = tempfile::tempdir().unwrap();
    let mut down_config =
        sluice_control::Config::new(down_dir.path(), "127.0.0.1:0".parse().unwrap());
    down_config.single_cluster = Some("127.41.0.0/16".parse().unwrap());
    let east = sluice_control::build(down_config).await.unwrap();

    let root = client(&control.admin_kubeconfig, None).await;
    let upstream = sluice_test_support::client::config(&control.admin_kubeconfig, None).await;
    let downstream = client(&east.admin_kubeconfig, None).await;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let syncer = tokio::spawn(sluice_syncer::controller::run(
        sluice_syncer::controller::Config {
            upstream,
            downstream: downstream.clone(),
            cluster: ClusterName::new("east"),
        },
        stopped,
    ));

    let cms: Api<ConfigMap> = Api::namespaced(root.clone(), "default");
    let svcs: Api<Service> = Api::namespaced(root.clone(), "default");
    let placed = json!({"state.sluice.dev/east": "Sync", "app": "web"});
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "settings", "labels": placed},
            "data": {"mode": "fast"},
        }))
        .unwrap(),
    )
    .await
    .unwrap();
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "other"}, "data": {"a": "b"}}))
            .unwrap(),
    )
    .await
    .unwrap();
    let up_svc = svcs
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "web", "labels": placed},
                "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
            }))
            .unwrap(),
        )
        .await
        .unwrap();

    let ns = downstream_namespace(&LogicalClusterPath::root(), "default");
    let down_ns: Api<Namespace> = Api::all(downstream.clone());
    let down_cms: Api<ConfigMap> = Api::namespaced(downstream.clone(), &ns);
    let down_svcs: Api<Service> = Api::namespaced(downstream.clone(), &ns);
    let data = |cm: Option<ConfigMap>| cm.and_then(|c| c.data).and_then(|d| d.get("mode").cloned());
    assert!(
        eventually(WITHIN, || async {
            data(down_cms.get_opt("settings").await.ok().flatten()).as_deref() == Some("fast")
        })
        .await,
        "the placed ConfigMap reached {ns}"
    );
    let namespace = down_ns.get(&ns).await.unwrap();
    assert_eq!(
        namespace.metadata.labels.unwrap()["sluice.dev/logical-cluster"],
        "root"
    );
    assert!(
        eventually(WITHIN, || async {
            down_svcs.get_opt("web").await.ok().flatten().is_some()
        })
        .await
    );
    let svc = down_svcs.get("web").await.unwrap();
    let ip = svc.spec.unwrap().cluster_ip.unwrap();
    assert!(ip.starts_with("127.41."), "allocated downstream: {ip}");
    assert_ne!(Some(ip), up_svc.spec.unwrap().cluster_ip);
    assert!(
        down_cms.get_opt("other").await.unwrap().is_none(),
        "not placed"
    );

    // Drift downstream is reverted.
    down_cms
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"mode": "slow"}})),
        )
        .await
        .unwrap();
    assert!(
        eventually(WITHIN, || async {
            data(down_cms.get_opt("settings").await.ok().flatten()).as_deref() == Some("fast")
        })
        .await,
        "drift reverted"
    );

    // An upstream change travels.
    cms.patch(
        "settings",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"mode": "faster"}})),
    )
    .await
    .unwrap();
    assert!(
        eventually(WITHIN, || async {
            data(down_cms.get_opt("settings").await.ok().flatten()).as_deref() == Some("faster")
        })
        .await
    );

    // Unplaced: gone downstream. Deleted upstream: gone downstream.
    cms.patch(
        "settings",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"state.sluice.dev/east": null}}})),
    )
    .await
    .unwrap();
    svcs.delete("web", &DeleteParams::default()).await.unwrap();
    assert!(
        eventually(WITHIN, || async {
            matches!(down_cms.get_opt("settings").await, Ok(None))
                && matches!(down_svcs.get_opt("web").await, Ok(None))
        })
        .await,
        "unplaced and deleted objects removed downstream"
    );
    // Nothing is placed in the namespace any more: it goes too.
    assert!(
        eventually(WITHIN, || async {
            match down_ns.get_opt(&ns).await {
                Ok(None) => true,
                Ok(Some(n)) => n.metadata.deletion_timestamp.is_some(),
                Err(_) => false,
            }
        })
        .await,
        "the emptied namespace removed downstream"
    );

    let _ = stop.send(true);
    syncer.await.unwrap().unwrap();
}
