//! Cluster liveness, the contract between the agent in each member cluster (the
//! dataplane), which renews a Lease there, and the MCS controller, which treats a cluster
//! whose lease has run out as gone and removes its endpoints from every import. A cluster
//! with no lease at all has never opted in and counts as alive.
//!
//! The TTL is 3 s, renewed every second: a missed renewal or two (a slow API server, a
//! pause) do not flap the cluster, and a dead one is dropped within 3 s plus one reconcile.

use std::time::Duration;

pub const LEASE_NAMESPACE: &str = "kube-system";
pub const LEASE_NAME: &str = "sluice-cluster";
pub const LEASE_TTL: Duration = Duration::from_secs(3);
pub const RENEW_EVERY: Duration = Duration::from_secs(1);
