//! The audit log: one JSON line per request (who, what, in which logical cluster, the answer
//! and how long it took), appended to a file that is rotated by size. Off unless
//! configured (`sluice control --audit-log PATH`).
//!
//! Each line is one `write` to a file opened for appending, so a line is never interleaved
//! with another and a crash loses at most the line being written; the cost is a system
//! call per request, which is why the log is opt-in.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;

/// Where and how much.
#[derive(Clone, Debug)]
pub struct AuditConfig {
    pub path: PathBuf,
    /// A file that would grow past this is rotated first (`PATH` → `PATH.1` → … `PATH.<keep>`).
    pub max_bytes: u64,
    /// Rotated files kept.
    pub keep: usize,
}

impl AuditConfig {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            max_bytes: 100 * 1024 * 1024,
            keep: 5,
        }
    }
}

/// One request, as the log records it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEvent<'a> {
    /// RFC 3339, when the answer was ready.
    pub time: String,
    pub user: &'a str,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `apply`, `delete`, ….
    pub verb: &'a str,
    /// The logical cluster path (`root:shop`), or `*` for the wildcard.
    pub cluster: &'a str,
    pub path: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub resource: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<&'a str>,
    /// `exec`, `log`, `status`, ….
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subresource: Option<&'a str>,
    /// The command of an `exec` session, as the client sent it.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub command: &'a [String],
    /// What admission added (`<policy>/<key>`, kube's `validation_failure`), as kube's
    /// audit events carry them.
    #[serde(
        skip_serializing_if = "<[(String, String)]>::is_empty",
        serialize_with = "as_map"
    )]
    pub annotations: &'a [(String, String)],
    pub code: u16,
    /// Until the response headers (a watch: until it started streaming).
    pub latency_ms: f64,
}

fn as_map<S: serde::Serializer>(pairs: &&[(String, String)], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(Some(pairs.len()))?;
    for (k, v) in pairs.iter() {
        m.serialize_entry(k, v)?;
    }
    m.end()
}

struct Current {
    file: File,
    size: u64,
}

/// An open audit log.
pub struct AuditLog {
    config: AuditConfig,
    current: Mutex<Current>,
}

impl AuditLog {
    /// Open (or create) the log for appending.
    pub fn open(config: AuditConfig) -> std::io::Result<Self> {
        let file = append(&config.path)?;
        let size = file.metadata()?.len();
        Ok(Self {
            config,
            current: Mutex::new(Current { file, size }),
        })
    }

    /// Append one event; a failure to write is logged, never the request's failure.
    pub fn record(&self, event: &AuditEvent<'_>) {
        let Ok(mut line) = serde_json::to_vec(event) else {
            return;
        };
        line.push(b'\n');
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if current.size > 0 && current.size + line.len() as u64 > self.config.max_bytes {
            match self.rotate() {
                Ok(file) => *current = Current { file, size: 0 },
                Err(e) => {
                    tracing::warn!(error = %e, path = %self.config.path.display(), "rotating the audit log failed")
                }
            }
        }
        match current.file.write_all(&line) {
            Ok(()) => current.size += line.len() as u64,
            Err(e) => {
                tracing::warn!(error = %e, path = %self.config.path.display(), "writing the audit log failed")
            }
        }
    }

    /// Shift `PATH.i` to `PATH.(i+1)` (the oldest beyond `keep` is dropped), `PATH` to
    /// `PATH.1`; a new `PATH`.
    fn rotate(&self) -> std::io::Result<File> {
        let path = &self.config.path;
        let numbered = |i: usize| {
            let mut p = path.clone().into_os_string();
            p.push(format!(".{i}"));
            PathBuf::from(p)
        };
        if self.config.keep == 0 {
            std::fs::remove_file(path)?;
            return append(path);
        }
        let _ = std::fs::remove_file(numbered(self.config.keep));
        for i in (1..self.config.keep).rev() {
            let from = numbered(i);
            if from.exists() {
                std::fs::rename(&from, numbered(i + 1))?;
            }
        }
        std::fs::rename(path, numbered(1))?;
        append(path)
    }
}

fn append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// Milliseconds, for [`AuditEvent::latency_ms`].
pub fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn event(name: &str) -> AuditEvent<'_> {
        AuditEvent {
            time: "2026-11-26T00:00:00Z".into(),
            user: "admin",
            verb: "create",
            cluster: "root:shop",
            path: "/clusters/root:shop/api/v1/namespaces/default/configmaps",
            resource: "configmaps",
            namespace: Some("default"),
            name: Some(name),
            subresource: None,
            command: &[],
            annotations: &[],
            code: 201,
            latency_ms: 0.5,
        }
    }

    #[test]
    fn lines_are_json_and_files_rotate_by_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let mut config = AuditConfig::new(&path);
        config.max_bytes = 600;
        config.keep = 2;
        let log = AuditLog::open(config).unwrap();
        for i in 0..20 {
            log.record(&event(&format!("cm-{i}")));
        }
        let lines = |p: &Path| -> Vec<serde_json::Value> {
            std::fs::read_to_string(p)
                .unwrap_or_default()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect()
        };
        let now = lines(&path);
        let older = lines(&dir.path().join("audit.log.1"));
        let oldest = lines(&dir.path().join("audit.log.2"));
        assert!(!dir.path().join("audit.log.3").exists(), "keep 2");
        for f in [&now, &older, &oldest] {
            assert!(!f.is_empty());
            let size: usize = f.iter().map(|v| v.to_string().len() + 1).sum();
            assert!(size <= 600, "{size}");
        }
        let last = now.last().unwrap();
        assert_eq!(last["name"], "cm-19");
        assert_eq!(last["verb"], "create");
        assert_eq!(last["code"], 201);
        assert_eq!(last["cluster"], "root:shop");
        assert_eq!(last["latencyMs"], 0.5);
        // Rotation keeps the order: the oldest kept line is in .2, the newest in PATH.
        let first_kept = oldest[0]["name"].as_str().unwrap().to_string();
        let n: usize = first_kept.trim_start_matches("cm-").parse().unwrap();
        assert_eq!(n + oldest.len() + older.len() + now.len(), 20);
    }

    #[test]
    fn an_existing_log_is_appended_to() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        AuditLog::open(AuditConfig::new(&path))
            .unwrap()
            .record(&event("a"));
        AuditLog::open(AuditConfig::new(&path))
            .unwrap()
            .record(&event("b"));
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2);
    }
}
