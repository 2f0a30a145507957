//! Busy polling: a worker keeps polling its sockets instead of going to sleep in
//! `epoll_wait`, (a) while a request awaits its upstream's response
//! (`sluice proxy --poll-upstream-us N`, on by default) and (b) for N µs after the last
//! request (`--busy-poll-us N`, opt-in).
//!
//! A sleeping CPU takes time to wake when the next packet comes, and in a VM whose host
//! does no halt-polling for it a great deal (here: the HTTP/1.1 p99 at 5,000 req/s went
//! from 1.4-3.9 ms to 0.6 ms for HAProxy with its `busy-polling`, docs/benchmarks.md).
//! HAProxy's option never sleeps, which costs a core. (b) spins only while requests keep
//! coming. (a) is the cheap part of it: between sending a request and its response the
//! worker would sleep for a few tens of µs and pay a wake-up; polling through that gap
//! takes a third of the worker's sleeps away for about 1% of a core at 5,000 req/s. It is
//! bounded three ways so a slow upstream cannot turn it into a spinning proxy: only up to
//! N µs after the last send, only while responses are due, and only out of a credit of
//! [`CREDIT_PER_REQUEST`] per request sent. And it pauses while the CPU is shared: where
//! the upstream (or anything else) runs on the worker's CPU, a polling worker only delays
//! the response it waits for (measured: 1.5x the CPU, p50 0.50 -> 0.65 ms). The process
//! being preempted shows it: more than [`CONTENDED`] involuntary context switches per
//! polling episode, sampled every [`SAMPLE_EPISODES`], pause polling for [`PAUSE`].
//!
//! The spinner is a task that yields in a loop: a yielding task makes tokio poll the I/O
//! driver with a zero timeout before running it again, so each turn of the loop is one
//! `epoll_wait(0)` and whatever became ready runs at once. Request paths call
//! [`activity`] and [`awaiting_upstream`], which wake a sleeping spinner. Process-wide,
//! like the runtime it keeps awake.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use tokio::sync::Notify;

/// Polling for upstream responses may cost at most this much per request sent (a
/// response due within the window arrives well inside it; see the module doc).
pub const CREDIT_PER_REQUEST: Duration = Duration::from_micros(50);

/// Unused credit kept for later: a burst's worth, not a quiet hour's.
const CREDIT_MAX: Duration = Duration::from_millis(5);

/// Involuntary context switches per polling episode above which the CPU counts as shared.
/// Measured at 5,000 req/s: about 3 where the upstream shares the CPU, 0.02 on a CPU of
/// its own.
pub const CONTENDED: f64 = 0.25;

/// Polling episodes between two samples of the process's involuntary context switches.
pub const SAMPLE_EPISODES: u32 = 16;

/// How long polling for responses pauses once the CPU counts as shared; doubled for each
/// sample after a pause that finds it still shared, up to [`PAUSE_MAX`].
pub const PAUSE: Duration = Duration::from_secs(1);
pub const PAUSE_MAX: Duration = Duration::from_secs(30);

/// The process's busy polling, which the request paths report to.
static PROCESS: LazyLock<BusyPoll> = LazyLock::new(BusyPoll::default);

/// Start busy polling for the process: `spinners` spinners on the current runtime (one
/// per worker thread), each polling for `window` after the last activity, and while a
/// request awaits its upstream's response for up to `upstream` after it was sent. Both
/// zero: off.
pub fn start(window: Duration, upstream: Duration, spinners: usize) {
    PROCESS.start(window, upstream, spinners);
}

/// A request or connection arrived: keep (or start) polling.
#[inline]
pub fn activity() {
    PROCESS.activity();
}

/// A request was sent upstream and its response is due: poll until the guard drops
/// (within the bounds in the module doc). Off: a no-op guard.
#[inline]
pub fn awaiting_upstream() -> Awaiting {
    PROCESS.awaiting()
}

/// Seconds spent polling, for `/metrics` (`sluice_proxy_busy_poll_seconds_total`).
pub fn spin_seconds() -> Counter<f64> {
    PROCESS.spin_seconds.clone()
}

/// Spinners and what wakes them.
#[derive(Default)]
struct BusyPoll {
    /// Whether the spinners poll after activity (`--busy-poll-us`): [`activity`] costs
    /// one load when they do not.
    after: AtomicBool,
    /// Requests (and accepted connections) seen, as a change marker for the spinners.
    activity: AtomicU64,
    /// Whether requests awaiting their upstream's response keep the spinners polling.
    upstream: AtomicBool,
    /// Requests sent upstream whose response head has not come.
    awaiting: AtomicUsize,
    /// Nanoseconds of polling for responses still allowed: [`CREDIT_PER_REQUEST`] per
    /// request sent, spent as spinners poll for responses.
    credit_ns: AtomicI64,
    /// Polling for responses is paused: the CPU is shared (see the module doc).
    paused: AtomicBool,
    /// Polling episodes since the last sample of involuntary context switches.
    episodes: AtomicU32,
    /// The process's involuntary context switches at the last sample; `None`: no sample.
    preempted: Mutex<Option<u64>>,
    /// Where those come from.
    switches: Switches,
    /// Spinners are waiting for activity, which wakes them.
    asleep: AtomicBool,
    wake: Notify,
    spin_seconds: Counter<f64>,
}

impl BusyPoll {
    fn start(&'static self, window: Duration, upstream: Duration, spinners: usize) {
        if window.is_zero() && upstream.is_zero() {
            return;
        }
        self.upstream.store(!upstream.is_zero(), Ordering::SeqCst);
        self.after.store(!window.is_zero(), Ordering::SeqCst);
        for _ in 0..spinners.max(1) {
            tokio::spawn(self.spin(window, upstream));
        }
        tracing::info!(
            window_us = window.as_micros(),
            upstream_us = upstream.as_micros(),
            spinners,
            "busy polling"
        );
    }

    #[inline]
    fn activity(&self) {
        if self.after.load(Ordering::Relaxed) {
            self.bump();
        }
    }

    /// Mark activity and wake sleeping spinners.
    fn bump(&self) {
        self.activity.fetch_add(1, Ordering::SeqCst);
        if self.asleep.load(Ordering::SeqCst) {
            self.asleep.store(false, Ordering::SeqCst);
            self.wake.notify_waiters();
        }
    }

    fn awaiting(&'static self) -> Awaiting {
        if !self.upstream.load(Ordering::Relaxed) || self.paused.load(Ordering::Relaxed) {
            return Awaiting(None);
        }
        self.awaiting.fetch_add(1, Ordering::SeqCst);
        let (per, max) = (nanos(CREDIT_PER_REQUEST), nanos(CREDIT_MAX));
        let _ = self
            .credit_ns
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
                Some(c.saturating_add(per).min(max))
            });
        self.bump();
        Awaiting(Some(self))
    }

    async fn spin(&self, window: Duration, upstream: Duration) {
        let mut pause = PAUSE;
        loop {
            let started = Instant::now();
            let mut seen = self.activity.load(Ordering::SeqCst);
            let mut last = started;
            let mut turn = started;
            loop {
                tokio::task::yield_now().await;
                let previous = turn;
                turn = Instant::now();
                let now = self.activity.load(Ordering::SeqCst);
                if now != seen {
                    seen = now;
                    last = turn;
                    continue;
                }
                let idle = turn.saturating_duration_since(last);
                if idle < window {
                    continue;
                }
                // Past the window: polling only for responses due, paid from the credit.
                if idle >= upstream || self.awaiting.load(Ordering::SeqCst) == 0 {
                    break;
                }
                let spent = nanos(turn.saturating_duration_since(previous));
                if self.credit_ns.fetch_sub(spent, Ordering::Relaxed) <= spent {
                    // No debt: a preempted turn (milliseconds on a busy machine) would
                    // otherwise eat the credit of the requests that come after it.
                    self.credit_ns.fetch_max(0, Ordering::Relaxed);
                    break;
                }
                // Give the CPU to whatever else wants it (the upstream, maybe): returns at
                // once on a CPU of its own.
                let _ = nix::sched::sched_yield();
            }
            self.spin_seconds.inc_by(started.elapsed().as_secs_f64());
            // Asked for by name (`--busy-poll-us`), polling goes on regardless.
            if window.is_zero() {
                match self.contended(self.switches.0) {
                    Some(true) => {
                        self.paused.store(true, Ordering::SeqCst);
                        tracing::debug!(pause_ms = pause.as_millis(), "CPU shared: polling paused");
                        tokio::time::sleep(pause).await;
                        self.paused.store(false, Ordering::SeqCst);
                        pause = (pause * 2).min(PAUSE_MAX);
                    }
                    Some(false) => pause = PAUSE,
                    None => {}
                }
            }
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

    /// Count a polling episode; every [`SAMPLE_EPISODES`], whether the process was
    /// preempted more than [`CONTENDED`] times per episode since the last sample (`None`
    /// between samples). `switches` reads the process's involuntary context switches.
    fn contended(&self, switches: impl FnOnce() -> Option<u64>) -> Option<bool> {
        if self.episodes.fetch_add(1, Ordering::Relaxed) + 1 < SAMPLE_EPISODES {
            return None;
        }
        self.episodes.store(0, Ordering::Relaxed);
        let now = switches();
        let mut last = self.preempted.lock().ok()?;
        let before = std::mem::replace(&mut *last, now);
        let contended = preempted_too_often(before?, now?);
        if contended {
            // The next sample starts after the pause, not from before it.
            *last = None;
        }
        Some(contended)
    }
}

/// Whether `now - before` involuntary switches over a sample is over [`CONTENDED`] per
/// episode.
fn preempted_too_often(before: u64, now: u64) -> bool {
    now.saturating_sub(before) as f64 > CONTENDED * f64::from(SAMPLE_EPISODES)
}

/// Reads the process's involuntary context switches: [`involuntary_switches`], but for
/// tests, whose polling must not pause because other tests keep the CPUs busy.
struct Switches(fn() -> Option<u64>);

impl Default for Switches {
    fn default() -> Self {
        Self(involuntary_switches)
    }
}

/// The process's involuntary context switches, all threads.
fn involuntary_switches() -> Option<u64> {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_SELF)
        .ok()
        .and_then(|u| u64::try_from(u.involuntary_context_switches()).ok())
}

fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// A request awaiting its upstream's response (see [`awaiting_upstream`]).
pub struct Awaiting(Option<&'static BusyPoll>);

impl Drop for Awaiting {
    fn drop(&mut self) {
        if let Some(bp) = self.0 {
            bp.awaiting.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Its own instance (the process's one hears every test's traffic), one that never
    /// finds the CPU shared.
    fn isolated() -> &'static BusyPoll {
        Box::leak(Box::new(BusyPoll {
            switches: Switches(|| None),
            ..BusyPoll::default()
        }))
    }

    #[tokio::test(flavor = "current_thread")]
    async fn spins_after_activity_and_sleeps_without_it() {
        let bp = isolated();
        bp.start(Duration::from_millis(20), Duration::ZERO, 1);
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

    #[tokio::test(flavor = "current_thread")]
    async fn polls_for_due_responses_within_the_credit_and_until_they_come() {
        // Wall-clock bounds would fail on a loaded machine (a preempted turn lasts
        // milliseconds): the checks are on the poller's state and its credit.
        let bp = isolated();
        bp.start(Duration::ZERO, Duration::from_millis(50), 1);
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(bp.asleep.load(Ordering::SeqCst));
        // Requests arriving do not poll in this mode; only responses due do.
        let before = bp.spin_seconds.get();
        bp.activity();
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(bp.asleep.load(Ordering::SeqCst));
        assert_eq!(
            bp.spin_seconds.get(),
            before,
            "polled for a request arriving"
        );

        // One request sent: polls out of its credit, not for the whole 50 ms window.
        let due = bp.awaiting();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(bp.credit_ns.load(Ordering::SeqCst) <= 0, "credit left");
        assert!(bp.asleep.load(Ordering::SeqCst), "polls beyond its credit");
        drop(due);

        // Enough credit (capped at CREDIT_MAX): polls until the responses come, then
        // sleeps with credit left.
        let dues: Vec<_> = (0..200).map(|_| bp.awaiting()).collect();
        assert_eq!(bp.credit_ns.load(Ordering::SeqCst), nanos(CREDIT_MAX));
        tokio::task::yield_now().await;
        assert!(!bp.asleep.load(Ordering::SeqCst), "not polling");
        drop(dues);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(bp.asleep.load(Ordering::SeqCst));
        assert_eq!(bp.awaiting.load(Ordering::SeqCst), 0);
        let left = bp.credit_ns.load(Ordering::SeqCst);
        assert!(left > 0, "credit {left} ns: polled past the responses");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn stops_polling_a_window_after_the_last_send() {
        let bp = isolated();
        bp.start(Duration::ZERO, Duration::from_millis(1), 1);
        // 5 ms of credit, a response that never comes: polls for the 1 ms window only.
        // A turn is charged only if the window had not passed when it ended, so less
        // than the window's worth is spent however long a preempted turn lasts.
        let due: Vec<_> = (0..200).map(|_| bp.awaiting()).collect();
        let deadline = Instant::now() + Duration::from_secs(2);
        while !bp.asleep.load(Ordering::SeqCst) {
            assert!(Instant::now() < deadline, "still polling");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let left = bp.credit_ns.load(Ordering::SeqCst);
        assert!(
            left > nanos(CREDIT_MAX - Duration::from_millis(1)),
            "stopped by the credit ({left} ns left), not the window"
        );
        drop(due);
    }

    #[test]
    fn pauses_when_the_process_is_preempted_while_polling() {
        let bp = BusyPoll::default();
        let mut switches = 0u64;
        let episodes = |bp: &BusyPoll, per_episode: u64, switches: &mut u64| {
            (0..SAMPLE_EPISODES)
                .map(|_| {
                    *switches += per_episode;
                    let s = *switches;
                    bp.contended(|| Some(s))
                })
                .filter(|&c| c == Some(true))
                .count()
        };
        // The first sample has nothing to compare with.
        assert_eq!(episodes(&bp, 3, &mut switches), 0);
        // A CPU of its own: an occasional preemption is no reason to pause.
        assert_eq!(episodes(&bp, 0, &mut switches), 0);
        // Shared: preempted in every episode.
        assert_eq!(episodes(&bp, 1, &mut switches), 1);
        // After a pause the count starts afresh.
        assert_eq!(episodes(&bp, 1, &mut switches), 0);
        assert_eq!(episodes(&bp, 1, &mut switches), 1);
        // No figure from the kernel: never pauses.
        assert!((0..2 * SAMPLE_EPISODES).all(|_| bp.contended(|| None) != Some(true)));
        assert!(involuntary_switches().is_some());
    }
}
