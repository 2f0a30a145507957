//! The Multi-Cluster Services controller's reconcile core (KEP-1645 plus Sluice's implicit
//! export, traffic weights and drain state).
//!
//! Everything here is pure and synchronous: the controller around it watches every member
//! cluster, hands [`reconcile`] one [`MemberSnapshot`] per cluster, and writes the
//! difference between the returned [`Desired`] state and what it observes. Keeping IO out
//! makes every rule of the KEP testable with plain values, and makes a reconcile idempotent:
//! the same snapshots always give the same desired state (VIPs come from a [`VipAllocator`]
//! the controller keeps across calls, and are re-learnt from the observed ServiceImports
//! after a restart).
//!
//! The IO lives apart: [`controller`] (the running `sluice mcs`), built on the shared
//! Kubernetes runtime (`sluice-kube`: informers, change coalescing, leases). The names the
//! dataplane and DNS server also read (service keys, the MCS EndpointSlice labels and
//! annotations, the liveness lease) live in `sluice-api`.
//!
//! Modules of the core, in the order data flows through them:
//! - [`model`]: the snapshot and the keys that name things (`ClusterId`, `ServiceKey`, ...).
//! - [`export`]: which Services a cluster exports, and whether each export is valid.
//! - [`merge`]: oldest-wins merge of the exports of one service, the ports union, conflicts.
//! - [`vip`]: ClusterSetIP allocation per importing cluster.
//! - [`slices`]: the MCS EndpointSlices of one source cluster.
//! - [`derived`]: the derived Service that gives an import its VIP in a cluster whose
//!   kube-proxy serves it (real clusters).
//! - [`conditions`]: ServiceExport and ServiceImport status conditions.
//! - [`reconcile`]: ties them together and says what each cluster should hold ([`Desired`]).

pub mod conditions;
pub mod controller;
pub mod derived;
pub mod export;
pub mod merge;
pub mod meta;
pub mod model;
mod names;
pub mod reconcile;
pub mod slices;
pub mod vip;

pub use conditions::{
    CONDITION_CONFLICT, CONDITION_READY, CONDITION_VALID, REASON_EXPORTED, REASON_FAILED,
    REASON_INVALID_SERVICE_TYPE, REASON_NO_CONFLICTS, REASON_NO_SERVICE, REASON_PENDING,
    REASON_READY, REASON_VALID,
};
pub use export::{ANNOTATION_EXPORT, LABEL_LOGICAL_CLUSTER};
pub use merge::ConflictKind;
pub use model::{ClusterId, ClusterName, MemberSnapshot, ModelError, Scope, ServiceKey, SliceKey};
pub use reconcile::{
    ClusterDesired, ClusterError, Desired, is_managed, reconcile, reconcile_at, reconcile_scoped,
    slice_service,
};
pub use slices::{
    ANNOTATION_DRAINING, ANNOTATION_WEIGHT, DEFAULT_WEIGHT, MAX_ENDPOINTS_PER_SLICE, slice_name,
};
pub use vip::{VipAllocator, VipError, VipRange};

/// What changed since the controller's last round, by service.
pub type Changes = sluice_kube::Changes<ServiceKey>;
/// An informer's objects by the service they belong to.
pub type ServiceIndex<K> = sluice_kube::Index<K, ServiceKey>;
