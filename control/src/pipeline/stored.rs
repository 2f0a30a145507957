//! Where a write through a type served in another version than it is stored in goes, and
//! how its object converts: a built-in (an `autoscaling/v1` HorizontalPodAutoscaler is
//! written as the `autoscaling/v2` object it is stored as) by its conversion functions, a
//! custom type whose CRD names a conversion webhook through that webhook.

use crate::catalog::Catalog;
use crate::conversion::Conversion;
use crate::errors::{ApiError, ApiResult};
use crate::resources::ResourceType;

use std::sync::Arc;

use serde_json::Value;
use sluice_api::LogicalClusterPath;

use crate::crd::conversion::ConversionWebhook;
use crate::state::ApiState;

/// How an object of a view becomes the stored form and back.
pub(super) enum Via {
    /// A built-in's conversion functions.
    Builtin(&'static Conversion),
    /// A CRD's conversion webhook, between apiVersions `view` and `storage`.
    Webhook {
        hook: Arc<ConversionWebhook>,
        kind: String,
        view: String,
        storage: String,
    },
}

impl Via {
    /// `obj` (of the view) in the stored form.
    pub(super) async fn stored_form(
        &self,
        state: &ApiState,
        cluster: &LogicalClusterPath,
        obj: Value,
    ) -> ApiResult<Value> {
        match self {
            Via::Builtin(c) => Ok((c.to_storage)(obj)),
            Via::Webhook {
                hook,
                kind,
                storage,
                ..
            } => one(crate::webhooks::conversion::convert(
                state,
                cluster,
                hook,
                kind,
                storage,
                vec![obj],
            )
            .await?),
        }
    }

    /// `obj` (stored) as the view shows it.
    pub(super) async fn view_form(
        &self,
        state: &ApiState,
        cluster: &LogicalClusterPath,
        obj: Value,
    ) -> ApiResult<Value> {
        match self {
            Via::Builtin(c) => Ok((c.from_storage)(obj)),
            Via::Webhook {
                hook, kind, view, ..
            } => one(crate::webhooks::conversion::convert(
                state,
                cluster,
                hook,
                kind,
                view,
                vec![obj],
            )
            .await?),
        }
    }
}

fn one(mut objects: Vec<Value>) -> ApiResult<Value> {
    objects
        .pop()
        .ok_or_else(|| ApiError::Internal("the conversion returned no object".into()))
}

/// The stored type of custom type `t` of `cluster` whose CRD converts through a webhook,
/// and how; `None` for any other type.
pub(super) fn stored_by_webhook(
    state: &ApiState,
    cluster: &LogicalClusterPath,
    t: &ResourceType,
) -> ApiResult<Option<(Arc<ResourceType>, Via)>> {
    let (Some(hook), Some(custom)) = (t.conversion_webhook(), t.custom()) else {
        return Ok(None);
    };
    let stored = state
        .crds
        .catalog(cluster)
        .lookup(&t.group, &custom.storage_version, &t.resource)
        .cloned()
        .ok_or_else(|| {
            ApiError::Internal(format!(
                "{} is stored as {}/{}, which is not served",
                t.resource, t.group, custom.storage_version
            ))
        })?;
    let via = Via::Webhook {
        hook: hook.clone(),
        kind: t.kind.clone(),
        view: t.api_version(),
        storage: stored.api_version(),
    };
    Ok(Some((stored, via)))
}

/// The type a write through `t` goes to when `t` is a converted view (an `autoscaling/v1`
/// HPA is written as the `autoscaling/v2` one it is stored as), and how it converts;
/// `None` for a type stored as it is served.
pub(super) fn stored_as(
    t: &ResourceType,
) -> ApiResult<Option<(Arc<ResourceType>, &'static Conversion)>> {
    let Some(c) = t.conversion else {
        return Ok(None);
    };
    let stored = Catalog::builtin()
        .lookup(c.storage_group, c.storage_version, &t.resource)
        .ok_or_else(|| {
            ApiError::Internal(format!(
                "{} is stored as {}/{}, which is not served",
                t.resource, c.storage_group, c.storage_version
            ))
        })?;
    Ok(Some((stored.clone(), c)))
}

/// The type a stored object of `t` is handled as (itself, or the type it is stored as).
pub(super) fn stored_type(t: &ResourceType) -> &ResourceType {
    t.conversion
        .and_then(|c| Catalog::builtin().lookup(c.storage_group, c.storage_version, &t.resource))
        .map_or(t, |s| &**s)
}
