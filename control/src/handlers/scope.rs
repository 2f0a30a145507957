//! A resource request resolved against the catalog: its type, logical cluster and
//! namespace, the selectors it filters by, and how a stored object reads in the
//! requested version.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Value, json};
use sluice_api::LogicalClusterPath;

use super::respond::Ctx;
use crate::errors::{ApiError, ApiResult};
use crate::pipeline::Target;
use crate::resources::ResourceType;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::storage::Key;

/// A resource request resolved against the catalog.
pub struct Scope<'a> {
    pub t: &'a Arc<ResourceType>,
    /// `None` for a wildcard request.
    pub cluster: Option<LogicalClusterPath>,
    pub namespace: Option<String>,
}

impl Scope<'_> {
    pub fn cluster(&self) -> ApiResult<&LogicalClusterPath> {
        self.cluster.as_ref().ok_or(ApiError::MethodNotAllowed)
    }

    pub fn key(&self, name: &str) -> ApiResult<Key> {
        Ok(self
            .t
            .prefix
            .key(self.cluster()?, self.namespace.as_deref(), name))
    }

    /// The write target of a request for one logical cluster.
    pub fn target(&self) -> ApiResult<Target> {
        Ok(Target {
            t: self.t.clone(),
            cluster: self.cluster()?.clone(),
            namespace: self.namespace.clone(),
        })
    }
}

/// Parsed `labelSelector` and `fieldSelector`.
pub struct Filter {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Filter {
    pub fn from_ctx(ctx: &Ctx) -> ApiResult<Self> {
        Ok(Self {
            labels: LabelSelector::parse(ctx.query.get("labelSelector").unwrap_or(""))?,
            fields: FieldSelector::parse(ctx.query.get("fieldSelector").unwrap_or(""))?,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    pub fn matches_bytes(&self, value: &[u8]) -> bool {
        if self.is_empty() {
            return true;
        }
        serde_json::from_slice::<Value>(value)
            .is_ok_and(|v| self.labels.matches(&v) && self.fields.matches(&v))
    }
}

/// The key prefix a collection request covers.
pub fn collection_prefix(scope: &Scope<'_>) -> String {
    scope
        .t
        .prefix
        .scope(scope.cluster.as_ref(), scope.namespace.as_deref())
}

/// Objects of a custom type are stored in the CRD's storage version; a read through
/// another served version shows that version (conversion strategy `None`). A built-in
/// with a [`crate::conversion::Conversion`] is converted from the form it is stored in.
pub fn present(t: &ResourceType, bytes: Bytes) -> Bytes {
    if let Some(conversion) = t.conversion {
        // A built-in served in another version than it is stored in (autoscaling/v1).
        return match serde_json::from_slice::<Value>(&bytes) {
            Ok(v) => serde_json::to_vec(&(conversion.from_storage)(v))
                .map(Bytes::from)
                .unwrap_or(bytes),
            Err(_) => bytes,
        };
    }
    let Some(c) = t.custom() else { return bytes };
    if c.storage_version == t.version {
        return bytes;
    }
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(mut v) => {
            v["apiVersion"] = json!(t.api_version());
            serde_json::to_vec(&v).map(Bytes::from).unwrap_or(bytes)
        }
        Err(_) => bytes,
    }
}
