//! Latency samples for the benchmarks: percentiles and the line each figure prints as.

use std::time::Duration;

/// Samples of one operation.
#[derive(Default)]
pub struct Latencies(pub Vec<Duration>);

impl Latencies {
    /// The `p` quantile (0..=1); zero when empty.
    pub fn pct(&mut self, p: f64) -> Duration {
        if self.0.is_empty() {
            return Duration::ZERO;
        }
        self.0.sort();
        let i = ((self.0.len() as f64 * p).ceil() as usize).clamp(1, self.0.len()) - 1;
        self.0[i]
    }

    /// Print `what` with p50 and p99; the p99.
    pub fn line(&mut self, what: &str) -> Duration {
        let (p50, p99) = (self.pct(0.50), self.pct(0.99));
        println!(
            "{what:<44} p50 {:>8.3} ms   p99 {:>8.3} ms   (n={})",
            ms(p50),
            ms(p99),
            self.0.len()
        );
        p99
    }
}

/// Milliseconds, fractional.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A benchmark's size from the environment variable `name`, or `default`.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
