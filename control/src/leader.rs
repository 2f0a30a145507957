//! Leader election among control replicas that share one store (etcd): the controllers
//! that must run once — namespace, workspace and CRD termination, placement and moves,
//! etcd compaction — run on the replica that holds a `coordination.k8s.io/v1` Lease,
//! `kube-system/sluice-control` in logical cluster `root` (visible with
//! `kubectl get lease -n kube-system`), as kube-controller-manager does.
//!
//! The holder renews it every [`RENEW_EVERY`]; another replica takes it over when it has
//! not changed for [`LEASE_DURATION`] by that replica's own clock (so clocks need not
//! agree). Every write is conditional on the revision read, so two replicas never both
//! believe they won the same term. A replica that fails to renew stops leading at once.

use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{Value, json};
use sluice_api::LogicalClusterPath;
use tokio::sync::watch;

use crate::catalog::Catalog;
use crate::object;
use crate::pipeline::commit::{Writer, commit};
use crate::storage::{Expect, Key, Op, Revision, StorageError, Store};

/// How long a lease lives without renewal before another replica may take it.
pub const LEASE_DURATION: Duration = Duration::from_secs(10);
/// How often the holder renews, and others look.
pub const RENEW_EVERY: Duration = Duration::from_secs(2);
/// How long the holder keeps leading while its renewals fail (a store hiccup, an etcd
/// member gone): less than [`LEASE_DURATION`], so it stops before anyone may take over.
pub const RENEW_DEADLINE: Duration = Duration::from_secs(7);
/// The Lease's name (namespace `kube-system` of `root`).
pub const LEASE_NAME: &str = "sluice-control";

fn lease_key() -> Option<Key> {
    let t = Catalog::builtin().lookup("coordination.k8s.io", "v1", "leases")?;
    Some(
        t.prefix
            .key(&LogicalClusterPath::root(), Some("kube-system"), LEASE_NAME),
    )
}

/// What this replica last saw of the lease.
struct Seen {
    revision: Revision,
    holder: String,
    since: Instant,
}

/// Run the election for `identity` until `shutdown`; `leading` says whether this replica
/// holds the lease now.
pub async fn run(
    store: Store,
    identity: String,
    leading: watch::Sender<bool>,
    mut shutdown: watch::Receiver<bool>,
) {
    let Some(key) = lease_key() else {
        tracing::error!("no Lease resource type: leader election off, leading alone");
        let _ = leading.send(true);
        return;
    };
    let mut seen: Option<Seen> = None;
    let mut renewed: Option<Instant> = None;
    loop {
        let now_leading = match round(&store, &key, &identity, &mut seen).await {
            Ok(true) => {
                renewed = Some(Instant::now());
                true
            }
            Ok(false) => false,
            Err(e) => {
                // A failed round: lead on until the renew deadline.
                let within = renewed.is_some_and(|r| r.elapsed() < RENEW_DEADLINE);
                tracing::warn!(error = %e, leading = within && *leading.borrow(), "leader election round failed");
                within && *leading.borrow()
            }
        };
        if !now_leading {
            renewed = None;
        }
        if *leading.borrow() != now_leading {
            tracing::info!(%identity, leading = now_leading, "leadership changed");
        }
        leading.send_if_modified(|l| std::mem::replace(l, now_leading) != now_leading);
        tokio::select! {
            _ = tokio::time::sleep(RENEW_EVERY) => {}
            _ = shutdown.changed() => {
                let _ = leading.send(false);
                if now_leading {
                    release(&store, &key, &identity).await;
                }
                return;
            }
        }
    }
}

/// One look at the lease: acquire it, renew it, or note who holds it. True when this
/// replica holds it afterwards.
async fn round(
    store: &Store,
    key: &Key,
    identity: &str,
    seen: &mut Option<Seen>,
) -> Result<bool, StorageError> {
    let current = store.get(key);
    let (expect, holder) = match &current {
        None => (Expect::Absent, String::new()),
        Some(e) => {
            let v: Value = serde_json::from_slice(&e.value).unwrap_or(Value::Null);
            let holder = v["spec"]["holderIdentity"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            (Expect::At(e.revision), holder)
        }
    };
    if let (Expect::At(rev), false) = (expect, holder == identity || holder.is_empty()) {
        // Someone else's: take it only once it has not moved for a whole lease.
        let changed = seen
            .as_ref()
            .is_none_or(|s| s.revision != rev || s.holder != holder);
        if changed {
            *seen = Some(Seen {
                revision: rev,
                holder,
                since: Instant::now(),
            });
            return Ok(false);
        }
        if seen
            .as_ref()
            .is_some_and(|s| s.since.elapsed() < LEASE_DURATION)
        {
            return Ok(false);
        }
    }
    let previous: Option<Value> = current
        .as_ref()
        .and_then(|e| serde_json::from_slice(&e.value).ok());
    let value = lease_object(identity, previous.as_ref());
    let bytes =
        Bytes::from(serde_json::to_vec(&value).map_err(|e| StorageError::Backend(e.to_string()))?);
    match commit(
        store,
        Writer::LeaderLease,
        Op::Put {
            key: key.clone(),
            value: bytes,
            expect,
        },
    )
    .await
    {
        Ok(c) => {
            *seen = Some(Seen {
                revision: c.revision,
                holder: identity.to_string(),
                since: Instant::now(),
            });
            Ok(true)
        }
        // Another replica wrote first.
        Err(StorageError::Conflict { .. } | StorageError::AlreadyExists(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The Lease as this replica writes it: held by `identity`, renewed now.
fn lease_object(identity: &str, previous: Option<&Value>) -> Value {
    let now = sluice_kube::time::now_rfc3339_micro();
    let same_holder =
        previous.is_some_and(|p| p["spec"]["holderIdentity"].as_str() == Some(identity));
    let mut lease = previous.cloned().unwrap_or_else(|| {
        let mut v = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": LEASE_NAME}});
        if let Some(t) = Catalog::builtin().lookup("coordination.k8s.io", "v1", "leases") {
            object::prepare_create(
                &mut v,
                t,
                Some(&LogicalClusterPath::root()),
                Some("kube-system"),
            );
        }
        v
    });
    let transitions = lease["spec"]["leaseTransitions"].as_i64().unwrap_or(0);
    let spec = &mut lease["spec"];
    if !same_holder {
        spec["acquireTime"] = json!(now);
        if previous.is_some() {
            spec["leaseTransitions"] = json!(transitions + 1);
        }
    }
    spec["holderIdentity"] = json!(identity);
    spec["leaseDurationSeconds"] = json!(LEASE_DURATION.as_secs());
    spec["renewTime"] = json!(now);
    lease
}

/// Give the lease up on a clean shutdown, so the next replica need not wait it out.
async fn release(store: &Store, key: &Key, identity: &str) {
    let Some(e) = store.get(key) else { return };
    let Ok(mut v) = serde_json::from_slice::<Value>(&e.value) else {
        return;
    };
    if v["spec"]["holderIdentity"].as_str() != Some(identity) {
        return;
    }
    v["spec"]["holderIdentity"] = json!("");
    let Ok(bytes) = serde_json::to_vec(&v) else {
        return;
    };
    let _ = commit(
        store,
        Writer::LeaderLease,
        Op::Put {
            key: key.clone(),
            value: Bytes::from(bytes),
            expect: Expect::At(e.revision),
        },
    )
    .await;
}

/// Run `start()` while this replica leads; stop it (through its own shutdown signal)
/// when leadership is lost or the server shuts down, and start it again on regaining it.
pub async fn while_leading<F, Fut>(
    mut leading: watch::Receiver<bool>,
    mut shutdown: watch::Receiver<bool>,
    what: &'static str,
    mut start: F,
) where
    F: FnMut(watch::Receiver<bool>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    loop {
        while !*leading.borrow_and_update() {
            tokio::select! {
                r = leading.changed() => if r.is_err() { return },
                _ = shutdown.changed() => return,
            }
        }
        tracing::info!(controller = what, "leading: starting");
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(start(stopped));
        // A sender that is gone (no election: one replica) never takes leadership away.
        let mut settled = false;
        loop {
            tokio::select! {
                r = leading.changed(), if !settled => match r {
                    Err(_) => settled = true,
                    Ok(()) => if !*leading.borrow_and_update() { break },
                },
                _ = shutdown.changed() => {
                    let _ = stop.send(true);
                    let _ = task.await;
                    return;
                }
            }
        }
        tracing::info!(controller = what, "leadership lost: stopping");
        let _ = stop.send(true);
        task.abort();
        let _ = task.await;
    }
}
