#![allow(clippy::unwrap_used)]
//! `/metrics`, `/readyz`, `/livez`, `/version`: served, in the expected formats.

mod support;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams, PostParams};
use support::TestServer;

fn get(path: &str) -> http::Request<Vec<u8>> {
    http::Request::get(path).body(Vec::new()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_health() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let api = Api::<Namespace>::all(client.clone());
    api.create(
        &PostParams::default(),
        &serde_json::from_value(serde_json::json!({"metadata": {"name": "m"}})).unwrap(),
    )
    .await
    .unwrap();
    api.list(&ListParams::default()).await.unwrap();
    let _ = api.get("missing").await;
    let mut watch = Box::pin(api.watch(&Default::default(), "0").await.unwrap());
    use futures::TryStreamExt;
    let _ = watch.try_next().await.unwrap();

    // The placement controllers are clients of this server too: their lists and watches are
    // counted with ours, so each series must be at least what this test did.
    let text = client.request_text(get("/metrics")).await.unwrap();
    for (series, at_least) in [
        (
            "sluice_apiserver_requests_total{verb=\"create\",resource=\"namespaces\",code=\"201\"}",
            1.0,
        ),
        (
            "sluice_apiserver_requests_total{verb=\"get\",resource=\"namespaces\",code=\"404\"}",
            1.0,
        ),
        (
            "sluice_apiserver_requests_total{verb=\"list\",resource=\"namespaces\",code=\"200\"}",
            1.0,
        ),
        (
            "sluice_apiserver_requests_total{verb=\"watch\",resource=\"namespaces\",code=\"200\"}",
            1.0,
        ),
        (
            "sluice_apiserver_open_watches{resource=\"namespaces\"}",
            1.0,
        ),
        ("sluice_apiserver_storage_revision", 1.0),
    ] {
        let value = text
            .lines()
            .find_map(|line| line.strip_prefix(series)?.trim().parse::<f64>().ok());
        assert!(
            value.is_some_and(|v| v >= at_least),
            "/metrics: {series} is {value:?}, expected at least {at_least}:\n{text}"
        );
    }
    assert!(text.contains("sluice_apiserver_request_duration_seconds_bucket"));
    assert_eq!(client.request_text(get("/readyz")).await.unwrap(), "ok");
    assert_eq!(client.request_text(get("/livez")).await.unwrap(), "ok");
    let version: serde_json::Value =
        serde_json::from_str(&client.request_text(get("/version")).await.unwrap()).unwrap();
    assert_eq!(version["major"], "1");
    server.bound.shutdown().await;
}
