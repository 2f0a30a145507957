//! Waiting for a condition with a generous deadline: tests on a busy machine assert that
//! something happens, never how fast.

use std::future::Future;
use std::time::{Duration, Instant};

/// Poll an async condition until it holds or `timeout` passes; whether it held.
pub async fn eventually<F, Fut>(timeout: Duration, f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    until_every(timeout, Duration::from_millis(20), f)
        .await
        .is_some()
}

/// Poll an async condition until it holds or `timeout` passes; how long it took.
pub async fn until<F, Fut>(timeout: Duration, f: F) -> Option<Duration>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    until_every(timeout, Duration::from_millis(2), f).await
}

/// [`until`] polling every `interval`; the condition is asked once more at the deadline.
pub async fn until_every<F, Fut>(
    timeout: Duration,
    interval: Duration,
    mut f: F,
) -> Option<Duration>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < timeout {
        if f().await {
            return Some(start.elapsed());
        }
        tokio::time::sleep(interval).await;
    }
    f().await.then(|| start.elapsed())
}

/// Poll a blocking condition (a subprocess, a blocking socket) until it holds or
/// `timeout` passes; whether it held.
pub fn eventually_blocking(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[tokio::test]
    async fn a_condition_that_never_holds_times_out_and_one_that_does_returns() {
        assert!(!super::eventually(Duration::from_millis(50), || async { false }).await);
        let mut n = 0;
        assert!(
            super::until(Duration::from_secs(5), || {
                n += 1;
                let done = n > 3;
                async move { done }
            })
            .await
            .is_some()
        );
        assert!(super::eventually_blocking(
            Duration::from_millis(10),
            || true
        ));
    }
}
