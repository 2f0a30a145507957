//! The retry budget: retries allowed as a fraction of the requests of the last ten
//! seconds, on top of a reserve of 10 per second (as Finagle and Linkerd do).
//!
//! The window slides one second at a time. A fixed one-second window (the first design)
//! failed requests it should have retried: when a frozen tunnel releases its stalled
//! requests all at once just after the window rolled, the few requests counted so far
//! allowed only the floor of 10 retries. Over ten seconds the reserve is 100 retries and
//! a burst is judged against the traffic that preceded it, while a lasting outage is
//! still held to `ratio` extra load.

use std::sync::Mutex;
use std::time::Instant;

/// The window, in one-second slots.
const WINDOW_SECS: u64 = 10;
/// Retries per second allowed whatever the traffic, so a quiet service can retry too.
const MIN_RETRIES_PER_SEC: u64 = 10;

pub struct RetryBudget {
    state: Mutex<State>,
}

struct State {
    ratio: f64,
    origin: Instant,
    slots: [Slot; WINDOW_SECS as usize],
}

#[derive(Clone, Copy, Default)]
struct Slot {
    /// Seconds since `origin` this slot counts for.
    second: u64,
    requests: u64,
    retries: u64,
}

impl State {
    fn now(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.origin).as_secs()
    }

    fn slot(&mut self, second: u64) -> &mut Slot {
        let slot = &mut self.slots[(second % WINDOW_SECS) as usize];
        if slot.second != second {
            *slot = Slot {
                second,
                ..Slot::default()
            };
        }
        slot
    }

    /// Requests and retries of the window ending at `second`.
    fn totals(&self, second: u64) -> (u64, u64) {
        self.slots
            .iter()
            .filter(|s| second - s.second.min(second) < WINDOW_SECS)
            .fold((0, 0), |(q, r), s| (q + s.requests, r + s.retries))
    }

    fn try_retry(&mut self, at: Instant) -> bool {
        let second = self.now(at);
        let (requests, retries) = self.totals(second);
        let allowed = (requests as f64 * self.ratio) as u64 + MIN_RETRIES_PER_SEC * WINDOW_SECS;
        if retries < allowed {
            self.slot(second).retries += 1;
            true
        } else {
            false
        }
    }
}

impl RetryBudget {
    pub fn new(ratio: f64) -> Self {
        let origin = Instant::now();
        Self {
            state: Mutex::new(State {
                ratio,
                origin,
                // Slot 0 belongs to second 0; the others' second (0) is outside any window
                // that does not include it, and empty either way.
                slots: [Slot::default(); WINDOW_SECS as usize],
            }),
        }
    }

    pub fn set_ratio(&self, ratio: f64) {
        if let Ok(mut s) = self.state.lock() {
            s.ratio = ratio;
        }
    }

    /// Count a request (a first attempt).
    pub fn request(&self) {
        self.request_at(Instant::now());
    }

    /// Spend one retry if the budget allows.
    pub fn try_retry(&self) -> bool {
        self.try_retry_at(Instant::now())
    }

    fn request_at(&self, at: Instant) {
        if let Ok(mut s) = self.state.lock() {
            let second = s.now(at);
            s.slot(second).requests += 1;
        }
    }

    fn try_retry_at(&self, at: Instant) -> bool {
        self.state.lock().is_ok_and(|mut s| s.try_retry(at))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn spend(b: &RetryBudget, at: Instant) -> u64 {
        let mut n = 0;
        while b.try_retry_at(at) {
            n += 1;
            assert!(n < 1_000_000);
        }
        n
    }

    #[test]
    fn a_burst_just_after_a_second_boundary_is_judged_by_the_whole_window() {
        let b = RetryBudget::new(0.2);
        let t0 = Instant::now();
        // 200 requests per second for 5 s, then a burst of failures 10 ms into second 5.
        for s in 0..5 {
            for i in 0..200 {
                b.request_at(t0 + Duration::from_secs(s) + Duration::from_millis(i * 5));
            }
        }
        let at = t0 + Duration::from_millis(5_010);
        b.request_at(at);
        // 1,001 requests x 0.2 + the 100 reserve.
        assert_eq!(spend(&b, at), 300);
    }

    #[test]
    fn a_lasting_outage_is_held_to_the_ratio() {
        let b = RetryBudget::new(0.2);
        let t0 = Instant::now();
        let mut granted = 0;
        // 100 s of 100 requests per second, every one failing and asking for retries.
        for s in 0..100 {
            let at = t0 + Duration::from_secs(s);
            for _ in 0..100 {
                b.request_at(at);
            }
            granted += spend(&b, at);
        }
        // Per 10 s window: 1,000 x 0.2 + 100 = 300 retries; ten windows.
        assert!((2_900..=3_100).contains(&granted), "{granted}");
    }

    #[test]
    fn old_requests_leave_the_window() {
        let b = RetryBudget::new(0.5);
        let t0 = Instant::now();
        for _ in 0..1000 {
            b.request_at(t0);
        }
        assert_eq!(spend(&b, t0 + Duration::from_secs(9)), 600);
        // Eleven seconds later neither those requests nor those retries count.
        assert_eq!(spend(&b, t0 + Duration::from_secs(20)), 100);
    }

    #[test]
    fn the_ratio_can_change() {
        let b = RetryBudget::new(0.0);
        let t0 = Instant::now();
        for _ in 0..100 {
            b.request_at(t0);
        }
        b.set_ratio(1.0);
        assert_eq!(spend(&b, t0), 200);
    }
}
