//! The consumer that runs as a Pod in `west`: a Job whose `sluice/loadgen` asks for
//! `echo.shop:80` — the name an app written for one cluster uses, completed by its search
//! path to `echo.shop.svc.cluster.local` and answered by the clusterset DNS with `shop`'s
//! VIP wherever `shop` runs. It starts before the traffic and is stopped (its namespace
//! deleted, so its Pod gets SIGTERM) after it; its report is the last line of its
//! container log.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};

/// The consumer's namespace in the logical cluster, pinned to `west`.
pub const NAMESPACE: &str = "clients";

/// What the Pod counted.
#[derive(Debug, Default)]
pub struct PodReport {
    pub ok: u64,
    pub failed: u64,
    pub failures: Value,
}

/// The namespace and the Job, as a user would write them.
pub fn objects(rate: u32) -> [Value; 2] {
    [
        json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": NAMESPACE, "labels": {"sluice.dev/cluster": "west"}}}),
        json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "shopper", "namespace": NAMESPACE},
            "spec": {"backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "loadgen", "image": "sluice/loadgen",
                    "args": ["--protocol", "http1", "--rate", rate.to_string(),
                             "--duration", "86400", "--target", "echo.shop:80"]}]}}}}),
    ]
}

/// The directory of the consumer's container logs on `west`'s node agent.
pub fn logs_dir(state: &Path, downstream: &str) -> PathBuf {
    state
        .join("clusters")
        .join("west")
        .join("logs")
        .join(downstream)
}

/// The log file of the consumer's container, once its Pod has started.
pub fn log_file(dir: &Path) -> Option<PathBuf> {
    let pod = std::fs::read_dir(dir).ok()?.flatten().next()?;
    let file = pod.path().join("loadgen").join("0.log");
    file.exists().then_some(file)
}

/// The report the consumer wrote when it was stopped, waiting up to `within` for it.
pub async fn report(log: &Path, within: Duration) -> anyhow::Result<PodReport> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let text =
            std::fs::read_to_string(log).with_context(|| format!("reading {}", log.display()))?;
        if let Some(line) = text.lines().rev().find(|l| l.trim_start().starts_with('{')) {
            let v: Value = serde_json::from_str(line)
                .with_context(|| format!("the consumer's report in {}", log.display()))?;
            return Ok(PodReport {
                ok: v["ok"].as_u64().unwrap_or(0),
                failed: v["failed"].as_u64().context("the report's failed count")?,
                failures: v["failures"].clone(),
            });
        }
        if tokio::time::Instant::now() > deadline {
            anyhow::bail!("no report in {} within {within:?}", log.display());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
