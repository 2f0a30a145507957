//! Opt-in busy polling (`sluice proxy --busy-poll-us N`): after traffic, a worker keeps
//! polling its sockets for up to N µs instead of going to sleep in `epoll_wait`.
//!
//! A sleeping CPU takes time to wake when the next packet comes, and in a VM whose host
//! does no halt-polling for it a great deal (here: the HTTP/1.1 p99 at 5,000 req/s went
//! from 1.4-3.9 ms to 0.6 ms for HAProxy with its `busy-polling`, docs/benchmarks.md).
//! HAProxy's option never sleeps; this one spins only while requests keep coming and
//! sleeps once none came for the window, so an idle proxy costs no CPU.
//!
//! The spinner is a task that yields in a loop: a yielding task makes tokio poll the I/O
//! driver with a zero timeout before running it again, so each turn of the loop is one
//! `epoll_wait(0)` and whatever became ready runs at once. Request paths call
//! [`activity`], which wakes a sleeping spinner. Process-wide, like the runtime it keeps
//! awake.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use tokio::sync::Notify;

/// The process's busy polling, which the request paths report to.
static PROCESS: LazyLock<BusyPoll> = LazyLock::new(BusyPoll::default);

/// Start busy polling for the process: `spinners` spinners on the current runtime (one
/// per worker thread), each polling for `window` after the last activity. Zero: off.
pub fn start(window: Duration, spinners: usize) {
    PROCESS.start(window, spinners);
}

/// A request or connection arrived: keep (or start) polling.
#[inline]
pub fn activity() {
    PROCESS.activity();
}

/// Seconds spent polling, for `/metrics` (`sluice_proxy_busy_poll_seconds_total`).
pub fn spin_seconds() -> Counter<f64> {
    PROCESS.spin_seconds.clone()
}

/// Spinners and what wakes them.
#[derive(Default)]
struct BusyPoll {
    /// Whether busy polling runs at all: [`activity`] costs one load when it does not.
    enabled: AtomicBool,
    /// Requests (and accepted connections) seen, as a change marker for the spinners.
    activity: AtomicU64,
    /// Spinners are waiting for activity, which wakes them.
    asleep: AtomicBool,
    wake: Notify,
    spin_seconds: Counter<f64>,
}

impl BusyPoll {
    fn start(&'static self, window: Duration, spinners: usize) {
        if window.is_zero() {
            return;
        }
        self.enabled.store(true, Ordering::SeqCst);
        for _ in 0..spinners.max(1) {
            tokio::spawn(self.spin(window));
        }
        tracing::info!(window_us = window.as_micros(), spinners, "busy polling");
    }

    #[inline]
    fn activity(&self) {
        if !self.enabled.load(Ordering::Relaxed) {
            return;
        }
        self.activity.fetch_add(1, Ordering::SeqCst);
        if self.asleep.load(Ordering::SeqCst) {
            self.asleep.store(false, Ordering::SeqCst);
            self.wake.notify_waiters();
        }
    }

    async fn spin(&self, window: Duration) {
        loop {
            let started = Instant::now();
            let mut seen = self.activity.load(Ordering::SeqCst);
            let mut last = started;
            loop {
                tokio::task::yield_now().await;
                let now = self.activity.load(Ordering::SeqCst);
                if now != seen {
                    seen = now;
                    last = Instant::now();
                } else if last.elapsed() >= window {
                    break;
                }
            }
            self.spin_seconds.inc_by(started.elapsed().as_secs_f64());
            // Sleep until the next activity. Registering before the re-check means an
            // activity in between either shows in the counter or finds `asleep` set and
            // wakes this waiter.
            let woken = self.wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            self.asleep.store(true, Ordering::SeqCst);
            if self.activity.load(Ordering::SeqCst) == seen {
                woken.await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn spins_after_activity_and_sleeps_without_it() {
        // Its own instance: the process's one hears every test's traffic.
        let bp: &'static BusyPoll = Box::leak(Box::default());
        bp.start(Duration::from_millis(20), 1);
        bp.activity();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let spinning = bp.spin_seconds.get();
        // Asleep after the window: the counter stops moving.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let settled = bp.spin_seconds.get();
        assert!(settled > 0.015, "spun {settled} s");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            bp.spin_seconds.get(),
            settled,
            "still spinning (was {spinning})"
        );
        assert!(bp.asleep.load(Ordering::SeqCst));
        // Activity wakes it for another window.
        bp.activity();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(bp.spin_seconds.get() > settled + 0.015);
    }
}
