//! Cluster liveness: an agent in each member cluster (the dataplane) renews a Lease there;
//! the MCS controller treats a cluster whose lease has run out as gone and removes its
//! endpoints from every import. A cluster with no lease at all has never opted in and
//! counts as alive, so the controller works with clusters that run no Sluice agent.
//!
//! [`LEASE_TTL`] is 3 s, renewed every second: a missed renewal or two (a slow API
//! server, a GC pause) do not flap the cluster, and a dead one is dropped within 3 s plus
//! one reconcile. (The dataplane's gateway probes notice a dead peer faster, in under a
//! second, and stop sending there before the lease runs out.)

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams};

pub const LEASE_NAMESPACE: &str = "kube-system";
pub const LEASE_NAME: &str = "sluice-cluster";
pub const LEASE_TTL: Duration = Duration::from_secs(3);
pub const RENEW_EVERY: Duration = Duration::from_secs(1);

/// When `lease` runs out; `None` if it does not say (treated as never).
pub fn expires_at(lease: &Lease) -> Option<Timestamp> {
    let spec = lease.spec.as_ref()?;
    let renewed = spec.renew_time.as_ref()?.0;
    let secs = i64::from(spec.lease_duration_seconds?);
    renewed
        .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(secs))
        .ok()
}

/// Renew the lease in the cluster `leases` points at, every [`RENEW_EVERY`], until the
/// task is dropped. Failures are logged and retried: a cluster that cannot reach its own
/// API server is, for the clusterset, a cluster that is gone.
pub async fn renew_forever(leases: Api<Lease>, holder: String) {
    let params = PatchParams::apply("sluice-lease").force();
    let mut tick = tokio::time::interval(RENEW_EVERY);
    loop {
        tick.tick().await;
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(LEASE_NAME.into()),
                namespace: Some(LEASE_NAMESPACE.into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.clone()),
                lease_duration_seconds: Some(LEASE_TTL.as_secs() as i32),
                renew_time: Some(MicroTime(Timestamp::now())),
                ..Default::default()
            }),
        };
        let mut body = match serde_json::to_value(&lease) {
            Ok(v) => v,
            Err(_) => continue,
        };
        body["apiVersion"] = "coordination.k8s.io/v1".into();
        body["kind"] = "Lease".into();
        if let Err(e) = leases.patch(LEASE_NAME, &params, &Patch::Apply(body)).await {
            tracing::warn!(error = %e, "renewing the cluster lease failed");
        }
    }
}
