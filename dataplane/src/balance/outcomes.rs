//! What an endpoint's attempts came to, counted for a move's health check: attempts,
//! errors (failed attempts, 5xx answers, gRPC errors in the response headers), and the
//! answers' latencies in a histogram of log-spaced buckets — cheap to bump on every request,
//! and two snapshots subtract into a window.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Buckets: the first holds up to 100 µs, each next one 25 % more; the last everything
/// above (~3.6 s).
pub const BUCKETS: usize = 48;
const FIRST_MICROS: f64 = 100.0;
const GROWTH: f64 = 1.25;

/// The live counters of one endpoint.
#[derive(Debug)]
pub struct Outcomes {
    attempts: AtomicU64,
    errors: AtomicU64,
    buckets: [AtomicU64; BUCKETS],
}

impl Default for Outcomes {
    fn default() -> Self {
        Self {
            attempts: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// Counters at one moment, or over a window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tally {
    pub attempts: u64,
    pub errors: u64,
    pub buckets: [u64; BUCKETS],
}

impl Default for Tally {
    fn default() -> Self {
        Self {
            attempts: 0,
            errors: 0,
            buckets: [0; BUCKETS],
        }
    }
}

fn bucket(rtt: Duration) -> usize {
    let micros = rtt.as_secs_f64() * 1e6;
    if micros <= FIRST_MICROS {
        return 0;
    }
    ((micros / FIRST_MICROS).ln() / GROWTH.ln())
        .ceil()
        .min((BUCKETS - 1) as f64) as usize
}

fn upper_micros(i: usize) -> u64 {
    (FIRST_MICROS * GROWTH.powi(i as i32)).round() as u64
}

impl Outcomes {
    /// An answer after `rtt`.
    pub fn answered(&self, rtt: Duration) {
        self.attempts.fetch_add(1, Ordering::Relaxed);
        self.buckets[bucket(rtt)].fetch_add(1, Ordering::Relaxed);
    }

    /// An attempt that got no answer (connect failure, reset, timeout).
    pub fn failed(&self) {
        self.attempts.fetch_add(1, Ordering::Relaxed);
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    /// The answer just counted was an error (a 5xx, a gRPC error).
    pub fn server_error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    pub fn tally(&self) -> Tally {
        Tally {
            attempts: self.attempts.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            buckets: std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed)),
        }
    }
}

impl Tally {
    pub fn add(&mut self, other: &Tally) {
        self.attempts += other.attempts;
        self.errors += other.errors;
        for (a, b) in self.buckets.iter_mut().zip(other.buckets) {
            *a += b;
        }
    }

    /// What happened between `earlier` and this (an endpoint that went and came back
    /// counts from zero: never negative).
    pub fn since(&self, earlier: &Tally) -> Tally {
        Tally {
            attempts: self.attempts.saturating_sub(earlier.attempts),
            errors: self.errors.saturating_sub(earlier.errors),
            buckets: std::array::from_fn(|i| self.buckets[i].saturating_sub(earlier.buckets[i])),
        }
    }

    /// The 99th percentile of the answers' latencies, as its bucket's upper bound in
    /// microseconds (0 without answers).
    pub fn p99_micros(&self) -> u64 {
        let n: u64 = self.buckets.iter().sum();
        if n == 0 {
            return 0;
        }
        let want = (n * 99).div_ceil(100);
        let mut seen = 0;
        for (i, c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= want {
                return upper_micros(i);
            }
        }
        upper_micros(BUCKETS - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_subtract_and_the_p99_lands_in_the_right_bucket() {
        let o = Outcomes::default();
        let before = o.tally();
        for _ in 0..990 {
            o.answered(Duration::from_micros(500));
        }
        for _ in 0..10 {
            o.answered(Duration::from_millis(40));
        }
        o.server_error();
        o.failed();
        let w = o.tally().since(&before);
        assert_eq!((w.attempts, w.errors), (1001, 2));
        // 500 µs falls in the bucket bounded by 100 × 1.25^8 ≈ 596 µs.
        assert_eq!(w.p99_micros(), 596);
        for _ in 0..20 {
            o.answered(Duration::from_millis(40));
        }
        let p99 = o.tally().since(&before).p99_micros();
        assert!((40_000..50_000).contains(&p99), "{p99}");
        assert_eq!(Tally::default().p99_micros(), 0);
        assert_eq!(bucket(Duration::from_secs(100)), BUCKETS - 1);
        assert_eq!(before.since(&o.tally()).attempts, 0, "never negative");
    }
}
