#![allow(clippy::unwrap_used)]
//! What a strategic merge patch of a long list costs, against the list's length: a patch
//! that merges into, deletes from and adds to a list of n containers and orders it
//! (`$setElementOrder`), at n = 1,000 and n = 16,000, side by side. Linear work makes the
//! time per item the same at both sizes (ratio ≈ 1); a scan of the list per patch item
//! (the engine before indices) makes it grow with n (ratio ≈ 16).
//!
//!     cargo bench -p sluice-control --bench patch

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_control::patch::strategic_patch;
use sluice_control::schema::SchemaSet;

fn case(n: usize) -> (Value, Vec<u8>) {
    let containers: Vec<Value> = (0..n)
        .map(|i| json!({"name": format!("c{i}"), "image": "old"}))
        .collect();
    let target = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"template": {"spec": {"containers": containers}}}});
    let mut items = Vec::new();
    for i in 0..n {
        match i % 3 {
            0 => items.push(json!({"name": format!("c{i}"), "$patch": "delete"})),
            1 => items.push(json!({"name": format!("c{i}"), "image": "new"})),
            _ => items.push(json!({"name": format!("n{i}"), "image": "added"})),
        }
    }
    let order: Vec<Value> = (0..n)
        .rev()
        .map(|i| json!({"name": format!("c{i}")}))
        .collect();
    let patch = json!({"spec": {"template": {"spec": {
        "containers": items, "$setElementOrder/containers": order}}}});
    (target, serde_json::to_vec(&patch).unwrap())
}

/// The median time of one patch at `n`, over `runs`.
fn time(n: usize, runs: usize) -> Duration {
    let (target, patch) = case(n);
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            let out = strategic_patch(
                SchemaSet::builtin(),
                "io.k8s.api.apps.v1.Deployment",
                &target,
                &patch,
            )
            .unwrap();
            let took = t.elapsed();
            std::hint::black_box(out);
            took
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

fn main() {
    let runs = sluice_test_support::stats::env_usize("SLUICE_BENCH_RUNS", 9);
    let (small, large) = (1_000, 16_000);
    let (ts, tl) = (time(small, runs), time(large, runs));
    let per = |t: Duration, n: usize| t.as_secs_f64() * 1e9 / n as f64;
    println!(
        "strategic merge patch, median of {runs}: n={small}: {:.2} ms ({:.0} ns/item); n={large}: {:.2} ms ({:.0} ns/item); per-item ratio {:.2}",
        ts.as_secs_f64() * 1e3,
        per(ts, small),
        tl.as_secs_f64() * 1e3,
        per(tl, large),
        per(tl, large) / per(ts, small)
    );
}
