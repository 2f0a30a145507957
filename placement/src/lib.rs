//! The placement controllers of the control plane: which physical clusters each namespace
//! of a logical cluster runs on (a `Placement`'s selectors, or the break-glass label
//! `sluice.dev/cluster`), moves make-before-break, cordons and drains, and workload status
//! summed back from the clusters' reports.
//!
//! They are API clients like any other (wildcard watches through `/clusters/*`, writes to
//! each logical cluster), so they run inside `sluice control` today and can run apart
//! later. The rules are pure ([`schedule`], [`status`], [`demand`], [`imports`],
//! [`shift`], [`rollback`], [`tenancy`]); [`controller`] is the IO around
//! them; [`drain`] is what a command line needs to cordon, drain and follow a cluster.

pub mod controller;
pub mod copy;
pub mod demand;
pub mod drain;
pub mod imports;
pub mod ordinal_claims;
pub mod rollback;
pub mod schedule;
pub mod shift;
pub mod status;
pub mod tenancy;

pub use controller::{PlacementError, run};
/// The placement controllers' metrics: the runtime's, per controller.
pub use sluice_kube::controller::ControllerMetrics as PlacementMetrics;
