//! Controllers built into the API server.

pub mod crd_catalog;
pub mod gc;
pub mod gc_queue;
pub mod rbac_policy;
pub mod termination;

use std::time::Duration;

use sluice_api::LogicalClusterPath;
use tokio::sync::watch;

use crate::state::SharedState;
use crate::storage::ResourcePrefix;

/// Follow one resource type in the store until `shutdown`, for state a replica derives per
/// logical cluster from objects any replica may write: `restart` whenever the watch
/// (re)starts, since events may have been missed; `changed` with the logical cluster of
/// every event.
pub async fn follow_clusters(
    state: &SharedState,
    prefix: &ResourcePrefix,
    mut shutdown: watch::Receiver<bool>,
    restart: impl Fn(),
    changed: impl Fn(&LogicalClusterPath),
) {
    const RETRY: Duration = Duration::from_millis(500);
    loop {
        let from = state.store.revision();
        restart();
        let Ok(mut sub) = state.store.watch(prefix, from) else {
            tokio::time::sleep(RETRY).await;
            continue;
        };
        loop {
            let event = tokio::select! {
                _ = shutdown.changed() => return,
                e = sub.next() => e,
            };
            let Ok(event) = event else {
                // Fell behind: start over.
                break;
            };
            if let Some(cluster) = event
                .key
                .cluster()
                .and_then(|c| c.parse::<LogicalClusterPath>().ok())
            {
                changed(&cluster);
            }
        }
    }
}
