#![allow(clippy::unwrap_used)]
//! Endpoint propagation across the clusterset (issue: mcs, done-when 2): an endpoint of
//! one cluster changes (its readiness flips in the Service's own EndpointSlice) — how long
//! until every cluster's dataplane routes by it? Timed from just before the write to the
//! moment the last of the three dataplanes shows the new endpoint set for the service's
//! clusterset VIP (polled on their admin `/config_dump?service=...`, every 1 ms).
//!
//! Scale: SERVICES (1,000) services in each of 3 clusters, 10 endpoints each, all exported
//! (implicitly: the namespace is marked as placed by Sluice), so each dataplane holds
//! 1,000 VIP listeners with 30 endpoints each plus 1,000 ClusterIP listeners, and the MCS
//! controller keeps 3,000 imports and 9,000 MCS EndpointSlices.
//!
//!     cargo bench -p sluice --bench mcs        (SLUICE_BENCH_SERVICES, SLUICE_BENCH_CHANGES)
//!
//! Target: p99 < 100 ms.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

#[path = "../tests/support/mod.rs"]
mod support;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

const CLUSTERS: [&str; 3] = ["east", "west", "north"];
const ENDPOINTS: usize = 10;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn ip(cluster: usize, svc: usize, ep: usize) -> String {
    format!(
        "127.{}.{}.{}",
        20 + cluster,
        10 + svc / 25,
        (svc % 25) * 10 + ep + 1
    )
}

fn slice(cluster: usize, svc: usize, ready: &[bool]) -> serde_json::Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {
            "name": format!("svc-{svc}-own"), "namespace": "bench",
            "labels": {"kubernetes.io/service-name": format!("svc-{svc}"),
                       "endpointslice.kubernetes.io/managed-by": "bench"},
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": (0..ENDPOINTS).map(|e| json!({
            "addresses": [ip(cluster, svc, e)],
            "conditions": {"ready": ready[e]},
        })).collect::<Vec<_>>(),
    })
}

/// Endpoint count of `service` in the dataplane at `admin`; `None` if absent.
fn endpoints_in(admin: &str, service: &str) -> Option<usize> {
    let q: String = form_urlencoded::byte_serialize(service.as_bytes()).collect();
    let mut s = std::net::TcpStream::connect(admin).ok()?;
    s.write_all(
        format!("GET /config_dump?service={q} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let body: serde_json::Value = serde_json::from_str(out.split("\r\n\r\n").nth(1)?).ok()?;
    body["services"][0]["endpoints"].as_array().map(|a| {
        a.iter()
            .filter(|e| e["draining"] == false && e["weight"].as_u64() != Some(0))
            .count()
    })
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let services = env("SLUICE_BENCH_SERVICES", 1000);
    let changes = env("SLUICE_BENCH_CHANGES", 200);
    let (dev, _) = support::DevUp::start(&CLUSTERS.join(","));
    let mut clients = Vec::new();
    for c in CLUSTERS {
        let path = dev.state.join(format!("clusters/{c}.kubeconfig"));
        clients.push(sluice_kube::client::from_kubeconfig(&path).await.unwrap());
    }
    let admins: Vec<String> = (0..3)
        .map(|i| format!("127.{}.0.1:15000", 20 + i))
        .collect();

    // Setup: namespace (placed: implicit export), Services without selector, their slices.
    let setup = Instant::now();
    for (ci, client) in clients.iter().enumerate() {
        let ns: Namespace = serde_json::from_value(json!({
            "metadata": {"name": "bench", "labels": {"sluice.dev/logical-cluster": "root.bench"}},
        }))
        .unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        let svcs: Api<Service> = Api::namespaced(client.clone(), "bench");
        let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "bench");
        futures::stream::iter(0..services)
            .map(|i| {
                let (svcs, slices) = (svcs.clone(), slices.clone());
                async move {
                    let svc: Service = serde_json::from_value(json!({
                        "metadata": {"name": format!("svc-{i}"), "namespace": "bench"},
                        "spec": {"ports": [{"name": "http", "port": 8080, "targetPort": 8080}]},
                    }))
                    .unwrap();
                    svcs.create(&PostParams::default(), &svc).await.unwrap();
                    let sl: EndpointSlice =
                        serde_json::from_value(slice(ci, i, &[true; ENDPOINTS])).unwrap();
                    slices.create(&PostParams::default(), &sl).await.unwrap();
                }
            })
            .buffer_unordered(32)
            .for_each(|_| async {})
            .await;
    }
    let written = setup.elapsed();
    let name = |i: usize| format!("bench/svc-{i}:http (clusterset)");
    let full = 3 * ENDPOINTS;
    let deadline = Instant::now() + Duration::from_secs(600);
    for i in (0..services).rev() {
        for a in &admins {
            while endpoints_in(a, &name(i)) != Some(full) {
                assert!(Instant::now() < deadline, "the clusterset did not converge");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    eprintln!(
        "setup: {} services x 3 clusters x {ENDPOINTS} endpoints written in {:.1} s, converged in {:.1} s",
        services,
        written.as_secs_f64(),
        setup.elapsed().as_secs_f64()
    );

    // Changes: flip one endpoint's readiness; wait for all three dataplanes.
    let mut state = vec![vec![[true; ENDPOINTS]; services]; 3];
    let mut took = Vec::with_capacity(changes);
    let mut rng_state: u64 = 0x9e3779b97f4a7c15;
    let mut next = |n: usize| {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        (rng_state % n as u64) as usize
    };
    for _ in 0..changes {
        let (c, i, e) = (next(3), next(services), next(ENDPOINTS));
        state[c][i][e] = !state[c][i][e];
        let expected: usize = (0..3)
            .map(|c| state[c][i].iter().filter(|r| **r).count())
            .sum();
        let slices: Api<EndpointSlice> = Api::namespaced(clients[c].clone(), "bench");
        let body = slice(c, i, &state[c][i]);
        let t0 = Instant::now();
        slices
            .patch(
                &format!("svc-{i}-own"),
                &PatchParams::default(),
                &Patch::Merge(&body),
            )
            .await
            .unwrap();
        let svc = name(i);
        let waits = admins.iter().map(|a| {
            let (a, svc) = (a.clone(), svc.clone());
            tokio::task::spawn_blocking(move || {
                let limit = Instant::now() + Duration::from_secs(30);
                while endpoints_in(&a, &svc) != Some(expected) {
                    if Instant::now() > limit {
                        return None;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                Some(t0.elapsed())
            })
        });
        let all = futures::future::join_all(waits).await;
        let last = all
            .into_iter()
            .map(|r| r.ok().flatten().expect("a dataplane never saw the change"))
            .max()
            .unwrap();
        if std::env::var_os("SLUICE_BENCH_VERBOSE").is_some() {
            let since_epoch = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .saturating_sub(t0.elapsed());
            eprintln!(
                "change: cluster {c} svc-{i} at {:.6} took {:.1} ms",
                since_epoch.as_secs_f64(),
                last.as_secs_f64() * 1000.0
            );
        }
        took.push(last);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    took.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let p99 = percentile(&took, 0.99);
    println!(
        "endpoint change -> every dataplane routes by it ({} services x 3 clusters x {ENDPOINTS} endpoints, {} changes):",
        services,
        took.len()
    );
    println!(
        "  p50 {:.1} ms  p90 {:.1} ms  p99 {:.1} ms  max {:.1} ms   (target p99 < 100 ms: {:.2}x of target, {})",
        ms(percentile(&took, 0.5)),
        ms(percentile(&took, 0.9)),
        ms(p99),
        ms(*took.last().unwrap()),
        ms(p99) / 100.0,
        if ms(p99) < 100.0 { "met" } else { "NOT met" }
    );
    drop(dev);
}
