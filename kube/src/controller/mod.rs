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

mod metrics;
mod queue;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::time::{Duration, Instant};

pub use metrics::{ControllerMetrics, Outcome};
pub use queue::Queue;

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

/// A controller: its queue, backoff and metrics.
pub struct Controller<K: Ord + Clone> {
    name: &'static str,
    queue: Arc<Queue<K>>,
    backoff: Backoff,
    metrics: ControllerMetrics,
}

impl<K: Ord + Clone + std::fmt::Debug + Send + Sync> Controller<K> {
    /// A controller named `name` (in logs) reading keys from `queue`.
    pub fn new(name: &'static str, queue: Arc<Queue<K>>, metrics: ControllerMetrics) -> Self {
        Self {
            name,
            queue,
            backoff: Backoff::default(),
            metrics,
        }
    }

    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Reconcile keys as they fall due until `stop` turns true (a reconcile under way is
    /// dropped: each writes what differs, so the next start finishes it).
    pub async fn run<R: Reconciler<Key = K>>(
        self,
        reconciler: &mut R,
        mut stop: watch::Receiver<bool>,
    ) -> Result<(), Orphaned> {
        let mut failures: std::collections::BTreeMap<K, u32> = Default::default();
        loop {
            if *stop.borrow() {
                return Ok(());
            }
            let key = match self.queue.pop() {
                Ok(key) => key,
                Err(_) => {
                    self.gauge(&failures);
                    tokio::select! {
                        r = stop.changed() => {
                            if r.is_err() {
                                return Err(Orphaned);
                            }
                        }
                        _ = self.queue.ready() => {}
                    }
                    continue;
                }
            };
            let started = Instant::now();
            let span = tracing::debug_span!("reconcile", controller = self.name, key = ?key);
            let result = tokio::select! {
                r = tracing::Instrument::instrument(reconciler.reconcile(&key), span) => r,
                r = stop.changed() => {
                    self.queue.done(&key, None);
                    if r.is_err() {
                        return Err(Orphaned);
                    }
                    continue;
                }
            };
            let seconds = started.elapsed().as_secs_f64();
            match result {
                Ok(action) => {
                    failures.remove(&key);
                    let requeue = match action {
                        Action::AwaitChange => None,
                        Action::Requeue(d) => Some(d),
                    };
                    let outcome = if requeue.is_some() {
                        Outcome::Requeued
                    } else {
                        Outcome::Settled
                    };
                    self.metrics.ended(outcome, seconds);
                    self.queue.done(&key, requeue);
                }
                Err(e) => {
                    let n = failures.entry(key.clone()).or_default();
                    *n = n.saturating_add(1);
                    let delay = self.backoff.after(*n);
                    tracing::warn!(controller = self.name, key = ?key, error = %e,
                        failures = *n, retry_in = ?delay, "reconcile failed");
                    self.metrics.ended(Outcome::Failed, seconds);
                    self.queue.done(&key, Some(delay));
                }
            }
            self.gauge(&failures);
        }
    }

    fn gauge(&self, failures: &std::collections::BTreeMap<K, u32>) {
        let (queued, _) = self.queue.depth();
        self.metrics.queued.set(queued as i64);
        self.metrics.failing.set(failures.len() as i64);
    }
}
