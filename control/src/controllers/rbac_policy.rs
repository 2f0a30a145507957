//! Keeps this replica's RBAC policies in step with the stored Roles and bindings, whichever
//! replica wrote them: a change to any of them in a logical cluster drops that cluster's
//! indexed policy, to be rebuilt on its next request. (The replica that admits the write
//! drops it at once, in [`crate::admission`]; this catches the writes of the others.)

use tokio::sync::watch;

use crate::rbac::policy::prefixes;
use crate::state::SharedState;

/// Follow the four RBAC types until `shutdown`.
pub async fn run(state: SharedState, shutdown: watch::Receiver<bool>) {
    let follow = |prefix| {
        let (state, shutdown) = (state.clone(), shutdown.clone());
        async move {
            super::follow_clusters(
                &state,
                prefix,
                shutdown,
                || state.rbac.policies.clear(),
                |cluster| state.rbac.policies.invalidate(cluster),
            )
            .await;
        }
    };
    futures::future::join_all(prefixes().iter().map(follow)).await;
}
