//! Leases (`coordination.k8s.io/v1`) as a liveness signal: a holder renews one every so
//! often; a reader treats a lease whose renew time plus duration has passed as expired.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Api;
use kube::api::{Patch, PatchParams};

/// A lease to keep renewed: where, who holds it, and for how long each renewal counts.
#[derive(Clone, Debug)]
pub struct LeaseHolder {
    pub name: String,
    pub holder: String,
    pub ttl: Duration,
    pub renew_every: Duration,
}

/// When `lease` runs out; `None` if it does not say (treated as never).
pub fn expires_at(lease: &Lease) -> Option<Timestamp> {
    let spec = lease.spec.as_ref()?;
    let renewed = spec.renew_time.as_ref()?.0;
    let secs = i64::from(spec.lease_duration_seconds?);
    renewed.checked_add(SignedDuration::from_secs(secs)).ok()
}

/// Whether `lease` had run out at `now` (a lease that does not say when never does).
pub fn is_expired(lease: &Lease, now: Timestamp) -> bool {
    expires_at(lease).is_some_and(|t| t <= now)
}

/// The lease object of one renewal at `now`.
pub fn renewal(namespace: &str, l: &LeaseHolder, now: Timestamp) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(l.name.clone()),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(l.holder.clone()),
            lease_duration_seconds: Some(i32::try_from(l.ttl.as_secs()).unwrap_or(i32::MAX)),
            renew_time: Some(MicroTime(now)),
            ..Default::default()
        }),
    }
}

/// Renew the lease in the namespace `leases` points at, every `renew_every`, until the
/// task is dropped (server-side apply, field manager `sluice-lease`). Failures are logged
/// and retried: a holder that cannot reach its API server is, to readers, one that is gone.
pub async fn renew_forever(leases: Api<Lease>, namespace: String, lease: LeaseHolder) {
    let params = PatchParams::apply("sluice-lease").force();
    let mut tick = tokio::time::interval(lease.renew_every);
    loop {
        tick.tick().await;
        let mut body = match serde_json::to_value(renewal(&namespace, &lease, Timestamp::now())) {
            Ok(v) => v,
            Err(_) => continue,
        };
        body["apiVersion"] = "coordination.k8s.io/v1".into();
        body["kind"] = "Lease".into();
        if let Err(e) = leases
            .patch(&lease.name, &params, &Patch::Apply(body))
            .await
        {
            tracing::warn!(lease = %lease.name, error = %e, "renewing the lease failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_expires_after_its_duration_from_the_last_renewal() {
        let spec = LeaseHolder {
            name: "l".into(),
            holder: "me".into(),
            ttl: Duration::from_secs(3),
            renew_every: Duration::from_secs(1),
        };
        let t0: Timestamp = "2026-11-24T00:00:00Z".parse().expect("time");
        let lease = renewal("kube-system", &spec, t0);
        let at = |s: i64| {
            t0.checked_add(SignedDuration::from_millis(s))
                .expect("time")
        };
        assert_eq!(expires_at(&lease), Some(at(3000)));
        assert!(!is_expired(&lease, at(2999)));
        assert!(is_expired(&lease, at(3000)));
        // Renewed at 2 s: alive until 5 s.
        let renewed = renewal("kube-system", &spec, at(2000));
        assert!(!is_expired(&renewed, at(4000)));
        assert!(is_expired(&renewed, at(5000)));
        // A lease that does not say when it runs out never does.
        let mut open = lease.clone();
        open.spec.as_mut().expect("spec").lease_duration_seconds = None;
        assert!(!is_expired(&open, at(1_000_000)));
    }
}
