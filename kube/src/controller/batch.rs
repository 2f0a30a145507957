//! The runtime for a controller whose decision spans keys: the MCS controller merges a
//! service's exports from every member into one import, so it reconciles the services that
//! changed *together* (one snapshot of every member, writes to each member in parallel),
//! and the dataplane's cluster mode rebuilds its routing model for the services that
//! changed at once. Informer callbacks record keys in [`Changes`]; each wake-up hands the
//! reconciler everything recorded since the last one as a [`Scope`] (which may be empty:
//! a change no key names, or a timer the reconciler asked for). A failed reconcile puts
//! its scope back and is retried with [`Backoff`]; [`ControllerMetrics`] count what
//! happened, as for [`Controller`](super::Controller).

use std::future::Future;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::time::Instant;

use super::metrics::{ControllerMetrics, Outcome};
use super::reconciler::{Action, Backoff, Orphaned};
use crate::changes::Changes;
use crate::scope::Scope;

/// A reconcile of every key that changed together.
pub trait BatchReconciler {
    type Key: Ord + Send + Sync + 'static;
    type Error: std::fmt::Display;

    /// Reconcile `scope` (everything, for [`Scope::All`]; nothing in particular, for an
    /// empty scope: look at what no key names). An error puts the scope back.
    fn reconcile(
        &mut self,
        scope: &Scope<Self::Key>,
    ) -> impl Future<Output = Result<Action, Self::Error>> + Send;
}

/// A batch controller: its changes, backoff and metrics.
pub struct BatchController<K: Ord> {
    name: &'static str,
    changes: Arc<Changes<K>>,
    backoff: Backoff,
    metrics: ControllerMetrics,
}

impl<K: Ord + Send + Sync + 'static> BatchController<K> {
    /// A controller named `name` (in logs) taking its scopes from `changes`.
    pub fn new(name: &'static str, changes: Arc<Changes<K>>, metrics: ControllerMetrics) -> Self {
        Self {
            name,
            changes,
            backoff: Backoff::default(),
            metrics,
        }
    }

    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Reconcile as changes come until `stop` turns true. The first reconcile runs at
    /// once, over whatever was recorded before (record [`Changes::touch_all`] first for a
    /// full start).
    pub async fn run<R: BatchReconciler<Key = K>>(
        self,
        reconciler: &mut R,
        mut stop: watch::Receiver<bool>,
    ) -> Result<(), Orphaned> {
        let mut failures: u32 = 0;
        let mut next: Option<Instant> = Some(Instant::now());
        loop {
            if *stop.borrow() {
                return Ok(());
            }
            let timer = async {
                match next {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = stop.changed() => {
                    if r.is_err() {
                        return Err(Orphaned);
                    }
                    continue;
                }
                _ = self.changes.notified() => {}
                _ = timer => {}
            }
            // While a failure backs off, changes wait for the retry (it covers them too).
            if failures > 0 && next.is_some_and(|t| t > Instant::now()) {
                continue;
            }
            next = None;
            let scope = self.changes.take();
            self.metrics.queued.set(scope.len().unwrap_or(0) as i64);
            let started = Instant::now();
            let span =
                tracing::debug_span!("reconcile", controller = self.name, keys = ?scope.len());
            let result = tokio::select! {
                r = tracing::Instrument::instrument(reconciler.reconcile(&scope), span) => r,
                r = stop.changed() => {
                    if r.is_err() {
                        return Err(Orphaned);
                    }
                    return Ok(());
                }
            };
            let seconds = started.elapsed().as_secs_f64();
            match result {
                Ok(action) => {
                    failures = 0;
                    let outcome = match action {
                        Action::AwaitChange => Outcome::Settled,
                        Action::Requeue(d) => {
                            next = Some(Instant::now() + d);
                            Outcome::Requeued
                        }
                    };
                    self.metrics.ended(outcome, seconds);
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    let after = self.backoff.after(failures);
                    tracing::debug!(controller = self.name, error = %e, failures, retry_in = ?after, "reconcile failed");
                    self.changes.restore(scope);
                    next = Some(Instant::now() + after);
                    self.metrics.ended(Outcome::Failed, seconds);
                }
            }
            self.metrics.failing.set(i64::from(failures > 0));
            self.metrics.queued.set(0);
        }
    }
}
