//! The syncer's controller, on the runtime of `sluice-kube` ([`sluice_kube::Controller`]):
//! informers on both sides ([`watched`]) touch the downstream namespace each event
//! concerns, and one namespace at a time is reconciled — synced down ([`down`]), its
//! imports reported ([`import_report`]), its pods and claims mirrored ([`mirrors`]), its Events copied
//! up ([`event_copy`]) and the movers of its claims' data run ([`copies`]) — writing nothing when both sides agree. Syncable custom resource
//! definitions ([`crds`]), refused namespace claims ([`warnings`]) and re-lists have keys
//! of their own ([`Key`]). Nothing runs while nothing changes.

mod copies;
mod crds;
mod down;
mod event_copy;
mod import_report;
mod key;
mod mirrors;
mod report;
mod shared;
mod state;
mod warnings;
mod watched;
mod write;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, Patch};
use sluice_api::LogicalClusterPath;
use sluice_api::liveness::{
    SYNCER_LEASE_NAMESPACE, SYNCER_LEASE_TTL, SYNCER_RENEW_EVERY, syncer_lease_name,
};
use sluice_kube::controller::Backoff;
use sluice_kube::lease::{LeaseHolder, renew_forever};
use sluice_kube::{Action, Controller, Queue, Reconciler};
use tokio::sync::watch;

pub use key::Key;
pub use report::status_report;
pub use state::{Config, SyncError, Syncer};

use crds::Installed;
use event_copy::Copied;
use state::{Sides, Upstream};
use watched::Watched;

/// How long a touched namespace waits for the events that come with it (an apply of many
/// objects, a pod's status changing in steps).
const DEBOUNCE: Duration = Duration::from_millis(10);
/// How often kinds the cluster has not listed yet are looked at (see
/// [`watched::UNSERVED_AFTER`]), and a failed step waits at most between tries.
const RETRY: Duration = Duration::from_secs(1);
const BACKOFF: Backoff = Backoff {
    first: Duration::from_millis(250),
    max: Duration::from_secs(5),
};

impl Syncer {
    /// Run until `stop` turns true.
    pub async fn run(
        self: Arc<Self>,
        config: Config,
        stop: watch::Receiver<bool>,
    ) -> Result<(), SyncError> {
        run_with(self, config, stop).await
    }
}

/// Run a syncer without an admin endpoint until `stop` turns true.
pub async fn run(config: Config, stop: watch::Receiver<bool>) -> Result<(), SyncError> {
    Syncer::new().run(config, stop).await
}

/// What failed in a reconcile (the warning logged before it says why).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReconcileError {
    #[error("a write syncing the namespace failed")]
    Sync,
    #[error("reporting the namespace's imports failed")]
    Imports,
    #[error("mirroring a pod failed")]
    Mirrors,
    #[error("copying an event up failed")]
    Events,
    #[error("installing a custom resource definition failed")]
    Definitions,
    #[error("reporting a namespace conflict failed")]
    Conflicts,
    #[error("running a claim's movers failed")]
    Copies,
    #[error("saying what a shared claim's volume is failed")]
    Shared,
}

/// The syncer's reconciler: the informers, both sides, and what it remembers between keys.
struct Syncing {
    sides: Sides,
    w: Watched,
    queue: Arc<Queue<Key>>,
    installed: Installed,
    copied: Copied,
    /// How many kinds were known downstream at the last look.
    known: usize,
    /// [`Key::Ready`] was queued (once every informer had listed).
    ready_queued: bool,
    /// Namespaces whose last reconcile failed.
    failing: BTreeSet<String>,
}

impl Reconciler for Syncing {
    type Key = Key;
    type Error = ReconcileError;

    async fn reconcile(&mut self, key: &Key) -> Result<Action, ReconcileError> {
        match key {
            Key::Namespace(ns) => {
                let r = self.namespace(ns).await;
                match r {
                    Ok(_) => self.failing.remove(ns),
                    Err(_) => self.failing.insert(ns.clone()),
                };
                r
            }
            Key::Definitions => {
                let out = crds::install_all(&self.sides, &mut self.w, &mut self.installed).await;
                if out.new_kinds {
                    self.queue.touch(Key::Resync);
                }
                if out.failed {
                    return Err(ReconcileError::Definitions);
                }
                Ok(Action::AwaitChange)
            }
            Key::Conflicts => {
                let s = &self.sides;
                if warnings::report_conflicts(&s.config, &s.upstream, &s.syncer.sources).await {
                    Ok(Action::AwaitChange)
                } else {
                    Err(ReconcileError::Conflicts)
                }
            }
            Key::Resync => {
                for ns in self.w.every_namespace(&self.sides.syncer.sources) {
                    self.queue.touch(Key::Namespace(ns));
                }
                self.known = self.w.kinds_known();
                if self.known < self.w.kinds.len() {
                    self.queue.touch_after(Key::Kinds, RETRY);
                }
                if !self.ready_queued && self.w.all_listed() {
                    self.ready_queued = true;
                    self.queue.touch(Key::Ready);
                }
                Ok(Action::AwaitChange)
            }
            Key::Kinds => {
                // A kind given up on downstream (not served there) is acted on from now:
                // everything.
                let known = self.w.kinds_known();
                if known > self.known {
                    self.queue.touch(Key::Resync);
                }
                self.known = known;
                if known < self.w.kinds.len() {
                    return Ok(Action::Requeue(RETRY));
                }
                Ok(Action::AwaitChange)
            }
            Key::Ready => {
                if !self.failing.is_empty() {
                    return Ok(Action::Requeue(RETRY));
                }
                self.sides.syncer.set_ready();
                Ok(Action::AwaitChange)
            }
        }
    }
}

impl Syncing {
    /// Everything about downstream namespace `ns`.
    async fn namespace(&mut self, ns: &str) -> Result<Action, ReconcileError> {
        let (s, w) = (&self.sides, &self.w);
        let source = s.syncer.sources.holder(ns);
        let source = source.as_ref();
        let synced = down::sync_namespace(s, w, ns, source).await;
        let imports = import_report::report_imports(s, w, ns, source).await;
        let mirrors = mirrors::mirror_all(s, w, ns, source).await;
        let events = event_copy::copy_events(s, w, &mut self.copied, ns, source).await;
        let copies = copies::reconcile(s, w, ns, source).await;
        let shared = shared::report(s, w, ns).await;
        s.syncer.metrics.placed.set(w.placed() as i64);
        if !s.syncer.sources.unreported().is_empty() {
            self.queue.touch(Key::Conflicts);
        }
        let failed = [
            (synced, ReconcileError::Sync),
            (imports, ReconcileError::Imports),
            (mirrors, ReconcileError::Mirrors),
            (events, ReconcileError::Events),
            (shared, ReconcileError::Shared),
            (copies != copies::Copies::Failed, ReconcileError::Copies),
        ]
        .into_iter()
        .find(|(ok, _)| !ok);
        match failed {
            Some((_, e)) => Err(e),
            // A mover waits for its source's address, which no informer here reports.
            None if copies == copies::Copies::Waiting => Ok(Action::Requeue(RETRY)),
            None => Ok(Action::AwaitChange),
        }
    }
}

/// Put the log endpoint's URL on the heartbeat Lease (retrying until it is there).
async fn publish_logs_url(
    leases: Api<k8s_openapi::api::coordination::v1::Lease>,
    name: String,
    url: String,
) {
    let body = serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "annotations": {crate::logs::ANNOTATION_LOGS_URL: url}},
    });
    loop {
        match leases
            .patch(&name, &write::apply_params(), &Patch::Apply(&body))
            .await
        {
            Ok(_) => return,
            Err(e) => tracing::warn!(error = %e, "publishing the log endpoint failed; retrying"),
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// A task that ends with its owner.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn run_with(
    syncer: Arc<Syncer>,
    config: Config,
    mut stop: watch::Receiver<bool>,
) -> Result<(), SyncError> {
    let upstream = Upstream::new(config.upstream.clone())?;
    let root = upstream.at(&LogicalClusterPath::root())?;
    // The heartbeat by which the control plane knows this cluster is served.
    let _heartbeat = {
        let holder = LeaseHolder {
            name: syncer_lease_name(&config.cluster),
            holder: format!("sluice-syncer-{}", config.cluster),
            ttl: SYNCER_LEASE_TTL,
            renew_every: SYNCER_RENEW_EVERY,
        };
        AbortOnDrop(tokio::spawn(renew_forever(
            Api::namespaced(root.clone(), SYNCER_LEASE_NAMESPACE),
            SYNCER_LEASE_NAMESPACE.to_string(),
            holder,
        )))
    };
    let _published = config.logs_url.clone().map(|url| {
        AbortOnDrop(tokio::spawn(publish_logs_url(
            Api::namespaced(root.clone(), SYNCER_LEASE_NAMESPACE),
            syncer_lease_name(&config.cluster),
            url,
        )))
    });
    let queue: Arc<Queue<Key>> = Arc::new(Queue::new(DEBOUNCE));
    let w = Watched::start(&config, &upstream, &syncer.sources, &queue);
    // A namespace is not synced before the cluster's namespaces are known (each says what
    // it holds).
    tokio::select! {
        r = w.namespaces.store.wait_until_ready() => {
            if r.is_err() {
                return Ok(());
            }
        }
        r = stop.wait_for(|s| *s) => {
            return r.map(|_| ()).map_err(|_| SyncError::Orphaned);
        }
    }
    queue.touch(Key::Definitions);
    queue.touch(Key::Resync);
    let metrics = syncer.controller.clone();
    let mut syncing = Syncing {
        sides: Sides {
            syncer,
            config,
            upstream,
        },
        w,
        queue: queue.clone(),
        installed: Installed::default(),
        copied: Copied::default(),
        known: 0,
        ready_queued: false,
        failing: BTreeSet::new(),
    };
    Controller::new("syncer", queue, metrics)
        .with_backoff(BACKOFF)
        .run(&mut syncing, stop)
        .await
        .map_err(|_| SyncError::Orphaned)
}
