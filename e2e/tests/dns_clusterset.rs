//! Every record form of the MCS DNS specification and of `cluster.local`, asked with
//! hickory's client over UDP and TCP, against objects in a real API server; and the
//! same answers through BIND's `dig` and Knot's `kdig` (e2e/tests/dig.sh).

#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use serde_json::{Value, json};
use support::{Cluster, answers, query, query_from, until};

fn import(name: &str, ty: &str, ips: &[&str], ports: Value) -> Value {
    json!({
        "apiVersion": "multicluster.x-k8s.io/v1beta1",
        "kind": "ServiceImport",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"type": ty, "ips": ips, "ports": ports}
    })
}

fn mcs_slice(name: &str, service: &str, cluster: &str, endpoints: Value) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": "shop", "labels": {
            "multicluster.kubernetes.io/service-name": service,
            "multicluster.kubernetes.io/source-cluster": cluster,
            "endpointslice.kubernetes.io/managed-by": "sluice-mcs"
        }},
        "addressType": "IPv4",
        "ports": [{"name": "pg", "protocol": "TCP", "port": 15432}],
        "endpoints": endpoints
    })
}

fn ep(ip: &str, hostname: Option<&str>, ready: bool) -> Value {
    let mut e = json!({"addresses": [ip], "conditions": {"ready": ready}});
    if let Some(h) = hostname {
        e["hostname"] = json!(h);
    }
    e
}

/// The clusterset of the tests: `web` (ClusterSetIP), `db` (headless, a StatefulSet's
/// endpoints in east and plain endpoints in west), `empty` (headless, nothing ready).
async fn clusterset(c: &Cluster) {
    c.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}))
        .await;
    c.create(import(
        "web",
        "ClusterSetIP",
        &["127.60.0.10"],
        json!([
            {"name": "http", "protocol": "TCP", "port": 80},
            {"name": "grpc", "protocol": "TCP", "port": 9090},
            {"protocol": "TCP", "port": 8443}
        ]),
    ))
    .await;
    c.create(import(
        "db",
        "Headless",
        &[],
        json!([{"name": "pg", "protocol": "TCP", "port": 5432}]),
    ))
    .await;
    c.create(import(
        "empty",
        "Headless",
        &[],
        json!([{"name": "pg", "port": 5432}]),
    ))
    .await;
    c.create(mcs_slice(
        "db-east",
        "db",
        "east",
        json!([
            ep("127.20.1.5", Some("db-0"), true),
            ep("127.20.1.6", Some("db-1"), false)
        ]),
    ))
    .await;
    c.create(mcs_slice(
        "db-west",
        "db",
        "west",
        json!([ep("127.21.1.7", None, true)]),
    ))
    .await;
    c.create(mcs_slice(
        "empty-east",
        "empty",
        "east",
        json!([ep("127.20.1.8", Some("e-0"), false)]),
    ))
    .await;
}

const Z: &str = "svc.clusterset.local.";

#[tokio::test]
async fn clusterset_records_follow_the_mcs_dns_specification() {
    let c = Cluster::start().await;
    clusterset(&c).await;
    let dns = c.dns("east").await;
    let a = dns.addr;

    for tcp in [false, true] {
        // ClusterSetIP: the VIP; no AAAA (NODATA: NOERROR, no answer, SOA in authority).
        let m = query(a, &format!("web.shop.{Z}"), RecordType::A, tcp).await;
        assert_eq!(m.metadata.response_code, ResponseCode::NoError);
        assert!(m.metadata.authoritative);
        assert_eq!(answers(&m), ["127.60.0.10"]);
        assert_eq!(m.answers[0].ttl, sluice_dns::DEFAULT_TTL);
        let m = query(a, &format!("web.shop.{Z}"), RecordType::AAAA, tcp).await;
        assert_eq!(m.metadata.response_code, ResponseCode::NoError);
        assert!(m.answers.is_empty());
        assert_eq!(m.authorities.len(), 1, "SOA for negative caching");
    }

    // SRV per named port; the bare name gives every named port, never the unnamed one.
    let m = query(
        a,
        &format!("_http._tcp.web.shop.{Z}"),
        RecordType::SRV,
        false,
    )
    .await;
    assert_eq!(answers(&m), [format!("0 100 80 web.shop.{Z}")]);
    assert!(!m.additionals.is_empty(), "the VIP rides along");
    let m = query(a, &format!("web.shop.{Z}"), RecordType::SRV, false).await;
    assert_eq!(
        answers(&m),
        [
            format!("0 100 80 web.shop.{Z}"),
            format!("0 100 9090 web.shop.{Z}")
        ]
    );
    let m = query(
        a,
        &format!("_nope._tcp.web.shop.{Z}"),
        RecordType::SRV,
        false,
    )
    .await;
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
    let m = query(
        a,
        &format!("_http._udp.web.shop.{Z}"),
        RecordType::SRV,
        false,
    )
    .await;
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);

    // Headless: the ready endpoints of every cluster, the same subset for A and AAAA.
    let m = query(a, &format!("db.shop.{Z}"), RecordType::A, false).await;
    assert_eq!(answers(&m), ["127.20.1.5", "127.21.1.7"]);
    let m = query(a, &format!("db.shop.{Z}"), RecordType::AAAA, false).await;
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert!(m.answers.is_empty());
    // Per-endpoint names: hostname, or the dashed IP; unready endpoints do not exist.
    let m = query(a, &format!("db-0.east.db.shop.{Z}"), RecordType::A, false).await;
    assert_eq!(answers(&m), ["127.20.1.5"]);
    let m = query(
        a,
        &format!("127-21-1-7.west.db.shop.{Z}"),
        RecordType::A,
        true,
    )
    .await;
    assert_eq!(answers(&m), ["127.21.1.7"]);
    let m = query(a, &format!("db-1.east.db.shop.{Z}"), RecordType::A, false).await;
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
    let m = query(a, &format!("db-0.west.db.shop.{Z}"), RecordType::A, false).await;
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
    // `<clusterid>.<svc>...` is never served (an empty non-terminal, no records).
    for qtype in [RecordType::A, RecordType::SRV, RecordType::TXT] {
        let m = query(a, &format!("east.db.shop.{Z}"), qtype, false).await;
        assert_eq!(m.metadata.response_code, ResponseCode::NoError);
        assert!(m.answers.is_empty(), "{qtype}: {:?}", m.answers);
    }
    let m = query(a, &format!("north.db.shop.{Z}"), RecordType::A, false).await;
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
    // Headless SRV: one per ready endpoint per named port, at the endpoint's port.
    let m = query(a, &format!("_pg._tcp.db.shop.{Z}"), RecordType::SRV, false).await;
    assert_eq!(
        answers(&m),
        [
            format!("0 50 15432 127-21-1-7.west.db.shop.{Z}"),
            format!("0 50 15432 db-0.east.db.shop.{Z}"),
        ]
    );
    let m = query(a, &format!("db.shop.{Z}"), RecordType::SRV, false).await;
    assert_eq!(m.answers.len(), 2);

    // Headless with nothing ready: the name does not exist, for every type.
    for qtype in [RecordType::A, RecordType::AAAA, RecordType::SRV] {
        let m = query(a, &format!("empty.shop.{Z}"), qtype, false).await;
        assert_eq!(m.metadata.response_code, ResponseCode::NXDomain, "{qtype}");
    }
    let m = query(a, &format!("nothing.shop.{Z}"), RecordType::A, false).await;
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
    assert_eq!(m.authorities.len(), 1, "SOA with NXDOMAIN");
    // Empty non-terminals above services exist.
    let m = query(a, "shop.svc.clusterset.local.", RecordType::A, false).await;
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    let m = query(a, "other.svc.clusterset.local.", RecordType::A, false).await;
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);

    // The zone itself: schema version, SOA, NS (with the server's address as glue).
    let m = query(a, "dns-version.clusterset.local.", RecordType::TXT, false).await;
    assert_eq!(answers(&m), ["1.0.0"]);
    let m = query(a, "clusterset.local.", RecordType::SOA, false).await;
    assert_eq!(m.answers.len(), 1);
    let m = query(a, "clusterset.local.", RecordType::NS, true).await;
    assert_eq!(answers(&m), ["ns.clusterset.local."]);
    assert_eq!(m.additionals.len(), 1);
}

#[tokio::test]
async fn changes_in_the_api_are_answered_at_once() {
    let c = Cluster::start().await;
    clusterset(&c).await;
    let dns = c.dns("east").await;
    let a = dns.addr;

    // db-0 turns unready: it leaves the service's answer and its own name.
    let start = std::time::Instant::now();
    c.apply(mcs_slice(
        "db-east",
        "db",
        "east",
        json!([
            ep("127.20.1.5", Some("db-0"), false),
            ep("127.20.1.6", Some("db-1"), false)
        ]),
    ))
    .await;
    let took = until(Duration::from_secs(5), || async {
        answers(&query(a, &format!("db.shop.{Z}"), RecordType::A, false).await) == ["127.21.1.7"]
    })
    .await
    .expect("unready endpoint left the answer");
    println!(
        "endpoint turned unready: answered {:?} after the write returned ({:?} after it started)",
        took,
        start.elapsed()
    );
    let m = query(a, &format!("db-0.east.db.shop.{Z}"), RecordType::A, false).await;
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);

    // A new import resolves as soon as its create returns.
    let start = std::time::Instant::now();
    c.create(import(
        "late",
        "ClusterSetIP",
        &["127.60.0.99"],
        json!([{"name": "http", "port": 80}]),
    ))
    .await;
    let took = until(Duration::from_secs(5), || async {
        answers(&query(a, &format!("late.shop.{Z}"), RecordType::A, false).await) == ["127.60.0.99"]
    })
    .await
    .expect("new import resolves");
    println!(
        "new ServiceImport: answered {took:?} after the create returned ({:?} in all)",
        start.elapsed()
    );
    // And goes when deleted.
    c.delete(import("late", "ClusterSetIP", &[], json!([])))
        .await;
    until(Duration::from_secs(5), || async {
        query(a, &format!("late.shop.{Z}"), RecordType::A, false)
            .await
            .metadata
            .response_code
            == ResponseCode::NXDomain
    })
    .await
    .expect("deleted import is NXDOMAIN");
}

#[tokio::test]
async fn cluster_local_serves_services_endpoints_and_pods() {
    let c = Cluster::start().await;
    c.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}))
        .await;
    let api = c
        .create(json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "api", "namespace": "shop"},
            "spec": {"selector": {"app": "api"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}))
        .await;
    let cluster_ip = api.data["spec"]["clusterIP"].as_str().unwrap().to_string();
    c.create(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "pods", "namespace": "shop"},
        "spec": {"clusterIP": "None", "selector": {"app": "db"}, "ports": [{"name": "pg", "port": 5432}]}}))
        .await;
    c.create(json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "pods-ipv4", "namespace": "shop", "labels": {"kubernetes.io/service-name": "pods"}},
        "addressType": "IPv4",
        "ports": [{"name": "pg", "protocol": "TCP", "port": 5432}],
        "endpoints": [ep("127.20.1.9", Some("p-0"), true)]}))
        .await;
    c.create(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "out", "namespace": "shop"},
        "spec": {"type": "ExternalName", "externalName": "example.com"}}))
        .await;
    c.create(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p-0", "namespace": "shop"},
        "spec": {"containers": [{"name": "c", "image": "sluice/echo"}]}}))
        .await;
    c.patch_status(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p-0", "namespace": "shop"},
        "status": {"podIP": "127.20.1.9", "podIPs": [{"ip": "127.20.1.9"}]}}))
        .await;
    let dns = c.dns("east").await;
    let a = dns.addr;

    let m = query(
        a,
        "kubernetes.default.svc.cluster.local.",
        RecordType::A,
        false,
    )
    .await;
    assert_eq!(answers(&m), ["127.40.0.1"]);
    let m = query(a, "api.shop.svc.cluster.local.", RecordType::A, false).await;
    assert_eq!(answers(&m), [cluster_ip]);
    let m = query(
        a,
        "_http._tcp.api.shop.svc.cluster.local.",
        RecordType::SRV,
        false,
    )
    .await;
    assert_eq!(answers(&m), ["0 100 80 api.shop.svc.cluster.local."]);
    let m = query(a, "pods.shop.svc.cluster.local.", RecordType::A, false).await;
    assert_eq!(answers(&m), ["127.20.1.9"]);
    let m = query(a, "p-0.pods.shop.svc.cluster.local.", RecordType::A, true).await;
    assert_eq!(answers(&m), ["127.20.1.9"]);
    let m = query(
        a,
        "_pg._tcp.pods.shop.svc.cluster.local.",
        RecordType::SRV,
        false,
    )
    .await;
    assert_eq!(answers(&m), ["0 100 5432 p-0.pods.shop.svc.cluster.local."]);
    let m = query(a, "out.shop.svc.cluster.local.", RecordType::A, false).await;
    assert_eq!(answers(&m), ["example.com."]);
    let until_pod = until(Duration::from_secs(5), || async {
        answers(
            &query(
                a,
                "127-20-1-9.shop.pod.cluster.local.",
                RecordType::A,
                false,
            )
            .await,
        ) == ["127.20.1.9"]
    })
    .await;
    assert!(until_pod.is_some(), "pod A record");
    let m = query(
        a,
        "127-20-1-10.shop.pod.cluster.local.",
        RecordType::A,
        false,
    )
    .await;
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
    let m = query(a, "nope.shop.svc.cluster.local.", RecordType::A, false).await;
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
}

#[tokio::test]
async fn other_names_are_forwarded_and_cached() {
    let c = Cluster::start().await;
    clusterset(&c).await;
    // The upstream: another server whose clusterset zone is `upstream.test`.
    let mut up = sluice_dns::Config::new(c.client.clone(), "west");
    up.zone = "upstream.test".into();
    up.cluster_zone = None;
    let upstream = sluice_dns::build(up).await.unwrap();
    support::wait_synced(&upstream).await;
    let mut cfg = sluice_dns::Config::new(c.client.clone(), "east");
    cfg.forward = Some(upstream.addr);
    let dns = sluice_dns::build(cfg).await.unwrap();
    support::wait_synced(&dns).await;

    for _ in 0..3 {
        let m = query(
            dns.addr,
            "web.shop.svc.upstream.test.",
            RecordType::A,
            false,
        )
        .await;
        assert_eq!(answers(&m), ["127.60.0.10"]);
        assert!(!m.metadata.authoritative);
        assert!(m.metadata.recursion_available);
    }
    let m = query(
        dns.addr,
        "nope.shop.svc.upstream.test.",
        RecordType::A,
        true,
    )
    .await;
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
    assert_eq!(dns.state.metrics.cache_misses.get(), 2);
    assert_eq!(dns.state.metrics.cache_hits.get(), 2);

    // Without an upstream, other names are refused.
    let alone = c.dns("east").await;
    let m = query(alone.addr, "example.com.", RecordType::A, false).await;
    assert_eq!(m.metadata.response_code, ResponseCode::Refused);
}

#[tokio::test]
async fn answers_are_servfail_until_the_informers_synced() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // An API server that is not there: the informers never list.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://{}", dead.local_addr().unwrap());
    drop(dead);
    let mut config = kube::Config::new(url.parse().unwrap());
    config.accept_invalid_certs = true;
    let client = kube::Client::try_from(config).unwrap();
    let dns = sluice_dns::build(sluice_dns::Config::new(client, "east"))
        .await
        .unwrap();
    let m = query(dns.addr, &format!("web.shop.{Z}"), RecordType::A, false).await;
    assert_eq!(m.metadata.response_code, ResponseCode::ServFail);
    let readyz = reqwest_status(dns.admin, "/readyz").await;
    assert_eq!(readyz, 503);

    // A synced server is ready, and its metrics count queries by type and rcode.
    let c = Cluster::start().await;
    clusterset(&c).await;
    let dns = c.dns("east").await;
    query(dns.addr, &format!("web.shop.{Z}"), RecordType::A, false).await;
    assert_eq!(reqwest_status(dns.admin, "/readyz").await, 200);
    let metrics = get(dns.admin, "/metrics").await;
    assert!(
        metrics.contains(
            r#"sluice_dns_queries_total{qtype="A",rcode="No Error",zone="clusterset"} 1"#
        ),
        "{metrics}"
    );
    assert!(metrics.contains(r#"sluice_dns_objects{kind="serviceimports"} 3"#));
}

async fn get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

async fn reqwest_status(addr: std::net::SocketAddr, path: &str) -> u16 {
    let resp = get(addr, path).await;
    resp.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn large_answers_truncate_over_udp_and_complete_over_tcp() {
    let c = Cluster::start().await;
    clusterset(&c).await;
    let endpoints: Vec<Value> = (0..80)
        .map(|i| {
            ep(
                &format!("127.20.2.{}", i + 1),
                Some(&format!("big-{i}")),
                true,
            )
        })
        .collect();
    c.create(import(
        "big",
        "Headless",
        &[],
        json!([{"name": "pg", "port": 5432}]),
    ))
    .await;
    c.create(mcs_slice("big-east", "big", "east", json!(endpoints)))
        .await;
    let dns = c.dns("east").await;
    let udp = query(
        dns.addr,
        &format!("_pg._tcp.big.shop.{Z}"),
        RecordType::SRV,
        false,
    )
    .await;
    assert!(
        udp.metadata.truncation,
        "80 SRV records do not fit 1232 bytes"
    );
    let tcp = query(
        dns.addr,
        &format!("_pg._tcp.big.shop.{Z}"),
        RecordType::SRV,
        true,
    )
    .await;
    assert!(!tcp.metadata.truncation);
    assert_eq!(tcp.answers.len(), 80);
}

/// The same answers through real resolvers' tools (dig from BIND, kdig from Knot).
#[tokio::test]
async fn dig_and_kdig_agree() {
    let c = Cluster::start().await;
    clusterset(&c).await;
    let dns = c.dns("east").await;
    let cases = format!(
        "web.shop.{Z} A NOERROR 127.60.0.10
web.shop.{Z} AAAA NOERROR -
_http._tcp.web.shop.{Z} SRV NOERROR 0,100,80,web.shop.{Z}
web.shop.{Z} SRV NOERROR 0,100,80,web.shop.{Z} 0,100,9090,web.shop.{Z}
db.shop.{Z} A NOERROR 127.20.1.5 127.21.1.7
db-0.east.db.shop.{Z} A NOERROR 127.20.1.5
127-21-1-7.west.db.shop.{Z} A NOERROR 127.21.1.7
db-1.east.db.shop.{Z} A NXDOMAIN -
east.db.shop.{Z} A NOERROR -
_pg._tcp.db.shop.{Z} SRV NOERROR 0,50,15432,db-0.east.db.shop.{Z} 0,50,15432,127-21-1-7.west.db.shop.{Z}
empty.shop.{Z} A NXDOMAIN -
dns-version.clusterset.local. TXT NOERROR \"1.0.0\"
kubernetes.default.svc.cluster.local. A NOERROR 127.40.0.1
example.com. A REFUSED -
"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cases");
    std::fs::write(&file, cases).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/dig.sh");
    let host = dns.addr.ip().to_string();
    let port = dns.addr.port().to_string();
    let out = tokio::process::Command::new("bash")
        .args([script, &host, &port, file.to_str().unwrap()])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}{stderr}");
    assert!(out.status.success(), "dig.sh failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("kdig"), "kdig ran too");
}

/// A namespace Sluice placed here for namespace `ns` of logical cluster `path`, as the
/// syncer writes it.
fn placed_namespace(path: &str, ns: &str) -> (String, Value) {
    let p: sluice_api::LogicalClusterPath = path.parse().unwrap();
    let name = sluice_api::sync::legacy_downstream_namespace(&p, ns);
    let v = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": name,
        "labels": {"sluice.dev/logical-cluster": sluice_api::sync::logical_cluster_label_value(&p)},
        "annotations": {"sluice.dev/logical-cluster": path, "sluice.dev/upstream-namespace": ns}
    }});
    (name, v)
}

/// A pod at `ip` in namespace `ns`.
async fn pod_at(c: &Cluster, ns: &str, name: &str, ip: &str) {
    c.create(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"containers": [{"name": "c", "image": "sluice/echo"}]}}))
        .await;
    c.patch_status(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "status": {"podIP": ip, "podIPs": [{"ip": ip}]}}))
        .await;
}

/// Apps written for one cluster keep their names: a pod Sluice placed, asking for
/// `<svc>.<ns>.svc.cluster.local` (or the form its search path makes of a short name) of a
/// Service of its own logical cluster, gets that Service's clusterset answer here, wherever
/// the Service runs; pods of other logical clusters, or not placed by Sluice, do not.
#[tokio::test]
async fn placed_pods_reach_their_logical_clusters_services_by_ordinary_names() {
    let c = Cluster::start().await;
    let (shop, shop_ns) = placed_namespace("root", "shop");
    let (client, client_ns) = placed_namespace("root", "client");
    let (other, other_ns) = placed_namespace("root:other", "client");
    for ns in [shop_ns, client_ns, other_ns] {
        c.create(ns).await;
    }
    c.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "plain"}}))
        .await;
    // `web` runs elsewhere: only its import is here. `db` is headless, ready in west.
    for (name, ty, ips) in [
        ("web", "ClusterSetIP", vec!["127.61.0.10"]),
        ("db", "Headless", vec![]),
    ] {
        let mut si = import(
            name,
            ty,
            &ips,
            json!([{"name": "http", "protocol": "TCP", "port": 80}]),
        );
        si["metadata"]["namespace"] = json!(shop);
        c.create(si).await;
    }
    let mut slice = mcs_slice(
        "db-west",
        "db",
        "west",
        json!([
            ep("127.21.1.7", None, true),
            ep("127.21.1.8", Some("db-0"), true)
        ]),
    );
    slice["metadata"]["namespace"] = json!(shop);
    c.create(slice).await;
    pod_at(&c, &client, "consumer", "127.21.1.20").await;
    pod_at(&c, &other, "stranger", "127.21.1.21").await;
    pod_at(&c, "plain", "plain", "127.21.1.22").await;
    let dns = c.dns("west").await;
    let a = dns.addr;

    // The pod's informers may lag the creates: wait for the first answer.
    let web = "web.shop.svc.cluster.local.";
    let first = until(Duration::from_secs(10), || async {
        answers(&query_from(a, "127.21.1.20", web, RecordType::A).await) == ["127.61.0.10"]
    })
    .await;
    assert!(first.is_some(), "{web} from the consumer");
    let from = |q: &'static str, t| query_from(a, "127.21.1.20", q, t);
    // The search path's forms: `web.<own ns>.svc…` for `web`, the logical name for `web.shop`.
    let own = format!("web.{shop}.svc.cluster.local.");
    let m = query_from(a, "127.21.1.20", &own, RecordType::A).await;
    assert_eq!(answers(&m), ["127.61.0.10"]);
    let m = from("_http._tcp.web.shop.svc.cluster.local.", RecordType::SRV).await;
    assert_eq!(answers(&m), ["0 100 80 web.shop.svc.cluster.local."]);
    let m = from("db.shop.svc.cluster.local.", RecordType::A).await;
    assert_eq!(answers(&m), ["127.21.1.7", "127.21.1.8"]);
    // A StatefulSet's Pod by the name it has in one cluster.
    let m = from("db-0.db.shop.svc.cluster.local.", RecordType::A).await;
    assert_eq!(answers(&m), ["127.21.1.8"]);
    let m = from("shop.svc.cluster.local.", RecordType::A).await;
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    // Names that are no Service of its logical cluster answer as for anyone.
    let m = from("kubernetes.default.svc.cluster.local.", RecordType::A).await;
    assert_eq!(answers(&m), ["127.40.0.1"]);
    let m = from("nope.shop.svc.cluster.local.", RecordType::A).await;
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
    // Another logical cluster's pod, a pod Sluice did not place, and no pod at all.
    for src in ["127.21.1.21", "127.21.1.22", "127.0.0.1"] {
        let m = query_from(a, src, web, RecordType::A).await;
        assert_eq!(
            m.metadata.response_code,
            ResponseCode::NXDomain,
            "from {src}"
        );
    }

    // The same through dig and kdig, sent from the consumer's address.
    let cases = format!(
        "{web} A NOERROR 127.61.0.10
{own} A NOERROR 127.61.0.10
_http._tcp.{web} SRV NOERROR 0,100,80,{web}
db.shop.svc.cluster.local. A NOERROR 127.21.1.7 127.21.1.8
db-0.db.shop.svc.cluster.local. A NOERROR 127.21.1.8
kubernetes.default.svc.cluster.local. A NOERROR 127.40.0.1
"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cases");
    std::fs::write(&file, cases).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/dig.sh");
    let out = tokio::process::Command::new("bash")
        .args([
            script,
            &a.ip().to_string(),
            &a.port().to_string(),
            file.to_str().unwrap(),
        ])
        .env("DIG_SOURCE", "127.21.1.20")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "dig.sh failed:\n{stdout}\n{stderr}");

    // The consumer's namespace leaves Sluice (its label goes): its names are its own again.
    c.patch(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": client, "labels": {"sluice.dev/logical-cluster": null}}}),
    )
    .await;
    let gone = until(Duration::from_secs(10), || async {
        query_from(a, "127.21.1.20", web, RecordType::A)
            .await
            .metadata
            .response_code
            == ResponseCode::NXDomain
    })
    .await;
    assert!(gone.is_some(), "answered after the namespace left Sluice");
}
