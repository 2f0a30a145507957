//! Keeps this replica's served custom types in step with the CRDs in the store, whichever
//! replica wrote them: with several control replicas on one etcd, a CRD created through
//! one must be served by all. (The replica that admits a CRD rebuilds at once; this
//! catches the writes of the others.)

use std::time::Duration;

use sluice_api::LogicalClusterPath;
use tokio::sync::watch;

use crate::crd::registry::crd_prefix;
use crate::state::SharedState;

const RETRY: Duration = Duration::from_millis(500);

/// Rebuild a logical cluster's catalog on every CRD event in it, until `shutdown`.
pub async fn run(state: SharedState, mut shutdown: watch::Receiver<bool>) {
    let prefix = crd_prefix();
    loop {
        let from = state.store.revision();
        state.crds.rebuild_all(&state.store);
        let Ok(mut sub) = state.store.watch(&prefix, from) else {
            tokio::time::sleep(RETRY).await;
            continue;
        };
        loop {
            let event = tokio::select! {
                _ = shutdown.changed() => return,
                e = sub.next() => e,
            };
            let Ok(event) = event else {
                // Fell behind: start over from a full rebuild.
                break;
            };
            if let Some(cluster) = event
                .key
                .cluster()
                .and_then(|c| c.parse::<LogicalClusterPath>().ok())
            {
                state.crds.rebuild(&state.store, &cluster);
            }
        }
    }
}
