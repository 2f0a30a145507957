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

/// Requests (and accepted connections) seen, as a change marker for the spinners.
static ACTIVITY: AtomicU64 = AtomicU64::new(0);
/// Whether busy polling runs at all: [`activity`] costs one load when it does not.
static ENABLED: AtomicBool = AtomicBool::new(false);
/// Spinners waiting for activity; [`activity`] wakes them.
static ASLEEP: AtomicBool = AtomicBool::new(false);
static WAKE: Notify = Notify::const_new();

/// Seconds spent spinning, for `/metrics` (`sluice_proxy_busy_poll_seconds_total`).
pub static SPIN_SECONDS: LazyLock<Counter<f64>> = LazyLock::new(Counter::default);

/// Start `spinners` spinners on the current runtime (one per worker thread), each
/// polling for `window` after the last activity.
pub fn start(window: Duration, spinners: usize) {
    if window.is_zero() {
        return;
    }
    ENABLED.store(true, Ordering::SeqCst);
    for _ in 0..spinners.max(1) {
        tokio::spawn(spin(window));
    }
    tracing::info!(window_us = window.as_micros(), spinners, "busy polling");
}

/// A request or connection arrived: keep (or start) polling.
#[inline]
pub fn activity() {
    if !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    ACTIVITY.fetch_add(1, Ordering::SeqCst);
    if ASLEEP.load(Ordering::SeqCst) {
        ASLEEP.store(false, Ordering::SeqCst);
        WAKE.notify_waiters();
    }
}

async fn spin(window: Duration) {
    loop {
        let started = Instant::now();
        let mut seen = ACTIVITY.load(Ordering::SeqCst);
        let mut last = started;
        loop {
            tokio::task::yield_now().await;
            let now = ACTIVITY.load(Ordering::SeqCst);
            if now != seen {
                seen = now;
                last = Instant::now();
            } else if last.elapsed() >= window {
                break;
            }
        }
        SPIN_SECONDS.inc_by(started.elapsed().as_secs_f64());
        // Sleep until the next activity. Registering before the re-check means an
        // activity in between either shows in the counter or finds ASLEEP set and
        // wakes this waiter.
        let woken = WAKE.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        ASLEEP.store(true, Ordering::SeqCst);
        if ACTIVITY.load(Ordering::SeqCst) == seen {
            woken.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn spins_after_activity_and_sleeps_without_it() {
        start(Duration::from_millis(20), 1);
        activity();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let spinning = SPIN_SECONDS.get();
        // Asleep after the window: the counter stops moving.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let settled = SPIN_SECONDS.get();
        assert!(settled > 0.015, "spun {settled} s");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            SPIN_SECONDS.get(),
            settled,
            "still spinning (was {spinning})"
        );
        assert!(ASLEEP.load(Ordering::SeqCst));
        // Activity wakes it for another window.
        activity();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(SPIN_SECONDS.get() > settled + 0.015);
    }
}
