#![allow(clippy::unwrap_used)]
//! A controller written with kube-runtime (`Controller` + reflector) works unchanged
//! against a logical cluster: it reconciles a custom resource into ConfigMaps
//! (issue: control semantics, done-when 2).

mod support;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;
use support::{TestServer, eventually};

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct ReconcileError(#[from] kube::Error);

struct Ctx {
    client: kube::Client,
}

/// Desired state: ConfigMap `<widget>-config` with the widget's spec, owned by the widget.
async fn reconcile(widget: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let ns = widget.namespace().unwrap_or_default();
    let owner = widget
        .controller_owner_ref(&ApiResource::from_gvk_with_plural(&gvk(), "widgets"))
        .unwrap();
    let cm: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("{}-config", widget.name_any()), "ownerReferences": [owner]},
        "data": {"size": widget.data["spec"]["size"].to_string(), "color": widget.data["spec"]["color"].as_str().unwrap_or("")},
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(ctx.client.clone(), &ns)
        .patch(
            &cm.metadata.name.clone().unwrap(),
            &PatchParams::apply("widget-controller").force(),
            &Patch::Apply(&cm),
        )
        .await?;
    Ok(Action::requeue(Duration::from_secs(300)))
}

fn error_policy(_: Arc<DynamicObject>, _: &ReconcileError, _: Arc<Ctx>) -> Action {
    Action::requeue(Duration::from_millis(200))
}

fn gvk() -> GroupVersionKind {
    GroupVersionKind::gvk("example.com", "v1", "Widget")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_runtime_controller_in_a_logical_cluster() {
    let server = TestServer::start().await;
    let root = server.client().await;
    let ws = Api::<DynamicObject>::all_with(
        root.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("sluice.dev", "v1alpha1", "Workspace"),
            "workspaces",
        ),
    );
    ws.create(&PostParams::default(), &serde_json::from_value(json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "Workspace", "metadata": {"name": "team"}})).unwrap())
        .await
        .unwrap();
    let client = server.client_for_cluster("root:team").await;
    let crds = Api::<DynamicObject>::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    crds.create(&PostParams::default(), &serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced", "names": {"plural": "widgets", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                     "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}, "color": {"type": "string", "default": "blue"}}}}}}}]}
    })).unwrap()).await.unwrap();
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "app"}})).unwrap(),
        )
        .await
        .unwrap();

    let ar = ApiResource::from_gvk_with_plural(&gvk(), "widgets");
    let widgets = Api::<DynamicObject>::namespaced_with(client.clone(), "app", &ar);
    let cms = Api::<ConfigMap>::namespaced(client.clone(), "app");
    let controller = Controller::new_with(
        Api::<DynamicObject>::all_with(client.clone(), &ar),
        watcher::Config::default(),
        ar.clone(),
    )
    .owns(
        Api::<ConfigMap>::all(client.clone()),
        watcher::Config::default(),
    )
    .run(
        reconcile,
        error_policy,
        Arc::new(Ctx {
            client: client.clone(),
        }),
    )
    .for_each(|_| async {});
    let task = tokio::spawn(controller);

    for (name, size) in [("a", 1), ("b", 2), ("c", 3)] {
        widgets
            .create(&PostParams::default(), &serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}, "spec": {"size": size}})).unwrap())
            .await
            .unwrap();
    }
    assert!(
        eventually(Duration::from_secs(10), || async {
            cms.list(&Default::default())
                .await
                .map(|l| l.items.len() == 3)
                .unwrap_or(false)
        })
        .await,
        "controller did not create the ConfigMaps"
    );
    let a = cms.get("a-config").await.unwrap();
    assert_eq!(
        a.data.unwrap()["color"],
        "blue",
        "the CRD's default reached the controller"
    );

    // A change to a widget is reconciled.
    widgets
        .patch(
            "b",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 20}})),
        )
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            cms.get("b-config")
                .await
                .map(|c| c.data.unwrap()["size"] == "20")
                .unwrap_or(false)
        })
        .await,
        "update not reconciled"
    );
    // A deleted ConfigMap is recreated (the controller owns ConfigMaps).
    cms.delete("c-config", &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            cms.get_opt("c-config")
                .await
                .map(|c| c.is_some())
                .unwrap_or(false)
        })
        .await
    );
    // Deleting a widget garbage-collects its ConfigMap through the owner reference.
    widgets.delete("a", &DeleteParams::default()).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            cms.get_opt("a-config")
                .await
                .map(|c| c.is_none())
                .unwrap_or(false)
        })
        .await
    );
    // Nothing leaked into root.
    assert!(
        Api::<ConfigMap>::namespaced(root.clone(), "app")
            .list(&Default::default())
            .await
            .map(|l| l.items.is_empty())
            .unwrap_or(true)
    );
    task.abort();
    server.bound.shutdown().await;
}
