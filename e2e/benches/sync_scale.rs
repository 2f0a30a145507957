#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The syncer at scale: a control plane (with its placement controllers) and one physical
//! cluster's API server in this process, the syncer as its own process (`sluice syncer`,
//! so its memory and CPU are its own).
//!
//! 1. `WORKSPACES` logical clusters, each with a namespace placed on `east` and `PER_WS`
//!    ConfigMaps: the time until every one is downstream, and the syncer's RSS.
//! 2. `QUIET` seconds with nothing changing: the syncer's CPU and its writes (its /metrics).
//! 3. `SAMPLES` single ConfigMaps created upstream one after another: the time from the
//!    create request until a downstream watch delivers the copy (p50, p99, max), against
//!    Karmada's published distribution p99 at 100 clusters (1.30 s push, 0.99 s pull).
//!
//! ```text
//! cargo build --release -p sluice && cargo bench -p sluice-e2e --bench sync_scale
//! WORKSPACES=100 PER_WS=100 cargo bench -p sluice-e2e --bench sync_scale   # 10,000 objects
//! ```

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use serde_json::json;
use sluice_api::LogicalClusterPath;
use sluice_api::sync::ANNOTATION_DOWNSTREAM_NAMESPACE;
use sluice_test_support::client::client;
use sluice_test_support::poll::{eventually, until_every};

/// Karmada's published distribution latency p99 at 100 clusters.
const KARMADA_PUSH_P99: f64 = 1.30;
const KARMADA_PULL_P99: f64 = 0.99;
const WITHIN: Duration = Duration::from_secs(600);

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The syncer process, killed when dropped.
struct Process(std::process::Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Process {
    fn pid(&self) -> u32 {
        self.0.id()
    }
}

/// Resident memory of `pid`, MiB.
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

/// CPU time (user + system) `pid` has used, seconds.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat; the 12th and 13th after the ')'.
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|i| fields.get(*i)?.parse::<f64>().ok())
        .sum();
    ticks / 100.0
}

/// The syncer's writes so far, from its /metrics.
async fn writes(admin: SocketAddr) -> f64 {
    let text = sluice_test_support::http::get(admin, "localhost", "/metrics").await;
    text.lines()
        .filter(|l| l.starts_with("sluice_syncer_writes_total"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

fn free_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
}

fn sluice_binary() -> PathBuf {
    let path = std::env::var_os("SLUICE")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/sluice"));
    assert!(
        path.exists(),
        "{} is missing: cargo build --release -p sluice (or set SLUICE)",
        path.display()
    );
    path
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p / 100.0).ceil() as usize).clamp(1, sorted.len());
    sorted[i - 1]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let workspaces = env("WORKSPACES", 100);
    let per_ws = env("PER_WS", 10);
    let quiet = env("QUIET", 20);
    let samples = env("SAMPLES", 200);
    let total = workspaces * per_ws;
    let binary = sluice_binary();

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
    down_config.single_cluster = Some("127.42.0.0/16".parse().unwrap());
    let east = sluice_control::build(down_config).await.unwrap();
    let root = client(&control.admin_kubeconfig, None).await;
    let downstream = client(&east.admin_kubeconfig, None).await;

    let cluster = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("sluice.dev", "v1alpha1", "Cluster"),
        "clusters",
    );
    Api::<kube::api::DynamicObject>::all_with(root.clone(), &cluster)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"apiVersion": "sluice.dev/v1alpha1",
                "kind": "Cluster", "metadata": {"name": "east"}, "spec": {}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let admin = free_port();
    let log = std::fs::File::create(up_dir.path().join("syncer.log")).unwrap();
    let syncer = Process(
        std::process::Command::new(&binary)
            .args(["syncer", "--cluster", "east", "--admin", &admin.to_string()])
            .arg("--control")
            .arg(&control.admin_kubeconfig)
            .arg("--downstream")
            .arg(&east.admin_kubeconfig)
            .env("SLUICE_LOG", "warn")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    assert!(
        eventually(Duration::from_secs(60), || async {
            tokio::net::TcpStream::connect(admin).await.is_ok()
                && sluice_test_support::http::get(admin, "localhost", "/readyz")
                    .await
                    .starts_with("HTTP/1.1 200")
        })
        .await,
        "the syncer became ready; its log:\n{}",
        std::fs::read_to_string(up_dir.path().join("syncer.log")).unwrap_or_default()
    );

    // When each synced ConfigMap first arrived downstream, by (namespace, name).
    let arrived: Arc<Mutex<HashMap<(String, String), Instant>>> = Arc::default();
    let record = arrived.clone();
    let _downstream = sluice_kube::Informer::start_with(
        Api::<ConfigMap>::all(downstream.clone()),
        watcher::Config::default().labels("sluice.dev/synced=true"),
        "configmaps",
        move |e| {
            let at = Instant::now();
            if let watcher::Event::Apply(cm) | watcher::Event::InitApply(cm) = e
                && let (Some(ns), Some(name)) = (&cm.metadata.namespace, &cm.metadata.name)
            {
                record
                    .lock()
                    .unwrap()
                    .entry((ns.clone(), name.clone()))
                    .or_insert(at);
            }
        },
    );

    // 1. Many logical clusters, each with its objects.
    let workspace = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("sluice.dev", "v1alpha1", "Workspace"),
        "workspaces",
    );
    let rss_before = rss_mib(syncer.pid());
    let t0 = Instant::now();
    let mut clients = Vec::new();
    for w in 0..workspaces {
        Api::<kube::api::DynamicObject>::all_with(root.clone(), &workspace)
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"apiVersion": "sluice.dev/v1alpha1",
                    "kind": "Workspace", "metadata": {"name": format!("w{w}")}}))
                .unwrap(),
            )
            .await
            .unwrap();
        let path: LogicalClusterPath = format!("root:w{w}").parse().unwrap();
        let c = client(
            &control.admin_kubeconfig,
            Some(&format!("{}/clusters/{path}", control.url)),
        )
        .await;
        clients.push((path, c));
    }
    futures::stream::iter(clients.iter())
        .for_each_concurrent(8, |(_, c)| async move {
            let ns = serde_json::from_value::<Namespace>(json!({"metadata": {"name": "load",
                "labels": {"sluice.dev/cluster": "east"}}}))
            .unwrap();
            assert!(
                eventually(Duration::from_secs(60), || async {
                    Api::<Namespace>::all(c.clone())
                        .create(&PostParams::default(), &ns)
                        .await
                        .is_ok()
                })
                .await
            );
            let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "load");
            for i in 0..per_ws {
                let cm = serde_json::from_value::<ConfigMap>(json!({
                    "metadata": {"name": format!("c{i}")}, "data": {"k": format!("v{i}")}}))
                .unwrap();
                cms.create(&PostParams::default(), &cm).await.unwrap();
            }
        })
        .await;
    let applied = t0.elapsed();
    let all_down = until_every(WITHIN, Duration::from_millis(50), || async {
        arrived.lock().unwrap().len() >= total
    })
    .await
    .expect("every object downstream");
    let synced_after = t0.elapsed();
    let _ = all_down;
    let rss = rss_mib(syncer.pid());
    println!(
        "sync {total} ConfigMaps in {workspaces} logical clusters: created in {:.2} s, all \
         downstream after {:.2} s; syncer RSS {rss_before:.1} -> {rss:.1} MiB",
        applied.as_secs_f64(),
        synced_after.as_secs_f64()
    );

    // 2. Nothing changes.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (w0, c0) = (writes(admin).await, cpu_secs(syncer.pid()));
    tokio::time::sleep(Duration::from_secs(quiet as u64)).await;
    let (w1, c1) = (writes(admin).await, cpu_secs(syncer.pid()));
    println!(
        "steady state over {quiet} s at {total} objects: syncer CPU {:.2}% of a core, {} writes",
        100.0 * (c1 - c0) / quiet as f64,
        w1 - w0
    );

    // 3. One object at a time: create upstream -> delivered by a downstream watch.
    let mut latencies = Vec::with_capacity(samples);
    for s in 0..samples {
        let (_, c) = &clients[s % clients.len()];
        let name = format!("probe{s}");
        let load = Api::<Namespace>::all(c.clone()).get("load").await.unwrap();
        let down = load.metadata.annotations.unwrap()[ANNOTATION_DOWNSTREAM_NAMESPACE].clone();
        let key = (down, name.clone());
        let cm = serde_json::from_value::<ConfigMap>(json!({
            "metadata": {"name": name}, "data": {"k": "v"}}))
        .unwrap();
        let start = Instant::now();
        Api::<ConfigMap>::namespaced(c.clone(), "load")
            .create(&PostParams::default(), &cm)
            .await
            .unwrap();
        let at = until_every(
            Duration::from_secs(60),
            Duration::from_millis(1),
            || async { arrived.lock().unwrap().contains_key(&key) },
        )
        .await
        .map(|_| arrived.lock().unwrap()[&key])
        .expect("the probe downstream");
        latencies.push(at.duration_since(start).as_secs_f64());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    latencies.sort_by(f64::total_cmp);
    let p99 = percentile(&latencies, 99.0);
    println!(
        "apply-to-downstream at {total} objects: p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms \
         (n={samples}); Karmada p99 1.30 s push / 0.99 s pull: {:.0}x / {:.0}x lower",
        1000.0 * percentile(&latencies, 50.0),
        1000.0 * p99,
        1000.0 * latencies[latencies.len() - 1],
        KARMADA_PUSH_P99 / p99,
        KARMADA_PULL_P99 / p99
    );
    drop(syncer);
    east.shutdown().await;
    control.shutdown().await;
}
