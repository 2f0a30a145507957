//! The work queue of a controller: keys due now or later, each at most once, none handed
//! out twice at a time. A key touched while it is being reconciled is handed out again
//! after (so no change is lost and no key is reconciled concurrently with itself); a key
//! scheduled twice keeps the earlier time (as kube-runtime's scheduler does), so a burst of
//! touches inside a debounce window costs one reconcile.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;
use tokio::time::{Duration, Instant};

/// A controller's keys and when each is due.
pub struct Queue<K: Ord + Clone> {
    state: Mutex<State<K>>,
    wake: Notify,
    /// How long a touched key waits for the changes that come with it.
    debounce: Duration,
}

struct State<K> {
    /// When each queued key is due.
    due: BTreeMap<K, Instant>,
    /// The queued keys in the order they are due.
    order: BTreeSet<(Instant, K)>,
    /// Keys handed out and not yet done.
    running: BTreeSet<K>,
    /// Keys touched while running: queued again (at the earliest time asked) when done.
    again: BTreeMap<K, Instant>,
}

impl<K: Ord + Clone> Queue<K> {
    /// An empty queue; touched keys are due `debounce` later.
    pub fn new(debounce: Duration) -> Self {
        Self {
            state: Mutex::new(State {
                due: BTreeMap::new(),
                order: BTreeSet::new(),
                running: BTreeSet::new(),
                again: BTreeMap::new(),
            }),
            wake: Notify::new(),
            debounce,
        }
    }

    /// `key` changed: reconcile it after the debounce window.
    pub fn touch(&self, key: K) {
        self.schedule(key, Instant::now() + self.debounce);
    }

    /// Reconcile `key` no sooner than `after` from now (sooner if it is due sooner already).
    pub fn touch_after(&self, key: K, after: Duration) {
        self.schedule(key, Instant::now() + after);
    }

    /// Reconcile `key` at `at`, or at the time it is due already if that is sooner.
    pub fn schedule(&self, key: K, at: Instant) {
        let mut s = self.lock();
        if s.running.contains(&key) {
            let t = s.again.entry(key).or_insert(at);
            *t = (*t).min(at);
            return;
        }
        s.insert(key, at);
        drop(s);
        self.wake.notify_one();
    }

    /// How many keys wait (due or not), and how many are being reconciled.
    pub fn depth(&self) -> (usize, usize) {
        let s = self.lock();
        (s.due.len() + s.again.len(), s.running.len())
    }

    /// The next due key, marked running; `None` with the time the next one is due (or
    /// `None` when nothing is queued).
    pub fn pop(&self) -> Result<K, Option<Instant>> {
        let now = Instant::now();
        let mut s = self.lock();
        let Some((at, _)) = s.order.first() else {
            return Err(None);
        };
        if *at > now {
            return Err(Some(*at));
        }
        let Some((_, key)) = s.order.pop_first() else {
            return Err(None);
        };
        s.due.remove(&key);
        s.running.insert(key.clone());
        Ok(key)
    }

    /// `key`'s reconcile ended; it is due again `requeue` from now if asked (or sooner if
    /// it was touched meanwhile).
    pub fn done(&self, key: &K, requeue: Option<Duration>) {
        let mut s = self.lock();
        s.running.remove(key);
        let again = s.again.remove(key);
        let asked = requeue.map(|d| Instant::now() + d);
        let at = match (again, asked) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(at) = at {
            s.insert(key.clone(), at);
            drop(s);
            self.wake.notify_one();
        }
    }

    /// Wait until a key is due (returns at once if one may be).
    pub async fn ready(&self) {
        loop {
            let next = match self.next_due() {
                Some(at) if at <= Instant::now() => return,
                next => next,
            };
            let notified = self.wake.notified();
            match next {
                Some(at) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(at) => return,
                    }
                }
                None => notified.await,
            }
        }
    }

    fn next_due(&self) -> Option<Instant> {
        self.lock().order.first().map(|(at, _)| *at)
    }

    fn lock(&self) -> MutexGuard<'_, State<K>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<K: Ord + Clone> State<K> {
    fn insert(&mut self, key: K, at: Instant) {
        match self.due.get(&key) {
            Some(have) if *have <= at => {}
            Some(have) => {
                let have = *have;
                self.order.remove(&(have, key.clone()));
                self.order.insert((at, key.clone()));
                self.due.insert(key, at);
            }
            None => {
                self.order.insert((at, key.clone()));
                self.due.insert(key, at);
            }
        }
    }
}
