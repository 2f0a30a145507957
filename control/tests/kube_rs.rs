#![allow(clippy::unwrap_used)]
//! kube-rs, a client we did not write, against the server: typed CRUD, and a
//! watcher/reflector that stays exactly in sync over 1,000 concurrent changes
//! (issue: control, done-when 3).

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::json;
use support::{TestServer, eventually};

async fn namespace(client: &kube::Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_crud() {
    let server = TestServer::start().await;
    let client = server.client().await;
    namespace(&client, "shop").await;
    let api: Api<Deployment> = Api::namespaced(client.clone(), "shop");
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "sluice/echo"}]}}}
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &d).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert!(created.metadata.uid.is_some() && created.metadata.creation_timestamp.is_some());

    let got = api.get("web").await.unwrap();
    assert_eq!(
        got.metadata.resource_version,
        created.metadata.resource_version
    );

    let mut changed = got.clone();
    changed.spec.replicas = Some(4);
    let replaced = api
        .replace("web", &PostParams::default(), &changed)
        .await
        .unwrap();
    assert_eq!(replaced.metadata.generation, Some(2));
    // Replacing with the stale object is a Conflict.
    let err = api
        .replace("web", &PostParams::default(), &changed)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409 && s.reason == "Conflict"),
        "{err:?}"
    );

    let patched = api
        .patch("web", &PatchParams::default(), &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "sluice/echo:2"}]}}}})))
        .await
        .unwrap();
    assert_eq!(
        patched.spec.template.spec.unwrap().containers[0]
            .image
            .as_deref(),
        Some("sluice/echo:2")
    );
    let scale = api.get_scale("web").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(4));
    let listed = api
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);

    // Paging with limit/continue returns every object exactly once.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "shop");
    for i in 0..25 {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": format!("cm-{i:02}")}})).unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    let mut seen = Vec::new();
    let mut lp = ListParams::default().limit(10);
    loop {
        let page = cms.list(&lp).await.unwrap();
        seen.extend(page.items.iter().map(|c| c.metadata.name.clone().unwrap()));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp = lp.continue_token(&c),
            None => break,
        }
    }
    assert_eq!(seen.len(), 25);

    api.delete("web", &DeleteParams::default()).await.unwrap();
    let err = api.get("web").await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 404 && s.message == "deployments.apps \"web\" not found"),
        "{err:?}"
    );

    // Finalizers hold deletion until removed.
    let held: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "held", "finalizers": ["sluice.dev/test"]}}),
    )
    .unwrap();
    cms.create(&PostParams::default(), &held).await.unwrap();
    cms.delete("held", &DeleteParams::default()).await.unwrap();
    let still = cms.get("held").await.unwrap();
    assert!(still.metadata.deletion_timestamp.is_some());
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(cms.get_opt("held").await.unwrap().is_none());
    server.bound.shutdown().await;
}

/// Names and resourceVersions of every ConfigMap in `shop`, as the server has them.
async fn server_state(api: &Api<ConfigMap>) -> BTreeMap<String, String> {
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| {
            (
                c.metadata.name.unwrap(),
                c.metadata.resource_version.unwrap(),
            )
        })
        .collect()
}

async fn reflector_stays_in_sync(streaming: bool) {
    let server = TestServer::start().await;
    let client = server.client().await;
    namespace(&client, "shop").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "shop");
    // Some objects exist before the watch starts.
    for i in 0..50 {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": format!("pre-{i}")}})).unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
    let (reader, writer) = reflector::store::<ConfigMap>();
    let mut config = watcher::Config::default();
    if streaming {
        config = config.streaming_lists();
    }
    let stream = reflector(writer, watcher(api.clone(), config)).applied_objects();
    let task = tokio::spawn(async move {
        let _ = stream.try_for_each(|_| async { Ok(()) }).await;
    });
    tokio::time::timeout(Duration::from_secs(10), reader.wait_until_ready())
        .await
        .expect("reflector ready")
        .unwrap();

    // 1,000 changes from 10 concurrent writers: creates, updates, deletes.
    let mut writers = Vec::new();
    for w in 0..10 {
        let api = api.clone();
        writers.push(tokio::spawn(async move {
            for i in 0..40 {
                let name = format!("w{w}-{i}");
                let cm: ConfigMap =
                    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"v": "0"}}))
                        .unwrap();
                api.create(&PostParams::default(), &cm).await.unwrap();
                api.patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"data": {"v": "1"}})),
                )
                .await
                .unwrap();
                if i % 2 == 0 {
                    api.delete(&name, &DeleteParams::default()).await.unwrap();
                }
            }
            for i in 0..5 {
                let name = format!("pre-{}", w * 5 + i);
                api.delete(&name, &DeleteParams::default()).await.unwrap();
            }
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    let expected = server_state(&api).await;
    assert_eq!(
        expected.len(),
        200,
        "10 writers × 20 surviving objects, all pre-existing deleted"
    );
    let in_sync = eventually(Duration::from_secs(10), || {
        let reader = reader.clone();
        let expected = expected.clone();
        async move {
            let cached: BTreeMap<String, String> = reader
                .state()
                .iter()
                .map(|c| {
                    (
                        c.metadata.name.clone().unwrap(),
                        c.metadata.resource_version.clone().unwrap(),
                    )
                })
                .collect();
            cached == expected
        }
    })
    .await;
    assert!(
        in_sync,
        "reflector diverged from the server (streaming={streaming}): {} cached vs {} stored",
        reader.state().len(),
        expected.len()
    );
    task.abort();
    server.bound.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflector_in_sync_list_then_watch() {
    reflector_stays_in_sync(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflector_in_sync_with_send_initial_events() {
    reflector_stays_in_sync(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_events_in_order_and_wildcard() {
    let server = TestServer::start().await;
    let client = server.client().await;
    namespace(&client, "shop").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "shop");
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut events = api
        .watch(&kube::api::WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "a"}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "v"}})),
    )
    .await
    .unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let mut kinds = Vec::new();
    while kinds.len() < 3 {
        match tokio::time::timeout(Duration::from_secs(5), events.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            kube::api::WatchEvent::Added(_) => kinds.push("ADDED"),
            kube::api::WatchEvent::Modified(_) => kinds.push("MODIFIED"),
            kube::api::WatchEvent::Deleted(_) => kinds.push("DELETED"),
            _ => {}
        }
    }
    assert_eq!(kinds, ["ADDED", "MODIFIED", "DELETED"]);

    // A wildcard client lists across logical clusters; a child cluster needs its workspace.
    let ws = Api::<kube::api::DynamicObject>::all_with(
        client.clone(),
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("sluice.dev", "v1alpha1", "Workspace"),
            "workspaces",
        ),
    );
    let child = server.client_for_cluster("root:team").await;
    assert!(
        Api::<Namespace>::all(child.clone())
            .list(&ListParams::default())
            .await
            .is_err()
    );
    ws.create(&PostParams::default(), &serde_json::from_value(json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "Workspace", "metadata": {"name": "team"}})).unwrap())
        .await
        .unwrap();
    namespace(&child, "shop").await;
    let wildcard = server.client_for_cluster("*").await;
    let all = Api::<Namespace>::all(wildcard)
        .list(&ListParams::default())
        .await
        .unwrap();
    // Every logical cluster also has the system namespaces (default, kube-system, ...).
    let mut clusters: Vec<(String, String)> = all
        .items
        .iter()
        .map(|n| {
            (
                n.metadata.annotations.as_ref().unwrap()["sluice.dev/logical-cluster"].clone(),
                n.metadata.name.clone().unwrap(),
            )
        })
        .filter(|(_, name)| !name.starts_with("kube-") && name != "default")
        .collect();
    clusters.sort();
    assert_eq!(
        clusters,
        [
            ("root".to_string(), "shop".to_string()),
            ("root:team".to_string(), "shop".to_string())
        ]
    );
    assert_eq!(all.items.len(), 2 + 2 * 4);
    server.bound.shutdown().await;
}

/// client-go's typed clients (Helm's release storage among them) send DeleteOptions in
/// protobuf: they are read, not refused as malformed JSON, on a delete and a
/// deletecollection alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_options_in_protobuf() {
    use sluice_control::codec::wire::Message;
    let server = TestServer::start().await;
    let client = server.client().await;
    namespace(&client, "pb").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "pb");
    for name in ["a", "b"] {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": {"set": "x"}}}))
                .unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    // metav1.DeleteOptions: preconditions = 2 (uid = 1), dryRun = 5, in the envelope.
    let envelope = |options: Message| -> Vec<u8> {
        let mut type_meta = Message::new();
        type_meta.string(1, "v1").string(2, "DeleteOptions");
        let mut unknown = Message::new();
        unknown
            .message(1, type_meta)
            .bytes(2, &options.into_bytes());
        let mut body = b"k8s\0".to_vec();
        body.extend(unknown.into_bytes());
        body
    };
    let send = |method: &str, path: &str, body: Vec<u8>| {
        http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/vnd.kubernetes.protobuf")
            .body(body)
            .unwrap()
    };
    let path = "/api/v1/namespaces/pb/configmaps";

    let mut dry = Message::new();
    dry.string(5, "All");
    client
        .request_text(send("DELETE", &format!("{path}/a"), envelope(dry)))
        .await
        .unwrap();
    assert!(
        cms.get_opt("a").await.unwrap().is_some(),
        "a dry run deleted"
    );

    let mut uid = Message::new();
    uid.string(1, "not-the-uid");
    let mut wrong = Message::new();
    wrong.message(2, uid);
    match client
        .request_text(send("DELETE", &format!("{path}/a"), envelope(wrong)))
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 409, "{s:?}"),
        other => panic!("a failed precondition must be 409, got {other:?}"),
    }
    assert!(cms.get_opt("a").await.unwrap().is_some());

    client
        .request_text(send(
            "DELETE",
            &format!("{path}/a"),
            envelope(Message::new()),
        ))
        .await
        .unwrap();
    assert!(cms.get_opt("a").await.unwrap().is_none());

    let mut dry = Message::new();
    dry.string(5, "All");
    client
        .request_text(send(
            "DELETE",
            &format!("{path}?labelSelector=set%3Dx"),
            envelope(dry),
        ))
        .await
        .unwrap();
    assert!(
        cms.get_opt("b").await.unwrap().is_some(),
        "a dry run deleted"
    );
    client
        .request_text(send(
            "DELETE",
            &format!("{path}?labelSelector=set%3Dx"),
            envelope(Message::new()),
        ))
        .await
        .unwrap();
    assert!(cms.get_opt("b").await.unwrap().is_none());
}

/// A dependent created after its owner was deleted (a controller acting on a stale cache)
/// is collected, as kube's garbage collector collects dangling references; one whose owner
/// exists stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependent_of_an_owner_already_gone_is_collected() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let cm = |name: &str, owner_uid: Option<&str>| -> ConfigMap {
        let mut v = json!({"metadata": {"name": name}});
        if let Some(uid) = owner_uid {
            v["metadata"]["ownerReferences"] =
                json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}]);
        }
        serde_json::from_value(v).unwrap()
    };
    let pp = PostParams::default();
    let first = cms.create(&pp, &cm("owner", None)).await.unwrap();
    let gone_uid = first.metadata.uid.unwrap();
    cms.delete("owner", &DeleteParams::default()).await.unwrap();
    cms.create(&pp, &cm("late", Some(&gone_uid))).await.unwrap();
    // The owner's name again, with a new uid: a reference to the old one still dangles.
    let second = cms.create(&pp, &cm("owner", None)).await.unwrap();
    let owner_uid = second.metadata.uid.unwrap();
    cms.create(&pp, &cm("stale-uid", Some(&gone_uid)))
        .await
        .unwrap();
    cms.create(&pp, &cm("kept", Some(&owner_uid)))
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(30), || async {
            cms.get_opt("late").await.unwrap().is_none()
                && cms.get_opt("stale-uid").await.unwrap().is_none()
        })
        .await,
        "dependents of a deleted owner were not collected"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        cms.get_opt("kept").await.unwrap().is_some(),
        "a dependent whose owner exists was collected"
    );
}

/// `kubectl wait` and `kubectl delete --wait` list one object by name (fieldSelector
/// `metadata.name=`) and watch from the list's resourceVersion for its change: the list
/// must show the object as it was at that revision, or the watch starts after the change
/// and waits forever (seen as a `kubectl delete pod --wait` that never returned). A writer
/// creates and deletes one ConfigMap over and over while a reader checks every list by
/// name: the first change after the object it shows comes after the list's revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_by_name_shows_the_object_as_at_the_lists_revision() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let server = TestServer::start().await;
    let client = server.client().await;
    namespace(&client, "shop").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "shop");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn({
        let (api, stop) = (api.clone(), stop.clone());
        async move {
            let cm: ConfigMap =
                serde_json::from_value(json!({"metadata": {"name": "churn"}})).unwrap();
            while !stop.load(Ordering::Relaxed) {
                let _ = api.create(&PostParams::default(), &cm).await;
                let _ = api.delete("churn", &DeleteParams::default()).await;
            }
        }
    });
    let rv = |m: &Option<String>| m.as_deref().unwrap().parse::<u64>().unwrap();
    let by_name = ListParams::default().fields("metadata.name=churn");
    let mut shown = 0;
    for _ in 0..1500 {
        let list = api.list(&by_name).await.unwrap();
        let list_rv = rv(&list.metadata.resource_version);
        let Some(item) = list.items.first() else {
            continue;
        };
        shown += 1;
        let item_rv = rv(&item.metadata.resource_version);
        let mut events = api
            .watch(
                &kube::api::WatchParams::default().fields("metadata.name=churn"),
                &item_rv.to_string(),
            )
            .await
            .unwrap()
            .boxed();
        let next = loop {
            match tokio::time::timeout(Duration::from_secs(20), events.try_next())
                .await
                .expect("the writer changes the object")
                .unwrap()
                .expect("a watch event")
            {
                kube::api::WatchEvent::Added(o)
                | kube::api::WatchEvent::Modified(o)
                | kube::api::WatchEvent::Deleted(o) => break rv(&o.metadata.resource_version),
                _ => {}
            }
        };
        assert!(
            next > list_rv,
            "the list at revision {list_rv} showed the object at {item_rv}, which changed at {next}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();
    assert!(shown > 0, "the reader never saw the object");
    server.bound.shutdown().await;
}
