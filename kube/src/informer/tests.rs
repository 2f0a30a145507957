//! The informer against a scripted API server (a tower service in place of the HTTP
//! client): lists and watches answered from a script, so a watch error and the re-list
//! after it happen on cue.

#![allow(clippy::unwrap_used)]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use futures::{StreamExt as _, stream};
use http::{Request, Response};
use http_body::Frame;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::watcher;
use serde_json::json;

use super::*;
use crate::changes::Changes;
use crate::scope::Scope;

/// What the fake server answers, in order: a list's items, or a watch's lines (after which
/// the watch stays open and silent).
enum Answer {
    List {
        rv: &'static str,
        names: Vec<&'static str>,
    },
    Watch(Vec<serde_json::Value>),
}

fn configmap(name: &str, rv: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "shop", "resourceVersion": rv}})
}

fn respond(answer: Answer) -> Response<BoxBody<Bytes, Infallible>> {
    match answer {
        Answer::List { rv, names } => {
            let items: Vec<_> = names.iter().map(|n| configmap(n, rv)).collect();
            let body = json!({"apiVersion": "v1", "kind": "ConfigMapList",
                              "metadata": {"resourceVersion": rv}, "items": items});
            Response::new(Full::new(Bytes::from(body.to_string())).boxed())
        }
        Answer::Watch(lines) => {
            let frames = lines
                .into_iter()
                .map(|l| Ok::<_, Infallible>(Frame::data(Bytes::from(format!("{l}\n")))));
            let body = StreamBody::new(stream::iter(frames).chain(stream::pending()));
            Response::new(BodyExt::boxed(body))
        }
    }
}

/// A client whose requests are answered from `script`; a request the script does not
/// expect (wrong kind, or the script ran out) waits forever.
fn scripted(script: Vec<Answer>) -> (kube::Client, std::sync::Arc<Mutex<Vec<String>>>) {
    let script = std::sync::Arc::new(Mutex::new(VecDeque::from(script)));
    let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let service = tower::service_fn(move |req: Request<kube::client::Body>| {
        let script = script.clone();
        let log = log.clone();
        async move {
            let uri = req.uri().to_string();
            let watch = uri.contains("watch=true");
            log.lock().unwrap().push(uri);
            let next = {
                let mut s = script.lock().unwrap();
                match s.front() {
                    Some(Answer::Watch(_)) if watch => s.pop_front(),
                    Some(Answer::List { .. }) if !watch => s.pop_front(),
                    _ => None,
                }
            };
            match next {
                Some(a) => Ok::<_, Infallible>(respond(a)),
                None => futures::future::pending().await,
            }
        }
    });
    (kube::Client::new(service, "shop"), seen)
}

fn names(informer: &Informer<ConfigMap>) -> Vec<String> {
    let mut n: Vec<String> = informer
        .state()
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    n.sort();
    n
}

async fn until(mut f: impl FnMut() -> bool) {
    tokio::time::timeout(Duration::from_secs(30), async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("condition within 30 s");
}

/// A watch that fails with 410 Gone (its resourceVersion is too old) is followed by a
/// re-list that replaces the store: an object deleted while the watch was down is gone, one
/// created is there, and the change signal widens to everything.
#[tokio::test]
async fn a_watch_error_is_followed_by_a_relist_that_resyncs_the_store() {
    let gone = json!({"type": "ERROR", "object": {"apiVersion": "v1", "kind": "Status",
        "status": "Failure", "reason": "Expired", "code": 410, "message": "too old resource version"}});
    let (client, seen) = scripted(vec![
        Answer::List {
            rv: "1",
            names: vec!["a", "b"],
        },
        Answer::Watch(vec![
            json!({"type": "ADDED", "object": configmap("c", "2")}),
            gone,
        ]),
        Answer::List {
            rv: "5",
            names: vec!["b", "d"],
        },
        Answer::Watch(vec![]),
    ]);
    let changes = std::sync::Arc::new(Changes::<String>::default());
    let relists = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (record, count) = (
        changes.recorder(|c: &ConfigMap| c.metadata.name.clone()),
        relists.clone(),
    );
    let informer = Informer::start_with(
        kube::Api::<ConfigMap>::namespaced(client, "shop"),
        watcher::Config::default(),
        "configmaps",
        move |e| {
            if matches!(e, watcher::Event::InitDone) {
                count.fetch_add(1, Ordering::SeqCst);
            }
            record(e);
        },
    );
    until(|| relists.load(Ordering::SeqCst) == 2).await;
    assert!(informer.is_ready());
    until(|| names(&informer) == ["b", "d"]).await;
    assert!(informer.get("shop", "d").is_some());
    assert!(
        informer.get("shop", "a").is_none(),
        "deleted while the watch was down"
    );
    assert!(informer.get("shop", "c").is_none());
    assert_eq!(
        changes.take(),
        Scope::All,
        "a re-list widens the next round"
    );
    let uris = seen.lock().unwrap().clone();
    assert_eq!(
        uris.iter().filter(|u| !u.contains("watch=true")).count(),
        2,
        "{uris:?}"
    );
    assert!(
        uris.iter()
            .any(|u| u.contains("watch=true") && u.contains("resourceVersion=5")),
        "the second watch starts from the re-list's revision: {uris:?}"
    );
}

/// Events between lists reach the store and the callback in order; dropping the informer
/// stops its watch.
#[tokio::test]
async fn watch_events_reach_the_store_and_name_their_keys() {
    let (client, _) = scripted(vec![
        Answer::List {
            rv: "1",
            names: vec!["a"],
        },
        Answer::Watch(vec![
            json!({"type": "ADDED", "object": configmap("b", "2")}),
            json!({"type": "DELETED", "object": configmap("a", "3")}),
            json!({"type": "BOOKMARK", "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"resourceVersion": "4"}}}),
        ]),
    ]);
    let changes = std::sync::Arc::new(Changes::<String>::default());
    let informer = Informer::start_with(
        kube::Api::<ConfigMap>::namespaced(client, "shop"),
        watcher::Config::default(),
        "configmaps",
        changes.recorder(|c: &ConfigMap| c.metadata.name.clone()),
    );
    until(|| names(&informer) == ["b"]).await;
    let scope = changes.take();
    assert!(scope.contains(&"a".to_string()) && scope.contains(&"b".to_string()));
    drop(informer);
}

/// A store across scopes keeps objects of the same namespace and name apart by their scope
/// annotation; a store without scopes keeps one of them.
#[test]
fn a_store_across_scopes_keeps_same_names_apart() {
    let in_scope = |scope: &str, data: &str| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": "settings", "namespace": "shop",
            "annotations": {"example.dev/scope": scope}}, "data": {"mode": data}}))
        .unwrap()
    };
    let across: Store<ConfigMap> = Store::new(Some("example.dev/scope"));
    let flat: Store<ConfigMap> = Store::new(None);
    for store in [&across, &flat] {
        store.apply(&watcher::Event::Init);
        store.apply(&watcher::Event::InitApply(in_scope("root", "a")));
        store.apply(&watcher::Event::InitApply(in_scope("root:team", "b")));
        assert!(!store.is_ready(), "not before the list ends");
        store.apply(&watcher::Event::InitDone);
        assert!(store.is_ready());
    }
    assert_eq!(across.len(), 2);
    assert_eq!(flat.len(), 1);
    let mode = |o: Option<Arc<ConfigMap>>| o.and_then(|c| c.data.clone()).unwrap()["mode"].clone();
    assert_eq!(mode(across.get_in("root", "shop", "settings")), "a");
    assert_eq!(mode(across.get_in("root:team", "shop", "settings")), "b");
    across.apply(&watcher::Event::Delete(in_scope("root", "a")));
    assert!(across.get_in("root", "shop", "settings").is_none());
    assert!(across.get_in("root:team", "shop", "settings").is_some());
}

/// A namespace's objects are read without the others; removals keep the count.
#[test]
fn a_store_reads_one_namespace() {
    let cm = |ns: &str, name: &str| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns}})).unwrap()
    };
    let store: Store<ConfigMap> = Store::new(None);
    for (ns, name) in [("a", "1"), ("a", "2"), ("b", "1")] {
        store.apply(&watcher::Event::Apply(cm(ns, name)));
    }
    store.apply(&watcher::Event::Apply(cm("a", "2")));
    assert_eq!(store.len(), 3);
    assert_eq!(store.in_namespace("", "a").len(), 2);
    store.apply(&watcher::Event::Delete(cm("b", "1")));
    store.apply(&watcher::Event::Delete(cm("b", "1")));
    assert_eq!(store.len(), 2);
    assert!(store.in_namespace("", "b").is_empty());
    assert_eq!(store.namespaces(), [(String::new(), "a".to_string())]);
}

#[test]
fn a_view_store_keeps_what_its_view_makes_of_each_object_by_scope() {
    let store: Store<String> = Store::new(Some("scope"));
    let cm = |name: &str, scope: &str, v: &str| -> ConfigMap {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "shop", "annotations": {"scope": scope}},
            "data": {"v": v}}))
        .unwrap()
    };
    let view: fn(&ConfigMap) -> String = |c| {
        c.data
            .as_ref()
            .and_then(|d| d.get("v").cloned())
            .unwrap_or_default()
    };
    store.apply_viewed(&watcher::Event::Init, view);
    store.apply_viewed(&watcher::Event::InitApply(cm("a", "root:x", "1")), view);
    store.apply_viewed(&watcher::Event::InitApply(cm("a", "root:y", "2")), view);
    assert!(!store.is_ready());
    store.apply_viewed(&watcher::Event::<ConfigMap>::InitDone, view);
    assert!(store.is_ready());
    assert_eq!(
        store
            .get_in("root:x", "shop", "a")
            .as_deref()
            .map(String::as_str),
        Some("1")
    );
    assert_eq!(
        store
            .get_in("root:y", "shop", "a")
            .as_deref()
            .map(String::as_str),
        Some("2")
    );
    store.apply_viewed(&watcher::Event::Apply(cm("a", "root:x", "3")), view);
    store.apply_viewed(&watcher::Event::Delete(cm("a", "root:y", "2")), view);
    assert_eq!(
        store
            .get_in("root:x", "shop", "a")
            .as_deref()
            .map(String::as_str),
        Some("3")
    );
    assert_eq!(store.len(), 1);
}
