#![allow(clippy::unwrap_used)]
//! Time from starting `sluice dev up --clusters east,west` to its `ready` line, and to a
//! clean exit after SIGTERM (issue: e2e local clusters, done-when 2: target < 5 s).
//!
//!     cargo bench -p sluice --bench devup      (SLUICE_BENCH_RUNS, default 10)

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn main() {
    let runs: usize = std::env::var("SLUICE_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let bin = env!("CARGO_BIN_EXE_sluice");
    let mut ready = Vec::new();
    let mut stopped = Vec::new();
    for _ in 0..runs {
        let dir = tempfile::tempdir().unwrap();
        let t = Instant::now();
        let mut child = Command::new(bin)
            .args(["dev", "up", "--state"])
            .arg(dir.path())
            .args(["--clusters", "east,west"])
            .env("SLUICE_LOG", "error")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready");
        ready.push(t.elapsed());
        let t = Instant::now();
        Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status()
            .unwrap();
        assert!(child.wait().unwrap().success());
        stopped.push(t.elapsed());
    }
    ready.sort();
    stopped.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let p50 = ready[ready.len() / 2];
    let max = *ready.last().unwrap();
    println!("sluice dev up --clusters east,west ({runs} runs, fresh state each)");
    println!(
        "time to `ready`   p50 {:>8.1} ms   max {:>8.1} ms",
        ms(p50),
        ms(max)
    );
    println!(
        "time to exit      p50 {:>8.1} ms   max {:>8.1} ms   (after SIGTERM)",
        ms(stopped[stopped.len() / 2]),
        ms(*stopped.last().unwrap())
    );
    println!("TARGET ready < 5 s: max is {:.0}x under", 5000.0 / ms(max));
}
