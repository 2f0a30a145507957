#![allow(clippy::unwrap_used)]
//! The console with 100 namespaces, 10 of them with a Service under load, in headless
//! Chromium (issue 40, done-when 2): time to first paint and to the first picture drawn,
//! then each picture's update latency (made by the console → drawn by the page) and its
//! drawing time, while quiet and while the 10 namespaces move at once, side by side with
//! the ratio.
//!
//!     cargo bench -p sluice --bench console

#[path = "../tests/support/mod.rs"]
mod support;

#[path = "../tests/support/browser.rs"]
mod browser;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::clusterset::answering_vip;
use support::{DevUp, sluice_bin};

const NAMESPACES: usize = 100;
const MOVING: usize = 10;

fn manifest() -> String {
    let mut m = String::new();
    for i in 0..NAMESPACES {
        let cluster = if i < MOVING || i % 2 == 0 {
            "east"
        } else {
            "west"
        };
        m.push_str(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: ns{i:03}, labels: {{sluice.dev/cluster: {cluster}}}}}\n---\n"
        ));
        if i < MOVING {
            m.push_str(&format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web, namespace: ns{i:03}}}\nspec:\n  replicas: 1\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}}}\n    spec:\n      containers:\n      - name: echo\n        image: sluice/echo\n        ports: [{{name: http, containerPort: 8080}}]\n        readinessProbe: {{httpGet: {{port: http, path: /ready}}, periodSeconds: 1}}\n---\napiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: ns{i:03}}}\nspec:\n  selector: {{app: web}}\n  ports: [{{name: http, port: 80, targetPort: http}}]\n---\n"
            ));
        }
    }
    m
}

struct Loads(Vec<Child>);

impl Drop for Loads {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// The page's latencies and drawing times recorded from index `from` on.
fn recorded(b: &browser::Browser, from: usize) -> (Vec<f64>, Vec<f64>) {
    let v = b.script(&format!(
        "const s = window.sluiceConsole; return [s.latencies.slice({from}), s.drawMs.slice({from})];"
    ));
    let list = |v: &Value| -> Vec<f64> {
        v.as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_f64)
            .collect()
    };
    (list(&v[0]), list(&v[1]))
}

fn count(b: &browser::Browser) -> usize {
    b.script("return window.sluiceConsole.latencies.length")
        .as_u64()
        .unwrap() as usize
}

fn main() {
    let (dev, _) = DevUp::start("east,west");
    let control = dev.kubectl_control();
    let west = dev.kubectl("west");
    control.apply_stdin(&manifest());
    for i in 0..MOVING {
        control.ok(&[
            "-n",
            &format!("ns{i:03}"),
            "rollout",
            "status",
            "deployment/web",
            "--timeout=300s",
        ]);
    }
    // 20 requests a second to each of the 10 Services, from west through its VIPs.
    let mut loads = Loads(Vec::new());
    for i in 0..MOVING {
        let ns = format!("ns{i:03}");
        let vip = answering_vip(&west, &ns);
        loads.0.push(
            Command::new(sluice_bin())
                .args(["loadgen", "--protocol", "http1", "--rate", "20"])
                .args(["--duration", "3600", "--target", &format!("{vip}:80")])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
    }
    let url = std::fs::read_to_string(dev.state.join("console.url")).unwrap();
    let b = browser::Browser::start();
    let opened = Instant::now();
    b.open(url.trim());
    let deadline = Instant::now() + Duration::from_secs(60);
    while b
        .script("return document.querySelectorAll('#namespaces tbody tr').length")
        .as_u64()
        .unwrap_or(0)
        < NAMESPACES as u64
    {
        assert!(
            Instant::now() < deadline,
            "the page never listed every namespace"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let all_rows = opened.elapsed();
    let paint = b.script(
        "const p = performance.getEntriesByName('first-contentful-paint')[0]; \
         return [p ? p.startTime : null, window.sluiceConsole.firstDrawn];",
    );
    // Wait until traffic for all 10 shows, then measure 20 s quiet.
    let deadline = Instant::now() + Duration::from_secs(60);
    while b
        .script("return document.querySelectorAll('[data-service]').length")
        .as_u64()
        .unwrap_or(0)
        < MOVING as u64
    {
        assert!(
            Instant::now() < deadline,
            "the page never showed every Service's traffic"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let from = count(&b);
    std::thread::sleep(Duration::from_secs(20));
    let (mut quiet, mut quiet_draw) = recorded(&b, from);

    // The 10 move to west at once; measured until all are done.
    let from = count(&b);
    let moved = Instant::now();
    for i in 0..MOVING {
        control.ok(&[
            "label",
            "namespace",
            &format!("ns{i:03}"),
            "sluice.dev/cluster=west",
            "--overwrite",
        ]);
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let done = b
            .script("return Array.from(document.querySelectorAll('ol.timeline li.done')).length")
            .as_u64()
            .unwrap_or(0);
        if done >= MOVING as u64 {
            break;
        }
        assert!(Instant::now() < deadline, "the moves did not finish");
        std::thread::sleep(Duration::from_millis(200));
    }
    let moves_took = moved.elapsed();
    let (mut moving, mut moving_draw) = recorded(&b, from);
    let shot = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-bench.png");
    b.screenshot(&shot);

    println!(
        "sluice console: {NAMESPACES} namespaces, {MOVING} Services under load (20 req/s each), headless Chromium 1366x900"
    );
    println!(
        "first contentful paint {:>7.1} ms   first picture drawn {:>7.1} ms   all {NAMESPACES} rows {:>7.1} ms (from navigation)",
        paint[0].as_f64().unwrap_or(f64::NAN),
        paint[1].as_f64().unwrap_or(f64::NAN),
        all_rows.as_secs_f64() * 1000.0
    );
    let (q50, q99) = (percentile(&mut quiet, 0.5), percentile(&mut quiet, 0.99));
    let (m50, m99) = (percentile(&mut moving, 0.5), percentile(&mut moving, 0.99));
    let (qd50, qd99) = (
        percentile(&mut quiet_draw, 0.5),
        percentile(&mut quiet_draw, 0.99),
    );
    let (md50, md99) = (
        percentile(&mut moving_draw, 0.5),
        percentile(&mut moving_draw, 0.99),
    );
    println!(
        "update latency  quiet  p50 {q50:>6.1} ms  p99 {q99:>6.1} ms  ({} pictures in 20 s)",
        quiet.len()
    );
    println!(
        "update latency  moving p50 {m50:>6.1} ms  p99 {m99:>6.1} ms  ({} pictures in {:.1} s of moves)",
        moving.len(),
        moves_took.as_secs_f64()
    );
    println!("drawing         quiet  p50 {qd50:>6.1} ms  p99 {qd99:>6.1} ms");
    println!("drawing         moving p50 {md50:>6.1} ms  p99 {md99:>6.1} ms");
    println!(
        "ratio moving/quiet: update p99 {:.2}x, drawing p99 {:.2}x",
        m99 / q99,
        md99 / qd99
    );
    println!("screenshot: {}", shot.display());
    drop(loads);
    drop(b);
    drop(dev);
}
