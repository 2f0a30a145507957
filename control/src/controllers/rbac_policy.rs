//! Keeps this replica's RBAC policies in step with the stored Roles and bindings, whichever
//! replica wrote them: a change to any of them in a logical cluster drops that cluster's
//! indexed policy, to be rebuilt on its next request. (The replica that admits the write
//! drops it at once, in [`crate::admission`]; this catches the writes of the others.)

use std::time::Duration;

use sluice_api::LogicalClusterPath;
use tokio::sync::watch;

use crate::rbac::policy::prefixes;
use crate::state::SharedState;

const RETRY: Duration = Duration::from_millis(500);

/// Follow the four RBAC types until `shutdown`.
pub async fn run(state: SharedState, shutdown: watch::Receiver<bool>) {
    let tasks: Vec<_> = prefixes()
        .iter()
        .map(|prefix| tokio::spawn(follow(state.clone(), prefix.clone(), shutdown.clone())))
        .collect();
    for t in tasks {
        let _ = t.await;
    }
}

async fn follow(
    state: SharedState,
    prefix: crate::storage::ResourcePrefix,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let from = state.store.revision();
        state.rbac.policies.clear();
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
                // Fell behind: forget everything and start over.
                break;
            };
            if let Some(cluster) = event
                .key
                .cluster()
                .and_then(|c| c.parse::<LogicalClusterPath>().ok())
            {
                state.rbac.policies.invalidate(&cluster);
            }
        }
    }
}
