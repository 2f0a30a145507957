//! What changed since a controller's last round. Informer callbacks record keys here and
//! wake the loop; the loop takes the accumulated [`Scope`] at the start of a round, so
//! changes that arrive while it works land in the next one, and a burst of events costs
//! one wake-up and one round.

use std::sync::{Arc, Mutex};

use kube::runtime::watcher::Event;
use tokio::sync::Notify;

use crate::scope::Scope;

pub struct Changes<K: Ord> {
    pending: Mutex<Scope<K>>,
    wake: Notify,
}

impl<K: Ord> Default for Changes<K> {
    fn default() -> Self {
        Self {
            pending: Mutex::new(Scope::default()),
            wake: Notify::new(),
        }
    }
}

impl<K: Ord + Send + 'static> Changes<K> {
    /// `key` changed.
    pub fn touch(&self, key: K) {
        self.lock().insert(key);
        self.wake.notify_one();
    }

    /// Anything may have changed.
    pub fn touch_all(&self) {
        *self.lock() = Scope::All;
        self.wake.notify_one();
    }

    /// Put back the scope of a round that failed.
    pub fn restore(&self, scope: Scope<K>) {
        self.lock().extend(scope);
    }

    /// Something changed that no key names (a lease renewal, a configuration object): the
    /// loop looks again without widening the scope.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Wait for the next change (returns at once if one came since the last wait).
    pub async fn notified(&self) {
        self.wake.notified().await
    }

    /// Everything recorded so far; the record starts empty again.
    pub fn take(&self) -> Scope<K> {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Scope<K>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An informer callback that [`record`](Self::record)s its events.
    pub fn recorder<O: 'static>(
        self: &Arc<Self>,
        key_of: fn(&O) -> Option<K>,
    ) -> impl Fn(&Event<O>) + Send + 'static
    where
        K: Sync,
    {
        let changes = self.clone();
        move |e| changes.record(e, key_of)
    }

    /// An informer callback for objects that touch every key (namespaces, peers): each
    /// change, and the end of each re-list, widens the next round to everything.
    pub fn widener<O: 'static>(self: &Arc<Self>) -> impl Fn(&Event<O>) + Send + 'static
    where
        K: Sync,
    {
        let changes = self.clone();
        move |e| {
            if !matches!(e, Event::Init | Event::InitApply(_)) {
                changes.touch_all();
            }
        }
    }

    /// An informer callback that only wakes the loop (leases: the loop itself notices one
    /// that ran out or came back).
    pub fn waker<O: 'static>(self: &Arc<Self>) -> impl Fn(&Event<O>) + Send + 'static
    where
        K: Sync,
    {
        let changes = self.clone();
        move |_| changes.wake()
    }

    /// Record an informer event: the key `key_of` gives an applied or deleted object, and
    /// everything after a re-list (objects deleted while the watch was down get no event
    /// of their own).
    pub fn record<O>(&self, event: &Event<O>, key_of: impl Fn(&O) -> Option<K>) {
        match event {
            Event::Apply(o) | Event::Delete(o) => match key_of(o) {
                Some(key) => self.touch(key),
                None => self.wake(),
            },
            Event::InitDone => self.touch_all(),
            Event::Init | Event::InitApply(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn records_keys_and_relists() {
        let c = Changes::<&str>::default();
        c.record(&Event::Apply(1u8), |_| Some("a"));
        c.record(&Event::Delete(2u8), |_| Some("b"));
        c.record(&Event::Apply(3u8), |_| None);
        assert_eq!(c.take(), Scope::Keys(["a", "b"].into()));
        assert!(c.take().is_empty());
        c.record(&Event::<u8>::Init, |_| Some("c"));
        c.record(&Event::InitApply(4u8), |_| Some("c"));
        assert!(c.take().is_empty(), "a re-list counts once it is complete");
        c.record(&Event::<u8>::InitDone, |_| None);
        assert_eq!(c.take(), Scope::All);
        c.restore(Scope::Keys(["d"].into()));
        assert_eq!(c.take(), Scope::Keys(["d"].into()));
    }

    /// A burst of changes is one wake-up and one round that covers all of them.
    #[tokio::test(start_paused = true)]
    async fn a_burst_of_changes_coalesces_into_one_round() {
        let c = Arc::new(Changes::<u32>::default());
        for k in 0..1000 {
            c.touch(k);
        }
        tokio::time::timeout(Duration::from_secs(1), c.notified())
            .await
            .expect("woken");
        assert_eq!(c.take().len(), Some(1000));
        // The burst left one permit, now used: the next wait waits for a new change.
        assert!(
            tokio::time::timeout(Duration::from_secs(1), c.notified())
                .await
                .is_err()
        );
        let waiter = tokio::spawn({
            let c = c.clone();
            async move { c.notified().await }
        });
        tokio::task::yield_now().await;
        c.touch(5);
        c.touch(5);
        waiter.await.expect("woken by the change");
        assert_eq!(c.take(), Scope::Keys([5].into()));
    }
}
