//! What every reconciler of the runtime shares: what a reconcile asks for next
//! ([`Action`]), the per-key reconcile ([`Reconciler`]), the retry schedule after failures
//! ([`Backoff`]), and why a controller stopped unasked ([`Orphaned`]).

use std::future::Future;

use tokio::time::Duration;

/// What a reconcile asks for next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing until the key is touched again.
    AwaitChange,
    /// Look at the key again this much later (something is under way, e.g. a timed step).
    Requeue(Duration),
}

/// One controller's reconcile: bring the world in line for one key.
pub trait Reconciler {
    type Key: Ord + Clone + std::fmt::Debug + Send + Sync;
    type Error: std::fmt::Display;

    /// Reconcile `key`; an error is retried with backoff.
    fn reconcile(
        &mut self,
        key: &Self::Key,
    ) -> impl Future<Output = Result<Action, Self::Error>> + Send;
}

/// The retry delays after consecutive failures of one key: `first`, doubling to `max`.
#[derive(Clone, Copy, Debug)]
pub struct Backoff {
    pub first: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            first: Duration::from_millis(250),
            max: Duration::from_secs(30),
        }
    }
}

impl Backoff {
    /// The delay after the `n`th failure in a row (from 1).
    pub fn after(&self, n: u32) -> Duration {
        let factor = 1u32 << n.saturating_sub(1).min(16);
        self.first.saturating_mul(factor).min(self.max)
    }
}

/// Why a controller stopped before it was told to.
#[derive(Debug, thiserror::Error)]
#[error("the stop signal's sender is gone")]
pub struct Orphaned;
