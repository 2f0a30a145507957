#![allow(clippy::unwrap_used)]
//! Tenants apart (issue: tenants apart): what fairness between tenants costs and what it
//! buys. Two API servers side by side in one run — fairness on (the default) and off
//! (`--enable-priority-and-fairness=false`) — each driven with kube-rs:
//!
//! 1. a tenant's sequential creates, p50 / p99 on each server, and the ratio;
//! 2. the same tenant flooding with 64 parallel clients while a system identity (a
//!    syncer's writes are system flows) writes sequentially: the system writer's p50 / p99
//!    under the flood on each server, and how many of the flood's requests were served or
//!    told 429.
//!
//!     cargo bench -p sluice --bench tenancy
//!
//! Environment: `SLUICE_BENCH_OPS` (sequential creates per figure, default 2000),
//! `SLUICE_BENCH_FLOOD_SECS` (default 10).

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::json;
use sluice_test_support::stats::{Latencies, env_usize, ms};
use support::Control;

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"key": "x".repeat(64)}}))
        .unwrap()
}

/// A kube-rs client of `cluster` presenting `token`; 429s are not retried (they are counted).
async fn client_as(control: &Control, cluster: &str, token: &str) -> kube::Client {
    let ca = std::fs::read_to_string(control.dir.join("ca.crt")).unwrap();
    let path = control
        .dir
        .join(format!("{cluster}-{}.kubeconfig", token.len()));
    std::fs::write(
        &path,
        sluice_control::pki::kubeconfig(
            &format!("{}/clusters/{cluster}", control.url),
            &ca,
            cluster,
            "user",
            token.trim(),
        ),
    )
    .unwrap();
    let mut config = sluice_test_support::client::config(&path, None).await;
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

struct Server {
    label: &'static str,
    control: Control,
    _dir: tempfile::TempDir,
}

/// A server with tenant `alice` (cluster-admin of `root:a`).
async fn server(label: &'static str, extra: &[&str]) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "alice-token,alice,1001\n").unwrap();
    let mut args = vec!["--token-auth-file", tokens.to_str().unwrap()];
    args.extend_from_slice(extra);
    let control = Control::start(&dir.path().join("control"), &args);
    let admin_token = std::fs::read_to_string(control.dir.join("admin.token")).unwrap();
    let root = client_as(&control, "root", &admin_token).await;
    let ws = kube::discovery::ApiResource {
        group: "sluice.dev".into(),
        version: "v1alpha1".into(),
        api_version: "sluice.dev/v1alpha1".into(),
        kind: "Workspace".into(),
        plural: "workspaces".into(),
    };
    let workspaces: Api<kube::api::DynamicObject> = Api::all_with(root, &ws);
    workspaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "Workspace", "metadata": {"name": "a"}})).unwrap(),
        )
        .await
        .unwrap();
    let a = client_as(&control, "root:a", &admin_token).await;
    let bindings: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(a);
    for _ in 0..100 {
        let made = bindings
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": "alice-admin"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                    "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}]
                }))
                .unwrap(),
            )
            .await;
        if made.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Server {
        label,
        control,
        _dir: dir,
    }
}

/// `ops` sequential creates in `default` through `client`, named `prefix-i`.
async fn sequential(client: kube::Client, prefix: &str, ops: usize) -> Latencies {
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut l = Latencies::default();
    for i in 0..ops {
        let t = Instant::now();
        api.create(&PostParams::default(), &cm(&format!("{prefix}-{i}")))
            .await
            .unwrap();
        l.0.push(t.elapsed());
    }
    l
}

struct Flood {
    system: Latencies,
    served: u64,
    refused: u64,
    failed: u64,
}

/// alice floods with 64 clients for `secs` while the admin writes sequentially.
async fn flood(s: &Server, secs: u64) -> Flood {
    let admin_token = std::fs::read_to_string(s.control.dir.join("admin.token")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (served, refused, failed) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut tasks = Vec::new();
    for c in 0..64 {
        let client = client_as(&s.control, "root:a", "alice-token").await;
        let (stop, served, refused, failed) = (
            stop.clone(),
            served.clone(),
            refused.clone(),
            failed.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let api: Api<ConfigMap> = Api::namespaced(client, "default");
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                match api
                    .create(&PostParams::default(), &cm(&format!("flood-{c}-{i}")))
                    .await
                {
                    Ok(_) => served.fetch_add(1, Ordering::Relaxed),
                    Err(kube::Error::Api(e)) if e.code == 429 => {
                        refused.fetch_add(1, Ordering::Relaxed)
                    }
                    Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    // Let the flood build up, then time the system's writes while it lasts.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let system = client_as(&s.control, "root:a", &admin_token).await;
    let api: Api<ConfigMap> = Api::namespaced(system, "default");
    let mut l = Latencies::default();
    let until = Instant::now() + Duration::from_secs(secs);
    let mut i = 0;
    while Instant::now() < until {
        i += 1;
        let t = Instant::now();
        api.create(&PostParams::default(), &cm(&format!("system-{i}")))
            .await
            .unwrap();
        l.0.push(t.elapsed());
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    Flood {
        system: l,
        served: served.load(Ordering::Relaxed),
        refused: refused.load(Ordering::Relaxed),
        failed: failed.load(Ordering::Relaxed),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let ops = env_usize("SLUICE_BENCH_OPS", 2000);
    let secs = env_usize("SLUICE_BENCH_FLOOD_SECS", 10) as u64;
    println!(
        "sluice tenancy benchmark: ops={ops} flood={secs}s (machine: {} cores)",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
    let servers = [
        server("fairness on", &[]).await,
        server("fairness off", &["--enable-priority-and-fairness=false"]).await,
    ];

    // 1. A tenant's sequential creates, alternating servers in rounds so both see the
    // same machine.
    let mut creates = [Latencies::default(), Latencies::default()];
    for round in 0..4 {
        for (i, s) in servers.iter().enumerate() {
            let alice = client_as(&s.control, "root:a", "alice-token").await;
            let l = sequential(alice, &format!("seq-{round}"), ops / 4).await;
            creates[i].0.extend(l.0);
        }
    }
    println!("\ntenant create, sequential ({ops} per server):");
    for (s, l) in servers.iter().zip(creates.iter_mut()) {
        l.line(&format!("  {}", s.label));
    }
    let ratio = creates[0].pct(0.99).as_secs_f64() / creates[1].pct(0.99).as_secs_f64();
    println!("  p99 ratio on/off: {ratio:.2}");

    // 2. The flood.
    println!("\n64 tenant clients flooding while a system identity writes ({secs} s):");
    let mut floods = Vec::new();
    for s in &servers {
        floods.push(flood(s, secs).await);
    }
    for (s, f) in servers.iter().zip(floods.iter_mut()) {
        println!(
            "  {:<13} system writes: {} (p50 {:.3} ms, p99 {:.3} ms); tenant: {} served, {} told 429, {} failed otherwise",
            s.label,
            f.system.0.len(),
            ms(f.system.pct(0.50)),
            ms(f.system.pct(0.99)),
            f.served,
            f.refused,
            f.failed
        );
    }
    let ratio = floods[1].system.pct(0.99).as_secs_f64() / floods[0].system.pct(0.99).as_secs_f64();
    println!("  system p99 off/on: {ratio:.2}");
}
