//! File mode's configuration reload: the file is read again on SIGHUP and when its
//! modification time changes (looked at twice a second); a file that does not parse or
//! validate is reported and the running configuration stays.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

use crate::config::ProxyConfig;
use crate::proxy::Proxy;

/// How often the file's modification time is looked at.
const CHECK_EVERY: Duration = Duration::from_millis(500);

/// Apply `path` to `proxy` whenever it changes, until `stopped` turns true.
pub async fn watch_file(
    proxy: Arc<Proxy>,
    path: PathBuf,
    mut stopped: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let mut hup = signal(SignalKind::hangup())?;
    let mut tick = tokio::time::interval(CHECK_EVERY);
    let mut seen = modified(&path);
    loop {
        let forced = tokio::select! {
            _ = stopped.changed() => return Ok(()),
            _ = hup.recv() => true,
            _ = tick.tick() => false,
        };
        let now = modified(&path);
        if !forced && now == seen {
            continue;
        }
        seen = now;
        let applied = match ProxyConfig::from_file(&path) {
            Ok(c) => proxy.apply(&c).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match applied {
            Ok(()) => tracing::info!(config = %path.display(), "configuration applied"),
            Err(error) => {
                tracing::error!(%error, "configuration rejected; keeping the running one")
            }
        }
    }
}

fn modified(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}
