#![allow(clippy::unwrap_used)]
//! The control plane on etcd against the embedded store, side by side in one run: create,
//! get, list and watch latency (p50/p99) and create/get throughput, with one replica on the
//! embedded store, one on etcd, and three replicas on one etcd (writes spread over the
//! replicas, the watcher on another replica than the writer). Prints each figure's ratio to
//! the embedded store's.
//!
//!     cargo bench -p sluice --bench storage
//!
//! `SLUICE_BENCH_OPS` sets the sequential operations per figure (default 1000). etcd is
//! Debian's `etcd-server`, one member on loopback with its data on this machine's disk.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use sluice_test_support::etcd::{Etcd, free_port};
use sluice_test_support::stats::{Latencies, ms};
use support::Control;

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"app": "bench"}},
        "data": {"key": "value", "other": "x".repeat(64)}}),
    )
    .unwrap()
}

/// One configuration's figures (p99s and rates).
struct Figures {
    name: &'static str,
    create: Duration,
    get: Duration,
    list: Duration,
    watch: Duration,
    creates_per_s: f64,
    gets_per_s: f64,
}

async fn api_of(c: &Control) -> Api<ConfigMap> {
    let client = sluice_test_support::client::client(&c.kubeconfig, None).await;
    Api::namespaced(client, "bench")
}

async fn measure(name: &'static str, replicas: &[Control], ops: usize) -> Figures {
    let apis: Vec<Api<ConfigMap>> = futures::future::join_all(replicas.iter().map(api_of)).await;
    let client = sluice_test_support::client::client(&replicas[0].kubeconfig, None).await;
    let _ = Api::<Namespace>::all(client)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "bench"}})).unwrap(),
        )
        .await;
    // The watcher is on the last replica, the writer on the first.
    let writer = &apis[0];
    let watcher = &apis[apis.len() - 1];
    let rv = writer
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut events = watcher
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    let (mut create, mut watch) = (Latencies::default(), Latencies::default());
    for i in 0..ops {
        let t = Instant::now();
        writer
            .create(&PostParams::default(), &cm(&format!("seq-{i}")))
            .await
            .unwrap();
        let acked = t.elapsed();
        create.0.push(acked);
        loop {
            if let Some(WatchEvent::Added(_)) = events.try_next().await.unwrap() {
                break;
            }
        }
        watch.0.push(t.elapsed().saturating_sub(acked));
    }
    let mut get = Latencies::default();
    for i in 0..ops {
        let api = &apis[i % apis.len()];
        let t = Instant::now();
        api.get(&format!("seq-{i}")).await.unwrap();
        get.0.push(t.elapsed());
    }
    let mut list = Latencies::default();
    for i in 0..(ops / 10).max(10) {
        let api = &apis[i % apis.len()];
        let t = Instant::now();
        api.list(&ListParams::default().limit(100)).await.unwrap();
        list.0.push(t.elapsed());
    }
    println!("\n{name}");
    let create_p99 = create.line("  create (sequential)");
    let watch_p99 = watch.line("  watch delivery after the create's ack");
    let get_p99 = get.line("  get");
    let list_p99 = list.line("  list (limit=100)");
    let writes = ops * 2;
    let t = Instant::now();
    futures::stream::iter(0..writes)
        .for_each_concurrent(16, |i| {
            let api = apis[i % apis.len()].clone();
            async move {
                api.create(&PostParams::default(), &cm(&format!("par-{i}")))
                    .await
                    .unwrap();
            }
        })
        .await;
    let creates_per_s = writes as f64 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    futures::stream::iter(0..writes)
        .for_each_concurrent(16, |i| {
            let api = apis[i % apis.len()].clone();
            async move {
                api.get(&format!("par-{i}")).await.unwrap();
            }
        })
        .await;
    let gets_per_s = writes as f64 / t.elapsed().as_secs_f64();
    println!("  create throughput (16 concurrent)          {creates_per_s:>8.0} /s");
    println!("  get throughput (16 concurrent)             {gets_per_s:>8.0} /s");
    Figures {
        name,
        create: create_p99,
        get: get_p99,
        list: list_p99,
        watch: watch_p99,
        creates_per_s,
        gets_per_s,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let ops: usize = std::env::var("SLUICE_BENCH_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let dir = tempfile::tempdir().unwrap();
    println!("control plane storage benchmark: ops={ops}");

    let embedded = {
        let c = Control::start(&dir.path().join("embedded"), &[]);
        measure("embedded store, 1 replica", std::slice::from_ref(&c), ops).await
    };

    let etcd = Etcd::start_member(
        "bench",
        &dir.path().join("etcd"),
        free_port(),
        free_port(),
        None,
    );
    etcd.wait_healthy(Duration::from_secs(60));
    let one = {
        let flags = ["--etcd-servers", &etcd.url, "--etcd-prefix", "/one/"];
        let c = Control::start(&dir.path().join("etcd1"), &flags);
        measure("etcd, 1 replica", std::slice::from_ref(&c), ops).await
    };
    let three = {
        let flags = ["--etcd-servers", &etcd.url, "--etcd-prefix", "/three/"];
        let first = dir.path().join("r1");
        let mut replicas = vec![Control::start(&first, &flags)];
        for name in ["r2", "r3"] {
            let to = dir.path().join(name);
            assert!(
                std::process::Command::new("cp")
                    .arg("-r")
                    .arg(&first)
                    .arg(&to)
                    .status()
                    .unwrap()
                    .success()
            );
            replicas.push(Control::start(&to, &flags));
        }
        measure(
            "etcd, 3 replicas (writes on r1, watch on r3; others spread)",
            &replicas,
            ops,
        )
        .await
    };

    println!(
        "\n{:<62} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10}",
        "p99 ms / rate (ratio to the embedded store)",
        "create",
        "get",
        "list",
        "watch",
        "creates/s",
        "gets/s"
    );
    for f in [&embedded, &one, &three] {
        let r = |x: Duration, base: Duration| ms(x) / ms(base).max(1e-9);
        println!(
            "{:<62} {:>5.2}/{:<3.1}x {:>5.2}/{:<3.1}x {:>5.2}/{:<3.1}x {:>5.2}/{:<3.1}x {:>6.0}/{:<3.2}x {:>6.0}/{:<3.2}x",
            f.name,
            ms(f.create),
            r(f.create, embedded.create),
            ms(f.get),
            r(f.get, embedded.get),
            ms(f.list),
            r(f.list, embedded.list),
            ms(f.watch),
            r(f.watch, embedded.watch),
            f.creates_per_s,
            f.creates_per_s / embedded.creates_per_s,
            f.gets_per_s,
            f.gets_per_s / embedded.gets_per_s,
        );
    }
}
