//! Sluice's API types: pure data, no IO, so that the dataplane or DNS server can use them
//! without compiling the API server.

pub mod logical_cluster;
pub mod mcs;
pub mod sluice;

pub use logical_cluster::{LogicalClusterPath, PathError};

/// Annotation put on every object returned by a wildcard (`/clusters/*/`) list or watch.
pub const LOGICAL_CLUSTER_ANNOTATION: &str = "sluice.dev/logical-cluster";
