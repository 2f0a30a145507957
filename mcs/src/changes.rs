//! What changed since the last round: the services whose objects an informer saw change,
//! or everything. Informer callbacks record here and wake the loop; the loop takes the
//! accumulated [`Scope`] at the start of a round, so changes that arrive while it works
//! land in the next one. The MCS controller and the dataplane's cluster mode both work
//! this way, so their rounds cost what changed, not what exists.

use std::sync::{Arc, Mutex};

use kube::runtime::watcher::Event;
use tokio::sync::Notify;

use crate::model::{Scope, ServiceKey};

#[derive(Default)]
pub struct Changes {
    pending: Mutex<Scope>,
    wake: Notify,
}

impl Changes {
    /// The service `key` changed.
    pub fn touch(&self, key: ServiceKey) {
        self.lock().insert(key);
        self.wake.notify_one();
    }

    /// Anything may have changed.
    pub fn touch_all(&self) {
        *self.lock() = Scope::All;
        self.wake.notify_one();
    }

    /// Put back the scope of a round that failed.
    pub fn restore(&self, scope: Scope) {
        self.lock().extend(scope);
    }

    /// Something changed that is not a service (a lease renewal, a `Cluster` object): the
    /// loop looks again without widening the scope.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    pub async fn notified(&self) {
        self.wake.notified().await
    }

    /// Everything recorded so far; the record starts empty again.
    pub fn take(&self) -> Scope {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Scope> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An informer callback that [`record`](Self::record)s its events.
    pub fn recorder<K: 'static>(
        self: &Arc<Self>,
        key_of: fn(&K) -> Option<ServiceKey>,
    ) -> impl Fn(&Event<K>) + Send + 'static {
        let changes = self.clone();
        move |e| changes.record(e, key_of)
    }

    /// An informer callback for objects that touch every service (namespaces, peers):
    /// each change, and the end of each re-list, widens the next round to everything.
    pub fn widener<K: 'static>(self: &Arc<Self>) -> impl Fn(&Event<K>) + Send + 'static {
        let changes = self.clone();
        move |e| {
            if !matches!(e, Event::Init | Event::InitApply(_)) {
                changes.touch_all();
            }
        }
    }

    /// An informer callback that only wakes the loop (leases: the loop itself notices one
    /// that ran out or came back).
    pub fn waker<K: 'static>(self: &Arc<Self>) -> impl Fn(&Event<K>) + Send + 'static {
        let changes = self.clone();
        move |_| changes.wake()
    }

    /// Record an informer event: the key `key_of` gives an applied or deleted object, and
    /// everything after a re-list.
    pub fn record<K>(&self, event: &Event<K>, key_of: impl Fn(&K) -> Option<ServiceKey>) {
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
    use super::*;

    #[test]
    fn records_keys_and_relists() {
        let c = Changes::default();
        let key = |n: &str| ServiceKey::new("shop", n);
        c.record(&Event::Apply(1u8), |_| Some(key("a")));
        c.record(&Event::Delete(2u8), |_| Some(key("b")));
        c.record(&Event::Apply(3u8), |_| None);
        assert_eq!(c.take(), Scope::Services([key("a"), key("b")].into()));
        assert!(c.take().is_empty());
        c.record(&Event::<u8>::Init, |_| Some(key("c")));
        c.record(&Event::InitApply(4u8), |_| Some(key("c")));
        assert!(c.take().is_empty(), "a re-list counts once it is complete");
        c.record(&Event::<u8>::InitDone, |_| None);
        assert_eq!(c.take(), Scope::All);
        c.restore(Scope::Services([key("d")].into()));
        assert_eq!(c.take(), Scope::Services([key("d")].into()));
    }
}
