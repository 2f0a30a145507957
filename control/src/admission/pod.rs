//! Pods end gracefully: one bound to a node is marked with its grace period and stopped
//! there first; its node agent deletes it with grace period 0 once the containers are gone.
//! In a logical cluster, the mirrors of Pods that run on a physical cluster are read-only:
//! only their cluster's syncer writes them (deleting one is allowed: its syncer deletes the
//! real Pod). Who wrote is decided by the authenticated identity, never by the field
//! manager a client names.

use serde_json::Value;
use sluice_api::sync::LABEL_CLUSTER;

use crate::errors::{ApiError, ApiResult};
use crate::pipeline::hooks::{Deletion, Hook, HookCx};
use crate::resources::Subresource;

pub struct GracefulPods;

impl Hook for GracefulPods {
    fn deletion(&self, obj: &Value, options: &Value) -> Option<Deletion> {
        let on_node = obj["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| !n.is_empty());
        let grace = options["gracePeriodSeconds"].as_i64();
        (on_node && grace != Some(0)).then(|| Deletion::Graceful {
            seconds: grace
                .or(obj["spec"]["terminationGracePeriodSeconds"].as_i64())
                .unwrap_or(30)
                .max(1),
        })
    }
}

/// Mirrored Pods and claims (label `sluice.dev/cluster`) are written by their cluster's
/// syncer only (and released by the placement controllers when their cluster is gone): not
/// by a tenant, not by a human administrator, whatever field manager they name.
pub struct MirroredPods;

impl MirroredPods {
    fn check(cx: &HookCx<'_>, objects: &[&Value]) -> ApiResult<()> {
        let mirror = objects
            .iter()
            .find_map(|o| o["metadata"]["labels"][LABEL_CLUSTER].as_str());
        let may_write = |cluster: &str| match cx.user {
            None => true,
            Some(u) if u.is_controller() => true,
            Some(u) => crate::rbac::syncer::cluster_of(u).is_some_and(|c| c.as_str() == cluster),
        };
        match mirror {
            Some(cluster) if !may_write(cluster) && cx.t.resource == "pods" => {
                Err(ApiError::Forbidden(format!(
                    "pods labelled {LABEL_CLUSTER} are read-only mirrors of pods that run on a physical cluster (this one on {cluster:?}): change the workload that made it, or delete the pod to have it replaced there"
                )))
            }
            Some(cluster) if !may_write(cluster) => Err(ApiError::Forbidden(format!(
                "{} labelled {LABEL_CLUSTER} are read-only mirrors of what a physical cluster made (this one on {cluster:?}): change the workload that made it, or delete it to have it deleted there",
                cx.t.resource
            ))),
            _ => Ok(()),
        }
    }
}

impl Hook for MirroredPods {
    fn admit_create(&self, cx: &HookCx<'_>, obj: &mut Value) -> ApiResult<()> {
        Self::check(cx, &[obj])
    }

    fn admit_update(
        &self,
        cx: &HookCx<'_>,
        old: &Value,
        new: &mut Value,
        _sub: Option<Subresource>,
    ) -> ApiResult<()> {
        Self::check(cx, &[old, new])
    }
}
