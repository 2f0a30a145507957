//! The state the protocol handler reads and the informers write.

use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use prometheus_client::registry::Registry;

use crate::answer::Zones;
use crate::forward::Forwarder;
use crate::metrics::DnsMetrics;
use crate::model::Model;

pub struct DnsState {
    pub model: RwLock<Model>,
    /// Bumped under `model`'s write lock after every change ([`Self::changed`]): answers
    /// remembered at an older generation are stale ([`crate::memo`]).
    generation: AtomicU64,
    pub zones: Zones,
    /// Informers that have not finished their first list; answers are SERVFAIL until 0.
    pub unsynced: AtomicUsize,
    pub metrics: DnsMetrics,
    pub registry: Registry,
    pub forwarder: Option<Forwarder>,
}

impl DnsState {
    pub fn new(zones: Zones, informers: usize, forwarder: Option<Forwarder>) -> Self {
        let metrics = DnsMetrics::default();
        let mut registry = Registry::with_prefix("sluice_dns");
        metrics.register(&mut registry);
        Self {
            model: RwLock::new(Model::default()),
            generation: AtomicU64::new(0),
            zones,
            unsynced: AtomicUsize::new(informers),
            metrics,
            registry,
            forwarder,
        }
    }

    pub fn synced(&self) -> bool {
        self.unsynced.load(Ordering::Acquire) == 0
    }

    /// The model's generation; read it before reading the model.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Mark the model changed: call with its write lock held, after the change.
    pub fn changed(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

impl sluice_observe::AdminSource for DnsState {
    fn registry(&self) -> &Registry {
        &self.registry
    }

    fn ready(&self) -> bool {
        self.synced()
    }
}
