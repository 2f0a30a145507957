//! The controller runtime every Sluice controller runs on, in kube-runtime's `Controller`
//! shape: informer callbacks touch keys in a [`Queue`]; one key at a time is reconciled
//! against the informers' stores; the reconcile returns an [`Action`] (wait for the next
//! change, or look again after a while); a failure is retried with exponential backoff
//! per key; [`ControllerMetrics`] count what happened. Nothing runs when nothing changed:
//! there is no periodic pass over every key.
//!
//! Keys are reconciled one at a time, in the order they fall due: a controller's decisions
//! may share state (what placement has counted on each cluster), and one worker makes
//! that state a plain `&mut`. (kube-runtime's `Controller` runs keys concurrently; Sluice's
//! reconciles are reads of a local store and a few writes, and one worker keeps up.)
//!
//! A controller whose decision spans keys (a service's import merges every member's
//! exports) runs on [`BatchController`] instead: everything that changed since its last
//! reconcile, together.

mod batch;
mod keyed;
mod metrics;
mod queue;
mod reconciler;
#[cfg(test)]
mod tests;

pub use batch::{BatchController, BatchReconciler};
pub use keyed::Controller;
pub use metrics::{ControllerMetrics, Outcome};
pub use queue::Queue;
pub use reconciler::{Action, Backoff, Orphaned, Reconciler};
