//! The per-key controller: keys from a [`Queue`], one reconciled at a time, each failure
//! retried with the key's own backoff.

use std::sync::Arc;

use tokio::sync::watch;
use tokio::time::Instant;

use super::metrics::{ControllerMetrics, Outcome};
use super::queue::Queue;
use super::reconciler::{Action, Backoff, Orphaned, Reconciler};

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
