//! Where a write through a built-in served in another version than it is stored in goes
//! (an `autoscaling/v1` HorizontalPodAutoscaler is written as the `autoscaling/v2` object
//! it is stored as): the stored type, found in the built-in catalog.

use crate::catalog::Catalog;
use crate::conversion::Conversion;
use crate::errors::{ApiError, ApiResult};
use crate::resources::ResourceType;

use std::sync::Arc;

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
