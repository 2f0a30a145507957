//! Keeps this replica's served custom types in step with the CRDs in the store, whichever
//! replica wrote them: with several control replicas on one etcd, a CRD created through
//! one must be served by all. (The replica that admits a CRD rebuilds at once; this
//! catches the writes of the others.)

use tokio::sync::watch;

use crate::crd::registry::crd_prefix;
use crate::state::SharedState;

/// Rebuild a logical cluster's catalog on every CRD event in it, until `shutdown`.
pub async fn run(state: SharedState, shutdown: watch::Receiver<bool>) {
    super::follow_clusters(
        &state,
        &crd_prefix(),
        shutdown,
        || state.crds.rebuild_all(&state.store),
        |cluster| state.crds.rebuild(&state.store, cluster),
    )
    .await;
}
