//! Sluice's API types: pure data, no IO, so that the dataplane or DNS server can use them
//! without compiling the API server.

/// `k8s_openapi` trait impls, so a type works with kube's typed `Api<T>` and runtime.
macro_rules! resource {
    ($ty:ty, $group:expr, $version:expr, $kind:literal, $plural:literal, $scope:ty) => {
        impl k8s_openapi::Resource for $ty {
            const API_VERSION: &'static str = concat!($group, "/", $version);
            const GROUP: &'static str = $group;
            const KIND: &'static str = $kind;
            const VERSION: &'static str = $version;
            const URL_PATH_SEGMENT: &'static str = $plural;
            type Scope = $scope;
        }
        impl k8s_openapi::ListableResource for $ty {
            const LIST_KIND: &'static str = concat!($kind, "List");
        }
        impl k8s_openapi::Metadata for $ty {
            type Ty = ObjectMeta;
            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

pub mod claim_copy;
pub mod cron;
pub mod liveness;
pub mod logical_cluster;
pub mod mcs;
pub mod metrics;
pub mod names;
pub mod sluice;
pub mod statefulset;
pub mod sync;
pub mod synced_kinds;
pub mod tenancy;

pub use logical_cluster::{LogicalClusterPath, PathError};
pub use names::{ClusterName, ServiceKey};

/// Annotation put on every object returned by a wildcard (`/clusters/*/`) list or watch.
pub const LOGICAL_CLUSTER_ANNOTATION: &str = "sluice.dev/logical-cluster";
