//! Peak-EWMA latency (as linkerd2-proxy and Finagle balance by): a slow response raises
//! the estimate at once; fast ones bring it down with a decay of [`DECAY`], so an endpoint
//! that turned slow is avoided immediately and trusted again gradually.

use std::time::{Duration, Instant};

/// The decay window of the moving average.
pub const DECAY: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub struct PeakEwma {
    /// Estimated latency in nanoseconds.
    estimate: f64,
    updated: Instant,
}

impl PeakEwma {
    /// Start from `initial`: a guess, until the first response.
    pub fn new(initial: Duration) -> Self {
        Self {
            estimate: initial.as_nanos() as f64,
            updated: Instant::now(),
        }
    }

    pub fn observe(&mut self, rtt: Duration) {
        let now = Instant::now();
        let rtt = rtt.as_nanos() as f64;
        if rtt > self.estimate {
            self.estimate = rtt;
        } else {
            let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
            let w = (-elapsed / DECAY.as_secs_f64()).exp();
            self.estimate = self.estimate * w + rtt * (1.0 - w);
        }
        self.updated = now;
    }

    pub fn estimate_ns(&self) -> f64 {
        self.estimate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peaks_at_once_and_decays_gradually() {
        let mut e = PeakEwma::new(Duration::from_millis(1));
        e.observe(Duration::from_millis(100));
        assert_eq!(e.estimate_ns(), 100_000_000.0);
        e.observe(Duration::from_millis(1));
        assert!(
            e.estimate_ns() > 90_000_000.0,
            "one fast response does not erase a peak"
        );
    }
}
