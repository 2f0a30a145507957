//! What each running container uses, as kubelet's resource metrics report it to
//! metrics-server: CPU as a rate over a window (nanocores), memory as the working set
//! (resident bytes) — here of the container's process group, read from `/proc`.
//!
//! Measured on demand, not on a timer: a node that nobody asks costs nothing. A rate needs
//! two readings; the last one taken is kept, and when it is too old or too recent a fresh
//! pair is taken [`MIN_WINDOW`] apart.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::node::running::{ContainerRef, Running};

/// The shortest window a rate is measured over.
pub const MIN_WINDOW: Duration = Duration::from_millis(500);
/// An earlier reading older than this is not used: the rate would describe the past.
const MAX_WINDOW: Duration = Duration::from_secs(60);

/// One container's usage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerUsage {
    pub name: String,
    pub cpu_nano_cores: u64,
    pub memory_bytes: u64,
}

/// One Pod's usage: its running containers', measured over `window_millis` ending at
/// `timestamp`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodUsage {
    pub namespace: String,
    pub pod: String,
    pub timestamp: String,
    pub window_millis: u64,
    pub containers: Vec<ContainerUsage>,
}

/// A process group's CPU time (clock ticks) and resident memory (bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupReading {
    pub ticks: u64,
    pub resident: u64,
}

/// The process group, CPU ticks (user + system) and resident pages of one
/// `/proc/<pid>/stat` line; the command name may hold any byte, so fields are counted
/// after its closing parenthesis.
pub fn parse_stat(line: &str) -> Option<(i32, u64, u64)> {
    let rest = &line[line.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(0) ppid(1) pgrp(2) … utime(11) stime(12) … rss(21).
    let pgrp = f.get(2)?.parse().ok()?;
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    let rss = f.get(21)?.parse::<i64>().ok()?.max(0) as u64;
    Some((pgrp, ticks, rss))
}

/// Every process group's reading, from one pass over `/proc`.
fn read_groups() -> HashMap<i32, GroupReading> {
    let page = rustix::param::page_size() as u64;
    let mut groups: HashMap<i32, GroupReading> = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return groups;
    };
    for entry in dir.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some((pgrp, ticks, rss)) = parse_stat(&stat) {
            let g = groups.entry(pgrp).or_default();
            g.ticks += ticks;
            g.resident += rss * page;
        }
    }
    groups
}

/// [`read_groups`] on a blocking thread: a pass over `/proc` is many small file reads.
async fn read_groups_apart() -> HashMap<i32, GroupReading> {
    tokio::task::spawn_blocking(read_groups)
        .await
        .unwrap_or_default()
}

/// The CPU rate in nanocores of `ticks` clock ticks used over `window`.
pub fn nanocores(ticks: u64, window: Duration, ticks_per_second: u64) -> u64 {
    let nanos = window.as_nanos().max(1);
    let used_nanos = u128::from(ticks) * 1_000_000_000 / u128::from(ticks_per_second.max(1));
    (used_nanos * 1_000_000_000 / nanos) as u64
}

/// Measures the containers [`Running`] knows, keeping the last reading of each.
#[derive(Debug, Default)]
pub struct Usage {
    last: Mutex<Option<(Instant, HashMap<i32, GroupReading>)>>,
}

impl Usage {
    /// The usage of the Pods running here (of `namespace` only, when given).
    pub async fn pods(&self, running: &Running, namespace: Option<&str>) -> Vec<PodUsage> {
        let containers: Vec<(ContainerRef, u32)> = running
            .containers()
            .into_iter()
            .filter(|(c, _)| namespace.is_none_or(|ns| c.namespace == ns))
            .collect();
        let earlier = {
            let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
            last.clone()
                .filter(|(at, _)| (MIN_WINDOW..MAX_WINDOW).contains(&at.elapsed()))
        };
        let (since, before) = match earlier {
            Some(e) => e,
            None => {
                let first = (Instant::now(), read_groups_apart().await);
                tokio::time::sleep(MIN_WINDOW).await;
                first
            }
        };
        let now = read_groups_apart().await;
        let window = since.elapsed();
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), now.clone()));
        let per_second = rustix::param::clock_ticks_per_second();
        let timestamp = sluice_kube::time::now_rfc3339();
        let mut pods: Vec<PodUsage> = Vec::new();
        for (c, pid) in containers {
            let group = pid as i32;
            let Some(reading) = now.get(&group) else {
                continue;
            };
            // A group first seen in this reading (a container started meanwhile) is
            // measured from nothing over the window: a fair first figure.
            let used = reading
                .ticks
                .saturating_sub(before.get(&group).map_or(0, |r| r.ticks));
            let usage = ContainerUsage {
                name: c.container,
                cpu_nano_cores: nanocores(used, window, per_second),
                memory_bytes: reading.resident,
            };
            match pods
                .iter_mut()
                .find(|p| p.namespace == c.namespace && p.pod == c.pod)
            {
                Some(p) => p.containers.push(usage),
                None => pods.push(PodUsage {
                    namespace: c.namespace,
                    pod: c.pod,
                    timestamp: timestamp.clone(),
                    window_millis: window.as_millis() as u64,
                    containers: vec![usage],
                }),
            }
        }
        pods
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_its_group_cpu_and_memory_whatever_the_name() {
        let line = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194304 100 0 0 0 30 12 0 0 20 0 1 0 \
                    500 10000000 250 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(parse_stat(line), Some((4242, 42, 250)));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S 1"), None);
    }

    #[test]
    fn ticks_over_a_window_are_nanocores() {
        // 50 ticks of 100 per second over one second: half a core.
        assert_eq!(nanocores(50, Duration::from_secs(1), 100), 500_000_000);
        assert_eq!(nanocores(0, Duration::from_secs(1), 100), 0);
        assert_eq!(nanocores(10, Duration::ZERO, 100), 100_000_000_000_000_000);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_busy_container_uses_cpu_and_an_idle_one_does_not() {
        use std::sync::Arc;
        let running = Arc::new(Running::default());
        let spawn = |script: &str| {
            tokio::process::Command::new("sh")
                .args(["-c", script])
                .process_group(0)
                .kill_on_drop(true)
                .spawn()
                .unwrap()
        };
        let busy = spawn("while :; do :; done");
        let idle = spawn("sleep 30");
        let ip = std::net::Ipv4Addr::LOCALHOST;
        let register = |name: &str, child: &tokio::process::Child| {
            running.register(
                ContainerRef {
                    namespace: "default".into(),
                    pod: "p".into(),
                    container: name.into(),
                },
                child.id().unwrap(),
                ip,
                crate::node::running::Attachable::new("/dev/null".into(), None, false, None),
            )
        };
        let (_b, _i) = (register("busy", &busy), register("idle", &idle));
        let usage = Usage::default();
        let pods = usage.pods(&running, Some("default")).await;
        assert_eq!(pods.len(), 1);
        assert!(pods[0].window_millis >= MIN_WINDOW.as_millis() as u64);
        let of = |name: &str| {
            pods[0]
                .containers
                .iter()
                .find(|c| c.name == name)
                .cloned()
                .unwrap()
        };
        assert!(of("busy").cpu_nano_cores > 50_000_000, "{:?}", of("busy"));
        assert!(of("idle").cpu_nano_cores < of("busy").cpu_nano_cores);
        assert!(of("idle").memory_bytes > 0);
        assert!(usage.pods(&running, Some("other")).await.is_empty());
    }
}
