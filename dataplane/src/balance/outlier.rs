//! Outlier detection: consecutive failures eject an endpoint for a time that doubles with
//! every ejection (1 s, 2 s, 4 s … at most 30 s); a success resets the count. The
//! balancer ignores ejections when every endpoint is ejected, so detection never takes
//! the last endpoints away.

use std::time::{Duration, Instant};

/// Failures in a row that eject.
pub const CONSECUTIVE_FAILURES: u32 = 5;
const BASE: Duration = Duration::from_secs(1);
const MAX: Duration = Duration::from_secs(30);

#[derive(Debug, Default)]
pub struct Outlier {
    failures: u32,
    ejections: u32,
    until: Option<Instant>,
}

impl Outlier {
    /// A failure; `true` if it ejected the endpoint.
    pub fn failure(&mut self, now: Instant) -> bool {
        self.failures += 1;
        if self.failures < CONSECUTIVE_FAILURES || self.ejected(now) {
            return false;
        }
        let backoff = BASE.saturating_mul(1u32 << self.ejections.min(5)).min(MAX);
        self.ejections += 1;
        self.failures = 0;
        self.until = Some(now + backoff);
        true
    }

    pub fn success(&mut self) {
        self.failures = 0;
        if self.until.is_none() {
            self.ejections = 0;
        }
    }

    pub fn ejected(&self, now: Instant) -> bool {
        self.until.is_some_and(|u| now < u)
    }

    /// Called when the ejection ran out and a request succeeded again.
    pub fn recovered(&mut self, now: Instant) {
        if self.until.is_some_and(|u| now >= u) {
            self.until = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ejects_after_consecutive_failures_with_growing_backoff() {
        let mut o = Outlier::default();
        let t = Instant::now();
        for _ in 0..4 {
            assert!(!o.failure(t));
        }
        assert!(o.failure(t));
        assert!(o.ejected(t + Duration::from_millis(900)));
        assert!(!o.ejected(t + Duration::from_millis(1100)));
        let t2 = t + Duration::from_secs(2);
        for _ in 0..4 {
            o.failure(t2);
        }
        assert!(o.failure(t2));
        assert!(
            o.ejected(t2 + Duration::from_millis(1900)),
            "second ejection lasts 2 s"
        );
    }

    #[test]
    fn a_success_resets_the_count() {
        let mut o = Outlier::default();
        let t = Instant::now();
        for _ in 0..4 {
            o.failure(t);
        }
        o.success();
        assert!(!o.failure(t));
    }
}
