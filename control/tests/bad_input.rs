#![allow(clippy::unwrap_used)]
//! Bad input gets a precise `Status`, the server keeps serving, nothing stored changes
//! (issue: control, done-when 4).

mod support;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use support::TestServer;

/// Send a raw request through kube-rs and return the Status it failed with.
async fn status_of(client: &kube::Client, req: http::Request<Vec<u8>>) -> kube::core::Status {
    match client.request_text(req).await {
        Err(kube::Error::Api(s)) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn request(
    method: &str,
    path: &str,
    content_type: &str,
    body: impl Into<Vec<u8>>,
) -> http::Request<Vec<u8>> {
    http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .body(body.into())
        .expect("request")
}

/// Every stored key with its revision, but the leader Lease's (renewed every 2 s when
/// the control plane runs on etcd): what a rejected request must leave as it was.
fn stored(server: &TestServer) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    server.bound.state.store.scan("", None, |k, e| {
        if !k.as_str().starts_with("coordination.k8s.io/leases/") {
            out.push((k.as_str().to_string(), e.revision.0));
        }
        true
    });
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_precise_status_and_change_nothing() {
    let server = TestServer::start_with(|c| {
        c.limits.max_body = 64 * 1024;
        c.watch_history = 5;
    })
    .await;
    let client = server.client().await;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "shop"}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "shop");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "settings"}, "data": {"mode": "fast"}}))
            .unwrap();
    let original = cms.create(&PostParams::default(), &cm).await.unwrap();
    let before = stored(&server);
    let cm_path = "/api/v1/namespaces/shop/configmaps";

    // Malformed JSON and YAML.
    let s = status_of(
        &client,
        request("POST", cm_path, "application/json", "{\"metadata\": "),
    )
    .await;
    assert_eq!((s.code, s.reason.as_str()), (400, "BadRequest"), "{s:?}");
    assert!(s.message.contains("error decoding object"), "{s:?}");
    let s = status_of(
        &client,
        request(
            "POST",
            cm_path,
            "application/yaml",
            "metadata:\n  name: [unclosed\n",
        ),
    )
    .await;
    assert_eq!((s.code, s.reason.as_str()), (400, "BadRequest"), "{s:?}");
    assert!(s.message.contains("YAML"), "{s:?}");
    // A garbage protobuf body.
    let s = status_of(
        &client,
        request(
            "POST",
            cm_path,
            "application/vnd.kubernetes.protobuf",
            b"k8s\x00\x0a\xff\xff".to_vec(),
        ),
    )
    .await;
    assert_eq!(s.code, 400, "{s:?}");

    // Unknown fields: rejected under Strict, named by path.
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "labelz": {}}, "dataa": {}});
    let s = status_of(
        &client,
        request(
            "POST",
            &format!("{cm_path}?fieldValidation=Strict"),
            "application/json",
            body.to_string(),
        ),
    )
    .await;
    assert_eq!((s.code, s.reason.as_str()), (400, "BadRequest"), "{s:?}");
    assert!(
        s.message.contains("strict decoding error")
            && s.message.contains("unknown field \"dataa\"")
            && s.message.contains("metadata.labelz"),
        "{s:?}"
    );
    // Wrong value type.
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"k": 5}});
    let s = status_of(
        &client,
        request("POST", cm_path, "application/json", body.to_string()),
    )
    .await;
    assert_eq!(s.code, 400, "{s:?}");
    assert!(
        s.message.contains("cannot be handled as a ConfigMap"),
        "{s:?}"
    );

    // Invalid names and labels: 422 Invalid with causes.
    let bad: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "Bad_Name", "labels": {"ok": "no spaces allowed"}}}),
    )
    .unwrap();
    let err = cms.create(&PostParams::default(), &bad).await.unwrap_err();
    let kube::Error::Api(s) = err else {
        panic!("{err:?}")
    };
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"), "{s:?}");
    let causes = s
        .details
        .as_ref()
        .map(|d| d.causes.clone())
        .unwrap_or_default();
    assert!(
        causes.iter().any(|c| c.field == "metadata.name"),
        "{causes:?}"
    );
    assert!(
        causes.iter().any(|c| c.field == "metadata.labels.ok"),
        "{causes:?}"
    );
    assert!(
        s.message.starts_with("ConfigMap \"Bad_Name\" is invalid"),
        "{s:?}"
    );

    // Already exists.
    let err = cms.create(&PostParams::default(), &cm).await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists" && s.message == "configmaps \"settings\" already exists"),
        "{err:?}"
    );

    // A stale resourceVersion.
    let mut stale = original.clone();
    stale.metadata.resource_version = Some("1".into());
    stale.data = Some([("mode".to_string(), "slow".to_string())].into());
    let err = cms
        .replace("settings", &PostParams::default(), &stale)
        .await
        .unwrap_err();
    let kube::Error::Api(s) = err else {
        panic!("{err:?}")
    };
    assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
    assert!(s.message.contains("the object has been modified"), "{s:?}");

    // Patch of a missing object; malformed patches.
    let err = cms
        .patch(
            "missing",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {}})),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 404 && s.message == "configmaps \"missing\" not found"),
        "{err:?}"
    );
    let s = status_of(
        &client,
        request(
            "PATCH",
            &format!("{cm_path}/settings"),
            "application/json-patch+json",
            "{not json",
        ),
    )
    .await;
    assert_eq!(s.code, 400, "{s:?}");
    let s = status_of(
        &client,
        request(
            "PATCH",
            &format!("{cm_path}/settings"),
            "application/json-patch+json",
            r#"[{"op":"remove","path":"/nope"}]"#,
        ),
    )
    .await;
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"), "{s:?}");
    let s = status_of(
        &client,
        request(
            "PATCH",
            &format!("{cm_path}/settings"),
            "application/strategic-merge-patch+json",
            "[1,2]",
        ),
    )
    .await;
    assert_eq!(s.code, 400, "{s:?}");
    let s = status_of(
        &client,
        request("PATCH", &format!("{cm_path}/settings"), "text/plain", "{}"),
    )
    .await;
    assert_eq!(
        (s.code, s.reason.as_str()),
        (415, "UnsupportedMediaType"),
        "{s:?}"
    );

    // A body over the limit.
    let big = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"k": "x".repeat(100 * 1024)}});
    let s = status_of(
        &client,
        request("POST", cm_path, "application/json", big.to_string()),
    )
    .await;
    assert_eq!(
        (s.code, s.reason.as_str()),
        (413, "RequestEntityTooLarge"),
        "{s:?}"
    );

    // A namespace that does not exist; a path that does not exist.
    let s = status_of(
        &client,
        request(
            "POST",
            "/api/v1/namespaces/nope/configmaps",
            "application/json",
            json!({"metadata": {"name": "x"}}).to_string(),
        ),
    )
    .await;
    assert_eq!(
        (s.code, s.message.as_str()),
        (404, "namespaces \"nope\" not found"),
        "{s:?}"
    );
    let s = status_of(
        &client,
        request(
            "GET",
            "/apis/nope.example/v1/things",
            "application/json",
            "",
        ),
    )
    .await;
    assert_eq!(s.code, 404, "{s:?}");

    // A label selector that does not parse.
    let err = cms
        .list(&ListParams::default().labels("a in b"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 400),
        "{err:?}"
    );

    // Nothing above changed storage; the server still serves.
    assert!(
        stored(&server) == before,
        "a rejected request wrote to storage"
    );
    let now = cms.get("settings").await.unwrap();
    assert_eq!(now.data, original.data);
    assert_eq!(
        now.metadata.resource_version,
        original.metadata.resource_version
    );

    // A watch from a compacted revision: an ERROR event with 410 Expired.
    for i in 0..10 {
        cms.patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"i": i.to_string()}})),
        )
        .await
        .unwrap();
    }
    use futures::TryStreamExt;
    let mut stream = Box::pin(cms.watch(&WatchParams::default(), "1").await.unwrap());
    match stream.try_next().await.unwrap() {
        Some(WatchEvent::Error(e)) => {
            assert_eq!((e.code, e.reason.as_str()), (410, "Expired"), "{e:?}")
        }
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    // Wrong credentials.
    let s = status_of(
        &kube_with_token(&server, "wrong").await,
        request("GET", "/api/v1/namespaces", "application/json", ""),
    )
    .await;
    assert_eq!((s.code, s.reason.as_str()), (401, "Unauthorized"), "{s:?}");
    assert!(cms.get("settings").await.is_ok());
    server.bound.shutdown().await;
}

async fn alice_config(server: &TestServer, token: &str) -> kube::Config {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let kc = Kubeconfig::read_from(&server.bound.admin_kubeconfig).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    config.auth_info.token = Some(token.to_string().into());
    config
}

async fn kube_with_token(server: &TestServer, token: &str) -> kube::Client {
    kube::Client::try_from(alice_config(server, token).await).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_and_token_files_authenticate() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "dev-token,alice,1001,\"dev\"\n").unwrap();
    let server = TestServer::start_with(|c| c.token_file = Some(tokens.clone())).await;
    // A token-file user may do nothing it is not bound to, and may not use the wildcard.
    let alice = kube_with_token(&server, "dev-token").await;
    let denied = Api::<Namespace>::all(alice.clone())
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&denied, kube::Error::Api(s) if s.code == 403
            && s.message == "namespaces is forbidden: User \"alice\" cannot list resource \"namespaces\" in API group \"\" at the cluster scope"),
        "{denied:?}"
    );
    // Bound to `view` through its group, it may list.
    let admin = server.client().await;
    let binding: k8s_openapi::api::rbac::v1::ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "dev-view"},
        "subjects": [{"kind": "Group", "name": "dev", "apiGroup": "rbac.authorization.k8s.io"}],
        "roleRef": {"kind": "ClusterRole", "name": "view", "apiGroup": "rbac.authorization.k8s.io"},
    }))
    .unwrap();
    Api::all(admin)
        .create(&Default::default(), &binding)
        .await
        .unwrap();
    assert!(
        Api::<Namespace>::all(alice.clone())
            .list(&ListParams::default())
            .await
            .is_ok()
    );
    let mut wildcard = alice_config(&server, "dev-token").await;
    wildcard.cluster_url = format!("{}/clusters/*", server.bound.url).parse().unwrap();
    let alice_wildcard = kube::Client::try_from(wildcard).unwrap();
    let s = status_of(
        &alice_wildcard,
        request("GET", "/api/v1/namespaces", "application/json", ""),
    )
    .await;
    assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"), "{s:?}");

    // A client certificate signed by the CA authenticates; its CN is the user.
    let pki = sluice_control::pki::Pki::load_or_create(server.dir.path(), &[]).unwrap();
    let (cert, key) = pki.issue_client_cert("bob", &["dev"]).unwrap();
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let kc = Kubeconfig::read_from(&server.bound.admin_kubeconfig).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    config.auth_info.token = None;
    config.auth_info.client_certificate_data = Some(base64_encode(&cert));
    config.auth_info.client_key_data = Some(base64_encode(&key).into());
    let bob = kube::Client::try_from(config).unwrap();
    assert!(
        Api::<Namespace>::all(bob)
            .list(&ListParams::default())
            .await
            .is_ok()
    );
    server.bound.shutdown().await;
}

fn base64_encode(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// A label value whose 63rd byte falls inside a multibyte character is refused with a
/// Status, not a panic; names of any UTF-8 get the same treatment (regression: the
/// validator sliced at byte 63).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_non_ascii_names_and_labels_are_refused_cleanly() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let long = format!("{}é", "a".repeat(62));
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let before = stored(&server);
    for body in [
        json!({"metadata": {"name": "cm", "labels": {"app": long}}}),
        json!({"metadata": {"name": "cm", "labels": {long.clone(): "x"}}}),
        json!({"metadata": {"name": long}}),
    ] {
        let cm: ConfigMap = serde_json::from_value(body).unwrap();
        match cms.create(&PostParams::default(), &cm).await {
            Err(kube::Error::Api(s)) => {
                assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"), "{s:?}")
            }
            other => panic!("expected 422 Invalid, got {other:?}"),
        }
    }
    let ns: Api<Namespace> = Api::all(client.clone());
    let long_ns: Namespace = serde_json::from_value(json!({"metadata": {"name": long}})).unwrap();
    assert!(matches!(
        ns.create(&PostParams::default(), &long_ns).await,
        Err(kube::Error::Api(s)) if s.code == 422
    ));
    assert!(stored(&server) == before, "nothing was written");
    // Still serving.
    ns.get("default").await.unwrap();
}

/// Logs are bytes: a limit that ends inside a multibyte character, and a log that is not
/// UTF-8, are served as they are (regression: the first panicked, the second was a 500).
/// Container names are DNS labels, so none can reach outside the pod's log directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_are_served_as_bytes_and_container_names_are_checked() {
    let logs = tempfile::tempdir().unwrap();
    let dir = logs.path().to_path_buf();
    let server = TestServer::start_with(|c| c.pod_logs_dir = Some(dir)).await;
    let client = server.client().await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), "default");
    let pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "main", "image": "sluice/echo"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let container = logs.path().join("default/p/main");
    std::fs::create_dir_all(&container).unwrap();
    std::fs::write(container.join("0.log"), "héllo\n\u{ff}\n".as_bytes()).unwrap();
    // The raw bytes of a log request (kube-rs' request_text would insist on UTF-8).
    let log = async |query: &str| {
        let req = http::Request::get(format!("/api/v1/namespaces/default/pods/p/log?{query}"))
            .body(kube::client::Body::from(Vec::new()))
            .unwrap();
        let raw = client.send(req).await.unwrap();
        assert_eq!(raw.status(), 200);
        http_body_util::BodyExt::collect(raw.into_body())
            .await
            .unwrap()
            .to_bytes()
    };
    // "h" then the first byte of "é".
    assert_eq!(&log("limitBytes=2").await[..], b"h\xc3");
    std::fs::write(container.join("0.log"), b"\xff\xfe\nok\n").unwrap();
    assert_eq!(&log("tailLines=2").await[..], b"\xff\xfe\nok\n");

    // A container name that is a path is refused before anything stores it.
    let escape = serde_json::from_value(json!({
        "metadata": {"name": "escape"},
        "spec": {"containers": [{"name": "../../x", "image": "sluice/echo"}]}
    }))
    .unwrap();
    match pods.create(&PostParams::default(), &escape).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 422, "{s:?}");
            assert!(s.message.contains("spec.containers[0].name"), "{s:?}");
        }
        other => panic!("expected 422, got {other:?}"),
    }
}
