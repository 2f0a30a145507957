//! Cluster liveness. First, the contract between the agent in each member cluster (the
//! dataplane), which renews a Lease there, and the MCS controller, which treats a cluster
//! whose lease has run out as gone and removes its endpoints from every import. A cluster
//! with no lease at all has never opted in and counts as alive.
//!
//! The TTL is 3 s, renewed every second: a missed renewal or two (a slow API server, a
//! pause) do not flap the cluster, and a dead one is dropped within 3 s plus one reconcile.
//!
//! Second, the syncer's heartbeat in the control plane: the placement controller treats a
//! cluster whose syncer has not renewed its Lease within [`SYNCER_LEASE_TTL`] (or never
//! did) as NotReady, places nothing new there and moves what runs there away.

use std::time::Duration;

pub const LEASE_NAMESPACE: &str = "kube-system";
pub const LEASE_NAME: &str = "sluice-cluster";
pub const LEASE_TTL: Duration = Duration::from_secs(3);
pub const RENEW_EVERY: Duration = Duration::from_secs(1);

/// Where each syncer's heartbeat Lease lives: this namespace of the root logical cluster,
/// one Lease per physical cluster ([`syncer_lease_name`]).
pub const SYNCER_LEASE_NAMESPACE: &str = "kube-node-lease";
/// A syncer's heartbeat counts this long: past it, its cluster is NotReady and what runs
/// there is placed elsewhere. Long enough that a slow control plane does not move apps.
pub const SYNCER_LEASE_TTL: Duration = Duration::from_secs(10);
pub const SYNCER_RENEW_EVERY: Duration = Duration::from_secs(2);

/// The heartbeat Lease of `cluster`'s syncer.
pub fn syncer_lease_name(cluster: &crate::ClusterName) -> String {
    format!("sluice-syncer-{cluster}")
}

/// Annotation on a syncer's heartbeat Lease: the URL of its log endpoint, where the control
/// plane forwards `kubectl logs` for pods that run on its cluster.
pub const ANNOTATION_SYNCER_LOGS: &str = "sluice.dev/syncer-logs";

/// The identity the control plane presents, in a client certificate its CA signed, when it
/// reaches into a cluster through that cluster's syncer; the syncer answers no other.
pub const CONTROL_PLANE_USER: &str = "system:sluice:control-plane";

/// The name the syncer of `cluster` proves when the control plane reaches it: a DNS name
/// of the syncer's certificate (signed by the control plane's CA), checked like a host
/// name, so an endpoint that is not that cluster's syncer gets no request.
pub fn syncer_server_name(cluster: &crate::ClusterName) -> String {
    format!("{cluster}.syncer.sluice.internal")
}
