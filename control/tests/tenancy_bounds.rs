#![allow(clippy::unwrap_used)]
//! No request of one tenant takes the API server from the others (issue: tenants apart):
//! a JSON patch that doubles its object is refused before it allocates, a client that sends
//! half a request head is let go, a flooding tenant waits in its own queue and is told 429
//! while others are served, anonymous clients get health only, and a tenant reads nothing
//! of another tenant's logical cluster — not its discovery, not its schemas.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::TestServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKENS: &str = "alice-token,alice,1001\nbob-token,bob,1002\n";

/// A server with two workspaces, `root:a` administered by alice and `root:b` by bob.
async fn two_tenants(configure: impl FnOnce(&mut sluice_control::Config)) -> TestServer {
    let tokens = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tokens.path(), TOKENS).unwrap();
    let path = tokens.into_temp_path().keep().unwrap();
    let server = TestServer::start_with(|c| {
        c.token_file = Some(path);
        configure(c);
    })
    .await;
    let root = server.client().await;
    for (ws, user) in [("a", "alice"), ("b", "bob")] {
        let wss: Api<kube::api::DynamicObject> = Api::all_with(
            root.clone(),
            &kube::api::ApiResource::from_gvk_with_plural(
                &kube::api::GroupVersionKind::gvk("sluice.dev", "v1alpha1", "Workspace"),
                "workspaces",
            ),
        );
        wss.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "Workspace", "metadata": {"name": ws}}))
                .unwrap(),
        )
        .await
        .unwrap();
        let admin = server.client_for_cluster(&format!("root:{ws}")).await;
        let bindings: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(admin);
        bindings
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": format!("{user}-admin")},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                    "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}]
                }))
                .unwrap(),
            )
            .await
            .unwrap();
    }
    server
}

/// A kube-rs client of `cluster` that authenticates with `token`.
async fn client_as(server: &TestServer, cluster: &str, token: &str) -> kube::Client {
    let mut config = sluice_test_support::client::config(
        &server.bound.admin_kubeconfig,
        Some(&format!("{}/clusters/{cluster}", server.bound.url)),
    )
    .await;
    config.auth_info.token = Some(token.to_string().into());
    // kube-rs backs off and retries a 429 by itself (up to 15 times): the tests want to see it.
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap()
        * 1024
}

async fn status_of(client: &kube::Client, req: http::Request<Vec<u8>>) -> kube::core::Status {
    match client.request_text(req).await {
        Err(kube::Error::Api(s)) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn json_patch(path: &str, ops: &serde_json::Value) -> http::Request<Vec<u8>> {
    http::Request::builder()
        .method("PATCH")
        .uri(path)
        .header("content-type", "application/json-patch+json")
        .body(serde_json::to_vec(ops).unwrap())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_patch_bomb_is_refused_before_it_allocates() {
    let server = two_tenants(|_| {}).await;
    let alice = client_as(&server, "root:a", "alice-token").await;
    let cms: Api<ConfigMap> = Api::namespaced(alice.clone(), "default");
    let cm = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "target"}, "data": {"k": "x".repeat(1000)}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let path = "/api/v1/namespaces/default/configmaps/target";

    // Each copy doubles the object: 40 of them would need a terabyte.
    let doubling: Vec<_> = (0..40)
        .map(|i| json!({"op": "copy", "from": "/data", "path": format!("/data/d{i}")}))
        .collect();
    let before = rss_bytes();
    let started = Instant::now();
    let s = status_of(&alice, json_patch(path, &json!(doubling))).await;
    let took = started.elapsed();
    let grew = rss_bytes().saturating_sub(before);
    eprintln!(
        "patch bomb refused in {:.1} ms, RSS grew {:.1} MiB",
        took.as_secs_f64() * 1000.0,
        grew as f64 / 1048576.0
    );
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"), "{s:?}");
    assert!(
        s.message
            .contains("Unable to complete the copy, the accumulated size increase of copy is"),
        "{}",
        s.message
    );
    assert!(grew < 64 << 20, "RSS grew {grew} bytes");

    // More operations than kube allows.
    let many: Vec<_> = (0..10_001)
        .map(|_| json!({"op": "test", "path": "/kind", "value": "ConfigMap"}))
        .collect();
    let s = status_of(&alice, json_patch(path, &json!(many))).await;
    assert_eq!((s.code, s.reason.as_str()), (413, "RequestEntityTooLarge"));
    assert_eq!(
        s.message,
        "Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001"
    );

    // A value copied into its own deepest point doubles how deeply it nests: past what
    // anything could read back.
    let mut value = json!("leaf");
    let mut deepest = String::from("/metadata/annotations");
    for _ in 0..50 {
        value = json!({"x": value});
        deepest.push_str("/x");
    }
    let deep = json!([
        {"op": "add", "path": "/metadata/annotations", "value": value},
        {"op": "copy", "from": "/metadata/annotations", "path": deepest}
    ]);
    let s = status_of(&alice, json_patch(path, &deep)).await;
    assert_eq!(s.code, 422, "{s:?}");
    assert!(s.message.contains("levels deep"), "{}", s.message);

    // A patch that grows the object past the request limit.
    let big = "y".repeat(2 << 20);
    let growing = json!([
        {"op": "add", "path": "/data/big", "value": big},
        {"op": "copy", "from": "/data/big", "path": "/data/big2"}
    ]);
    let s = status_of(&alice, json_patch(path, &growing)).await;
    assert_eq!(
        (s.code, s.reason.as_str()),
        (413, "RequestEntityTooLarge"),
        "{s:?}"
    );
    assert_eq!(s.message, "Request entity too large: limit is 3145728");

    // Nothing changed, and the server goes on serving.
    let now = cms.get("target").await.unwrap();
    assert_eq!(now.metadata.resource_version, cm.metadata.resource_version);
    cms.patch(
        "target",
        &PatchParams::default(),
        &Patch::Json::<()>(
            serde_json::from_value(json!([{"op": "add", "path": "/data/ok", "value": "1"}]))
                .unwrap(),
        ),
    )
    .await
    .unwrap();
}

/// A TLS connection to the server that trusts whatever certificate it shows, offering
/// `alpn`.
async fn tls_to(
    server: &TestServer,
    alpn: &[u8],
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    #[derive(Debug)]
    struct AnyCert;
    impl rustls::client::danger::ServerCertVerifier for AnyCert {
        fn verify_server_cert(
            &self,
            _: &rustls::pki_types::CertificateDer<'_>,
            _: &[rustls::pki_types::CertificateDer<'_>],
            _: &rustls::pki_types::ServerName<'_>,
            _: &[u8],
            _: rustls::pki_types::UnixTime,
        ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            _: &[u8],
            _: &rustls::pki_types::CertificateDer<'_>,
            _: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
        }
        fn verify_tls13_signature(
            &self,
            _: &[u8],
            _: &rustls::pki_types::CertificateDer<'_>,
            _: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
        }
        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            rustls::crypto::ring::default_provider()
                .signature_verification_algorithms
                .supported_schemes()
        }
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .dangerous()
    .with_custom_certificate_verifier(Arc::new(AnyCert))
    .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    let addr = server.bound.url.trim_start_matches("https://").to_string();
    let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect("localhost".try_into().unwrap(), tcp)
        .await
        .unwrap()
}

/// Read until the server closes; how long it took.
async fn closed_after(
    mut s: tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    within: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(within, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return started.elapsed(),
                Ok(_) => {}
            }
        }
    })
    .await
    .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_a_request_head_is_let_go() {
    let server = TestServer::start_with(|c| {
        c.limits.header_read_timeout = Duration::from_secs(2);
    })
    .await;
    // Half a head over HTTP/1.1.
    let mut half = tls_to(&server, b"http/1.1").await;
    half.write_all(b"GET /api HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let took = closed_after(half, Duration::from_secs(30)).await;
    assert!(took.is_some(), "half a head held its connection");
    // Nothing at all, over HTTP/1.1 and HTTP/2.
    for alpn in [&b"http/1.1"[..], b"h2"] {
        let silent = tls_to(&server, alpn).await;
        assert!(
            closed_after(silent, Duration::from_secs(30))
                .await
                .is_some(),
            "a silent {} connection was held",
            String::from_utf8_lossy(alpn)
        );
    }
    // An honest client on a fresh connection is served.
    let client = server.client().await;
    Api::<ConfigMap>::namespaced(client, "default")
        .list(&ListParams::default())
        .await
        .unwrap();
}

/// Send a request head whose body never comes: it holds a fairness slot while the server
/// waits for the body.
async fn stalled_upload(
    server: &TestServer,
    cluster: &str,
    token: &str,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let mut s = tls_to(server, b"http/1.1").await;
    let head = format!(
        "POST /clusters/{cluster}/api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.flush().await.unwrap();
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_tenant_is_told_429_while_others_are_served() {
    let server = two_tenants(|c| {
        c.limits.fairness = sluice_control::fairness::FairnessLimits {
            enabled: true,
            tenant_slots: 8,
            slots_per_cluster: 2,
            queue_wait: Duration::from_millis(500),
        };
    })
    .await;
    // alice's two slots are taken by uploads that never finish.
    let _held = [
        stalled_upload(&server, "root:a", "alice-token").await,
        stalled_upload(&server, "root:a", "alice-token").await,
    ];
    let alice = client_as(&server, "root:a", "alice-token").await;
    let bob = client_as(&server, "root:b", "bob-token").await;
    let admin = server.client().await;
    // Let the stalled requests reach their slots.
    let alice_cms: Api<ConfigMap> = Api::namespaced(alice.clone(), "default");
    assert!(
        support::eventually(Duration::from_secs(10), || {
            let a = alice_cms.clone();
            async move { matches!(a.list(&ListParams::default()).await, Err(kube::Error::Api(s)) if s.code == 429) }
        })
        .await,
        "alice was never told to slow down"
    );
    let req = http::Request::builder()
        .uri("/api/v1/namespaces/default/configmaps")
        .body(Vec::new())
        .unwrap();
    let s = status_of(&alice, req).await;
    assert_eq!((s.code, s.reason.as_str()), (429, "TooManyRequests"));
    assert_eq!(s.message, "Too many requests, please try again later.");
    // Bob and the system are served all the while.
    let mut served = 0;
    for _ in 0..20 {
        Api::<ConfigMap>::namespaced(bob.clone(), "default")
            .list(&ListParams::default())
            .await
            .unwrap();
        Api::<ConfigMap>::namespaced(admin.clone(), "default")
            .list(&ListParams::default())
            .await
            .unwrap();
        served += 2;
    }
    assert_eq!(served, 40);
    // Retry-After is sent with the 429.
    let mut raw = tls_to(&server, b"http/1.1").await;
    raw.write_all(b"GET /clusters/root:a/api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice-token\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    let _ = raw.read_to_string(&mut out).await;
    assert!(out.starts_with("HTTP/1.1 429"), "{out}");
    assert!(out.to_ascii_lowercase().contains("retry-after: 1"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_clients_get_health_only_and_tenants_see_only_their_own_cluster() {
    let server = two_tenants(|_| {}).await;
    let mut codes = Vec::new();
    for path in ["/readyz", "/livez", "/version", "/metrics", "/api"] {
        let mut anonymous = tls_to(&server, b"http/1.1").await;
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        anonymous.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        let _ = anonymous.read_to_string(&mut out).await;
        codes.push((
            path,
            out.split_whitespace().nth(1).unwrap_or("").to_string(),
        ));
    }
    assert_eq!(
        codes,
        [
            ("/readyz", "200".to_string()),
            ("/livez", "200".to_string()),
            ("/version", "200".to_string()),
            ("/metrics", "401".to_string()),
            ("/api", "401".to_string()),
        ]
    );

    // alice administers root:a and nothing of root:b: not its discovery, not its schemas.
    let alice_in_b = client_as(&server, "root:b", "alice-token").await;
    for path in [
        "/api",
        "/apis",
        "/api/v1",
        "/openapi/v2",
        "/openapi/v3",
        "/openapi/v3/api/v1",
    ] {
        let req = http::Request::builder().uri(path).body(Vec::new()).unwrap();
        let s = status_of(&alice_in_b, req).await;
        assert_eq!(s.code, 403, "{path}: {s:?}");
    }
    // In her own cluster she has all of it.
    let alice = client_as(&server, "root:a", "alice-token").await;
    alice.apiserver_version().await.unwrap();
    let req = http::Request::builder()
        .uri("/api/v1")
        .body(Vec::new())
        .unwrap();
    alice.request_text(req).await.unwrap();
    // A cluster that does not exist: a tenant is refused its discovery as for any cluster
    // it has no access to, and learns nothing of whether it exists.
    let alice_nowhere = client_as(&server, "root:nope", "alice-token").await;
    let req = http::Request::builder()
        .uri("/api")
        .body(Vec::new())
        .unwrap();
    assert_eq!(status_of(&alice_nowhere, req).await.code, 403);
    // alice administers root:a, and still does not read the whole server's metrics there.
    let req = http::Request::builder()
        .uri("/metrics")
        .body(Vec::new())
        .unwrap();
    assert_eq!(status_of(&alice, req).await.code, 403);
    // The admin reads /metrics.
    let req = http::Request::builder()
        .uri("/metrics")
        .body(Vec::new())
        .unwrap();
    assert!(
        server
            .client()
            .await
            .request_text(req)
            .await
            .unwrap()
            .contains("# TYPE")
    );
}
