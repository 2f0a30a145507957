//! What travels back up on the synced objects themselves: the downstream status in the
//! upstream object's status annotation for this cluster, and this cluster's finalizer,
//! which holds an upstream deletion until the downstream copy is gone.

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::Value;
use sluice_api::sync::{
    ANNOTATION_UPSTREAM_GENERATION, StatusReport, finalizers_patch, status_annotation,
};

use super::state::{Config, Syncer, Upstream};
use super::watched::KindSync;
use crate::transform::Origin;

/// What the downstream object `have` tells upstream: its status, and the upstream
/// generation that status reflects (0 while the downstream controller has not caught up
/// with what was last applied).
pub fn status_report(have: &Value) -> StatusReport {
    let status = have.get("status").cloned().unwrap_or(Value::Null);
    let applied_from = have["metadata"]["annotations"][ANNOTATION_UPSTREAM_GENERATION]
        .as_str()
        .and_then(|g| g.parse::<i64>().ok())
        .unwrap_or(0);
    let caught_up = match status.get("observedGeneration").and_then(Value::as_i64) {
        Some(seen) => seen >= have["metadata"]["generation"].as_i64().unwrap_or(0),
        // Kinds without observedGeneration (Jobs) report what they have.
        None => !status.is_null(),
    };
    StatusReport {
        observed_generation: if caught_up { applied_from } else { 0 },
        replicas: have["spec"]["replicas"].as_i64(),
        start: have["spec"]["ordinals"]["start"].as_i64(),
        status,
    }
}

/// Write `have`'s status report into the upstream object's status annotation for this
/// cluster, unless it already says that; false if the write failed.
pub async fn report_status(
    syncer: &Syncer,
    config: &Config,
    upstream: &Upstream,
    k: &KindSync,
    origin: &Origin,
    up: &Value,
    have: &Value,
) -> bool {
    let key = status_annotation(&config.cluster);
    let report = status_report(have);
    let current: Option<StatusReport> = up["metadata"]["annotations"][&key]
        .as_str()
        .and_then(|s| serde_json::from_str(s).ok());
    if current.as_ref() == Some(&report) {
        return true;
    }
    let Ok(text) = serde_json::to_string(&report) else {
        return true;
    };
    let Some(api) = upstream_api(upstream, k, origin) else {
        return false;
    };
    let patch = serde_json::json!({"metadata": {"annotations": {key: text}}});
    let written = api
        .patch(&origin.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await;
    syncer.metrics.write(k.kind.kind, "report", written.is_ok());
    match written {
        Ok(_) => true,
        // Deleted upstream meanwhile: the next reconcile deletes it downstream.
        Err(kube::Error::Api(s)) if s.code == 404 => true,
        Err(e) => {
            tracing::warn!(kind = k.kind.kind, logical_cluster = %origin.logical_cluster,
                namespace = %origin.namespace, name = %origin.name, error = %e, "status report failed");
            false
        }
    }
}

/// The API of `k`'s objects in `origin`'s namespace of its logical cluster.
fn upstream_api(upstream: &Upstream, k: &KindSync, origin: &Origin) -> Option<Api<DynamicObject>> {
    match upstream.at(&origin.logical_cluster) {
        Ok(client) => Some(Api::namespaced_with(client, &origin.namespace, &k.resource)),
        Err(e) => {
            tracing::warn!(error = %e, "no client for the logical cluster");
            None
        }
    }
}

/// Add (`hold`) or remove this cluster's finalizer on the upstream object `obj`, on
/// condition that it has not changed since it was read; false if the write failed (a
/// conflict included: the next reconcile reads it again).
pub async fn set_finalizer(
    syncer: &Syncer,
    upstream: &Upstream,
    k: &KindSync,
    origin: &Origin,
    obj: &DynamicObject,
    finalizer: &str,
    hold: bool,
) -> bool {
    let mut want: Vec<String> = obj.metadata.finalizers.clone().unwrap_or_default();
    want.retain(|f| f != finalizer);
    if hold {
        want.push(finalizer.to_string());
    }
    let Some(rv) = obj.metadata.resource_version.as_deref() else {
        return true;
    };
    let Some(api) = upstream_api(upstream, k, origin) else {
        return false;
    };
    let patch: json_patch::Patch = match serde_json::from_value(finalizers_patch(rv, &want)) {
        Ok(p) => p,
        Err(_) => return false,
    };
    let written = api
        .patch(
            &origin.name,
            &PatchParams::default(),
            &Patch::Json::<()>(patch),
        )
        .await;
    let verb = if hold { "hold" } else { "release" };
    syncer.metrics.write(k.kind.kind, verb, written.is_ok());
    match written {
        Ok(_) => {
            tracing::debug!(kind = k.kind.kind, logical_cluster = %origin.logical_cluster,
                namespace = %origin.namespace, name = %origin.name, verb, "finalizer");
            true
        }
        Err(kube::Error::Api(s)) if s.code == 404 => true,
        Err(e) => {
            tracing::debug!(kind = k.kind.kind, logical_cluster = %origin.logical_cluster,
                namespace = %origin.namespace, name = %origin.name, verb, error = %e, "finalizer write failed");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_reports_the_upstream_generation_once_the_cluster_caught_up() {
        let have = serde_json::json!({
            "metadata": {"generation": 3, "annotations": {ANNOTATION_UPSTREAM_GENERATION: "7"}},
            "spec": {"replicas": 2},
            "status": {"observedGeneration": 3, "readyReplicas": 2},
        });
        let r = status_report(&have);
        assert_eq!(r.observed_generation, 7);
        assert_eq!(r.replicas, Some(2));
        assert_eq!(r.status["readyReplicas"], 2);

        // The cluster's controller has not seen the last apply yet: generation 0.
        let mut behind = have.clone();
        behind["status"]["observedGeneration"] = 2.into();
        assert_eq!(status_report(&behind).observed_generation, 0);

        // A Job has no observedGeneration: a status at all is what it has.
        let job = serde_json::json!({
            "metadata": {"annotations": {ANNOTATION_UPSTREAM_GENERATION: "1"}},
            "status": {"succeeded": 1},
        });
        assert_eq!(status_report(&job).observed_generation, 1);
        let fresh =
            serde_json::json!({"metadata": {"annotations": {ANNOTATION_UPSTREAM_GENERATION: "1"}}});
        assert_eq!(status_report(&fresh).observed_generation, 0);
        // An unparsable annotation counts as nothing applied.
        let bad = serde_json::json!({"metadata": {"annotations": {ANNOTATION_UPSTREAM_GENERATION: "x"}}, "status": {}});
        assert_eq!(status_report(&bad).observed_generation, 0);
    }
}
