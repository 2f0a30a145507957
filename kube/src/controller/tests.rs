use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::time::{Duration, Instant};

use super::*;
use crate::changes::Changes;
use crate::scope::Scope;

#[tokio::test(start_paused = true)]
async fn a_key_is_queued_once_at_the_earliest_time_asked() {
    let q = Queue::new(Duration::from_millis(50));
    q.touch_after("a", Duration::from_secs(5));
    q.touch("a");
    q.touch("a");
    q.touch_after("a", Duration::from_secs(1));
    assert_eq!(q.depth(), (1, 0));
    // Not due before the debounce window ends.
    assert!(matches!(q.pop(), Err(Some(_))));
    tokio::time::advance(Duration::from_millis(50)).await;
    assert_eq!(q.pop(), Ok("a"));
    assert_eq!(q.pop(), Err(None));
}

#[tokio::test(start_paused = true)]
async fn a_key_touched_while_running_runs_again_after_never_at_once() {
    let q = Queue::new(Duration::ZERO);
    q.touch("a");
    assert_eq!(q.pop(), Ok("a"));
    q.touch("a");
    // Not handed out twice at a time.
    assert_eq!(q.pop(), Err(None));
    assert_eq!(q.depth(), (1, 1));
    q.done(&"a", Some(Duration::from_secs(10)));
    // The touch wins over the later requeue.
    assert_eq!(q.pop(), Ok("a"));
    q.done(&"a", None);
    assert_eq!(q.depth(), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn keys_come_out_in_the_order_they_fall_due() {
    let q = Queue::new(Duration::ZERO);
    q.touch_after("late", Duration::from_secs(2));
    q.touch_after("soon", Duration::from_secs(1));
    q.touch("now");
    assert_eq!(q.pop(), Ok("now"));
    let started = Instant::now();
    q.ready().await;
    assert_eq!(started.elapsed(), Duration::from_secs(1));
    assert_eq!(q.pop(), Ok("soon"));
    q.ready().await;
    assert_eq!(q.pop(), Ok("late"));
}

#[test]
fn backoff_doubles_to_its_bound() {
    let b = Backoff {
        first: Duration::from_millis(100),
        max: Duration::from_secs(1),
    };
    let delays: Vec<u128> = (1..=6).map(|n| b.after(n).as_millis()).collect();
    assert_eq!(delays, [100, 200, 400, 800, 1000, 1000]);
    assert_eq!(b.after(u32::MAX), Duration::from_secs(1));
}

/// Fails each key its first `fail` times, then asks for `action`; records every call.
struct Recorder {
    calls: Vec<(Instant, &'static str)>,
    fail: BTreeMap<&'static str, u32>,
    action: Action,
}

impl Reconciler for Recorder {
    type Key = &'static str;
    type Error = String;

    async fn reconcile(&mut self, key: &&'static str) -> Result<Action, String> {
        self.calls.push((Instant::now(), key));
        match self.fail.get_mut(key) {
            Some(n) if *n > 0 => {
                *n -= 1;
                Err("refused".into())
            }
            _ => Ok(self.action),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn failures_back_off_per_key_and_requeues_come_on_time() {
    let q = Arc::new(Queue::new(Duration::ZERO));
    let metrics = ControllerMetrics::default();
    let controller = Controller::new("test", q.clone(), metrics.clone()).with_backoff(Backoff {
        first: Duration::from_secs(1),
        max: Duration::from_secs(60),
    });
    let mut r = Recorder {
        calls: Vec::new(),
        fail: [("flaky", 3)].into(),
        action: Action::Requeue(Duration::from_secs(10)),
    };
    let (stop_tx, stop) = watch::channel(false);
    let t0 = Instant::now();
    q.touch("flaky");
    q.touch("fine");
    let run = controller.run(&mut r, stop);
    let stopper = async {
        tokio::time::sleep(Duration::from_secs(25)).await;
        stop_tx.send_replace(true);
    };
    let (result, ()) = tokio::join!(run, stopper);
    assert!(result.is_ok());
    let at = |key: &str| -> Vec<u64> {
        r.calls
            .iter()
            .filter(|(_, k)| *k == key)
            .map(|(t, _)| (*t - t0).as_secs())
            .collect()
    };
    // 1 s, 2 s, 4 s after each failure; then its requeue every 10 s.
    assert_eq!(at("flaky"), [0, 1, 3, 7, 17]);
    assert_eq!(at("fine"), [0, 10, 20]);
    let failed = metrics
        .reconciles
        .get_or_create(&metrics::OutcomeLabels {
            outcome: Outcome::Failed,
        })
        .get();
    assert_eq!(failed, 3);
    assert_eq!(metrics.failing.get(), 0);
}

#[tokio::test(start_paused = true)]
async fn nothing_runs_while_nothing_changes_and_a_touch_wakes_it() {
    let q = Arc::new(Queue::new(Duration::from_millis(50)));
    let controller = Controller::new("test", q.clone(), ControllerMetrics::default());
    let mut r = Recorder {
        calls: Vec::new(),
        fail: BTreeMap::new(),
        action: Action::AwaitChange,
    };
    let (stop_tx, stop) = watch::channel(false);
    let t0 = Instant::now();
    let toucher = async {
        tokio::time::sleep(Duration::from_secs(100)).await;
        q.touch("a");
        tokio::time::sleep(Duration::from_secs(100)).await;
        drop(stop_tx);
    };
    let (result, ()) = tokio::join!(controller.run(&mut r, stop), toucher);
    // The sender went away without saying stop: the controller says it was orphaned.
    assert!(result.is_err());
    let times: Vec<Duration> = r.calls.iter().map(|(t, _)| *t - t0).collect();
    assert_eq!(times, [Duration::from_millis(100_050)]);
}

/// Records each scope it is handed; fails its first `fail` calls; then asks for `action`.
struct Batches {
    calls: Vec<(Duration, Scope<u32>)>,
    t0: Instant,
    fail: u32,
    action: Action,
}

impl BatchReconciler for Batches {
    type Key = u32;
    type Error = String;

    async fn reconcile(&mut self, scope: &Scope<u32>) -> Result<Action, String> {
        self.calls.push((self.t0.elapsed(), scope.clone()));
        if self.fail > 0 {
            self.fail -= 1;
            return Err("refused".into());
        }
        Ok(self.action)
    }
}

#[tokio::test(start_paused = true)]
async fn a_batch_takes_every_change_together_and_a_failure_puts_it_back() {
    let changes = Arc::new(Changes::<u32>::default());
    let metrics = ControllerMetrics::default();
    let controller =
        BatchController::new("test", changes.clone(), metrics.clone()).with_backoff(Backoff {
            first: Duration::from_secs(1),
            max: Duration::from_secs(60),
        });
    let mut r = Batches {
        calls: Vec::new(),
        t0: Instant::now(),
        fail: 2,
        action: Action::AwaitChange,
    };
    changes.touch(1);
    changes.touch(2);
    let (stop_tx, stop) = watch::channel(false);
    let toucher = async {
        // During the backoff: joins the retry, not a reconcile of its own.
        tokio::time::sleep(Duration::from_millis(500)).await;
        changes.touch(3);
        tokio::time::sleep(Duration::from_secs(100)).await;
        changes.touch(4);
        changes.touch(4);
        tokio::time::sleep(Duration::from_secs(100)).await;
        stop_tx.send_replace(true);
    };
    let (result, ()) = tokio::join!(controller.run(&mut r, stop), toucher);
    assert!(result.is_ok());
    // A burst of touches may leave one wake-up over, handed out as an empty scope (the
    // same as a change no key names): what counts is every key, together, on time.
    let secs: Vec<(u64, Scope<u32>)> = r
        .calls
        .iter()
        .filter(|(_, s)| !s.is_empty())
        .map(|(t, s)| (t.as_secs(), s.clone()))
        .collect();
    assert_eq!(
        secs,
        [
            (0, Scope::Keys([1, 2].into())),
            // 1 s after the first failure, with what came meanwhile.
            (1, Scope::Keys([1, 2, 3].into())),
            // 2 s after the second.
            (3, Scope::Keys([1, 2, 3].into())),
            (100, Scope::Keys([4].into())),
        ]
    );
    let failed = metrics
        .reconciles
        .get_or_create(&metrics::OutcomeLabels {
            outcome: Outcome::Failed,
        })
        .get();
    assert_eq!(failed, 2);
    assert_eq!(metrics.failing.get(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_batch_requeue_wakes_with_nothing_in_particular_and_idle_costs_nothing() {
    let changes = Arc::new(Changes::<u32>::default());
    let controller = BatchController::new("test", changes.clone(), ControllerMetrics::default());
    let mut r = Batches {
        calls: Vec::new(),
        t0: Instant::now(),
        fail: 0,
        action: Action::Requeue(Duration::from_secs(30)),
    };
    let (stop_tx, stop) = watch::channel(false);
    let stopper = async {
        tokio::time::sleep(Duration::from_secs(70)).await;
        stop_tx.send_replace(true);
    };
    let (result, ()) = tokio::join!(controller.run(&mut r, stop), stopper);
    assert!(result.is_ok());
    let secs: Vec<(u64, Option<usize>)> = r
        .calls
        .iter()
        .map(|(t, s)| (t.as_secs(), s.len()))
        .collect();
    // At start (nothing recorded), then every 30 s as asked; nothing else.
    assert_eq!(secs, [(0, Some(0)), (30, Some(0)), (60, Some(0))]);
}
