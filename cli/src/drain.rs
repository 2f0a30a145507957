//! `sluice drain` and `sluice uncordon`: write the Cluster's spec, and with `--wait`
//! follow the namespaces that still run there until none is left — a progress bar per
//! namespace (phase and elapsed time) on a terminal, a line per change otherwise — and
//! end with a summary.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use sluice_api::ClusterName;
use sluice_kube::Roots;
use sluice_placement::drain::{self, Left};

async fn roots(kubeconfig: &Path) -> anyhow::Result<Roots> {
    let config = sluice_kube::client::config_from_kubeconfig(kubeconfig, None)
        .await
        .with_context(|| format!("reading {}", kubeconfig.display()))?;
    Ok(Roots::new(config, "/clusters/"))
}

/// Cordon and drain `cluster`; with `wait`, follow it until nothing runs there.
pub async fn drain(
    kubeconfig: &Path,
    cluster: &str,
    wait: bool,
    timeout: Duration,
) -> anyhow::Result<()> {
    let roots = roots(kubeconfig).await?;
    let cluster = ClusterName::new(cluster);
    drain::set(&roots, &cluster, true, true).await?;
    let first = drain::left(&roots, &cluster).await?;
    println!(
        "cluster {cluster} cordoned and draining: {} namespace(s) to move",
        first.len()
    );
    if !wait {
        return Ok(());
    }
    let started = Instant::now();
    let total = first.len();
    let mut view = Progress::new(std::io::stderr().is_terminal(), total as u64);
    loop {
        let left = drain::left(&roots, &cluster).await?;
        view.show(&left, started);
        if left.is_empty() {
            break;
        }
        if started.elapsed() > timeout {
            view.finish();
            anyhow::bail!(
                "cluster {cluster}: {} namespace(s) still there after {:.0} s: {}",
                left.len(),
                timeout.as_secs_f64(),
                left.iter()
                    .map(|l| format!("{} ({})", l.namespace, l.phase))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    view.finish();
    println!(
        "cluster {cluster} drained: {total} namespace(s) moved in {:.1} s; it stays cordoned until `sluice uncordon {cluster}`",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Undo a cordon (and a drain).
pub async fn uncordon(kubeconfig: &Path, cluster: &str) -> anyhow::Result<()> {
    let roots = roots(kubeconfig).await?;
    let cluster = ClusterName::new(cluster);
    drain::set(&roots, &cluster, false, false).await?;
    println!("cluster {cluster} uncordoned");
    Ok(())
}

/// What a waiting drain shows.
struct Progress {
    bars: Option<(MultiProgress, ProgressBar)>,
    /// Per namespace: its bar (on a terminal), when it was first seen, its last phase.
    seen: BTreeMap<String, (Option<ProgressBar>, Instant, String)>,
    total: u64,
}

impl Progress {
    fn new(tty: bool, total: u64) -> Self {
        let bars = tty.then(|| {
            let multi = MultiProgress::new();
            let overall = multi.add(ProgressBar::new(total));
            overall.set_style(
                ProgressStyle::with_template("{bar:30} {pos}/{len} namespaces moved  {elapsed}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            (multi, overall)
        });
        Self {
            bars,
            seen: BTreeMap::new(),
            total,
        }
    }

    fn show(&mut self, left: &[Left], started: Instant) {
        for l in left {
            let entry = self.seen.entry(l.namespace.clone()).or_insert_with(|| {
                let bar = self.bars.as_ref().map(|(multi, _)| {
                    let b = multi.add(ProgressBar::new_spinner());
                    b.set_style(
                        ProgressStyle::with_template("  {spinner} {prefix:30} {msg}")
                            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                    );
                    b.set_prefix(l.namespace.clone());
                    b.enable_steady_tick(Duration::from_millis(120));
                    b
                });
                (bar, Instant::now(), String::new())
            });
            let elapsed = entry.1.elapsed().as_secs_f64();
            match &entry.0 {
                Some(bar) => bar.set_message(format!("{} ({elapsed:.1} s)", l.phase)),
                None if entry.2 != l.phase => {
                    println!(
                        "{:>7.1} s  {}  {}  {}",
                        started.elapsed().as_secs_f64(),
                        l.namespace,
                        l.phase,
                        l.message
                    );
                }
                None => {}
            }
            entry.2 = l.phase.clone();
        }
        // Those no longer listed have moved.
        let gone: Vec<String> = self
            .seen
            .keys()
            .filter(|k| !left.iter().any(|l| &l.namespace == *k))
            .cloned()
            .collect();
        for k in gone {
            if let Some((bar, since, _)) = self.seen.remove(&k) {
                let took = since.elapsed().as_secs_f64();
                match bar {
                    Some(b) => b.finish_with_message(format!("moved ({took:.1} s)")),
                    None => println!("{:>7.1} s  {k}  moved", started.elapsed().as_secs_f64()),
                }
            }
        }
        if let Some((_, overall)) = &self.bars {
            overall.set_position(self.total.saturating_sub(left.len() as u64));
        }
    }

    fn finish(&mut self) {
        if let Some((_, overall)) = &self.bars {
            overall.finish();
        }
    }
}
