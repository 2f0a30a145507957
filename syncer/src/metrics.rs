//! What the syncer counts: writes by kind and outcome, objects placed here (the
//! reconciles are the runtime's: `sluice_syncer_reconciles_total{outcome}` and the rest).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    pub kind: &'static str,
    /// `apply`, `delete`.
    pub verb: &'static str,
}

#[derive(Clone, Debug, Default)]
pub struct SyncMetrics {
    pub writes: Family<WriteLabels, Counter>,
    pub write_failures: Family<WriteLabels, Counter>,
    pub not_synced: Counter,
    pub namespace_conflicts: Counter,
    pub placed: Gauge,
}

impl SyncMetrics {
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "writes",
            "Downstream writes (apply: missing or drifted; delete: unplaced or gone upstream); none when nothing changed",
            self.writes.clone(),
        );
        r.register(
            "write_failures",
            "Downstream writes that failed (the namespace is retried with backoff, 250 ms to 5 s)",
            self.write_failures.clone(),
        );
        r.register(
            "not_synced",
            "Placed upstream objects that cannot travel (see the syncer's warnings)",
            self.not_synced.clone(),
        );
        r.register(
            "namespace_conflicts",
            "Upstream namespaces refused because the downstream namespace they name belongs to another (see the Warning Event NamespaceConflict upstream)",
            self.namespace_conflicts.clone(),
        );
        r.register(
            "placed_objects",
            "Upstream objects placed on this cluster",
            self.placed.clone(),
        );
    }

    pub fn write(&self, kind: &'static str, verb: &'static str, ok: bool) {
        let l = WriteLabels { kind, verb };
        if ok {
            self.writes.get_or_create(&l).inc();
        } else {
            self.write_failures.get_or_create(&l).inc();
        }
    }
}
