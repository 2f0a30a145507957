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

/// [`present`] for objects of any type: a custom type whose CRD converts through a webhook
/// has its objects sent there (one review per logical cluster they belong to: a wildcard
/// list spans several) and shown as the webhook converted them.
pub async fn present_all(
    state: &crate::state::ApiState,
    cluster: Option<&LogicalClusterPath>,
    t: &ResourceType,
    items: Vec<Bytes>,
) -> ApiResult<Vec<Bytes>> {
    let Some(hook) = t.conversion_webhook() else {
        return Ok(items.into_iter().map(|b| present(t, b)).collect());
    };
    let mut objects = items
        .iter()
        .map(|b| crate::pipeline::parse_json(b))
        .collect::<ApiResult<Vec<Value>>>()?;
    let mut by_cluster: Vec<(LogicalClusterPath, Vec<usize>)> = Vec::new();
    for (i, o) in objects.iter().enumerate() {
        let of = cluster.cloned().unwrap_or_else(|| {
            o["metadata"]["annotations"][sluice_api::LOGICAL_CLUSTER_ANNOTATION]
                .as_str()
                .and_then(|c| c.parse().ok())
                .unwrap_or_else(LogicalClusterPath::root)
        });
        match by_cluster.iter_mut().find(|(c, _)| *c == of) {
            Some((_, list)) => list.push(i),
            None => by_cluster.push((of, vec![i])),
        }
    }
    let desired = t.api_version();
    for (c, indices) in by_cluster {
        let batch = indices.iter().map(|i| objects[*i].take()).collect();
        let out =
            crate::webhooks::conversion::convert(state, &c, hook, &t.kind, &desired, batch).await?;
        for (i, o) in indices.iter().zip(out) {
            objects[*i] = o;
        }
    }
    objects
        .iter()
        .map(|o| {
            serde_json::to_vec(o)
                .map(Bytes::from)
                .map_err(|e| ApiError::Internal(e.to_string()))
        })
        .collect()
}

/// [`present_all`] of one object.
pub async fn present_one(
    state: &crate::state::ApiState,
    cluster: Option<&LogicalClusterPath>,
    t: &ResourceType,
    bytes: Bytes,
) -> ApiResult<Bytes> {
    present_all(state, cluster, t, vec![bytes])
        .await?
        .pop()
        .ok_or_else(|| ApiError::Internal("the conversion returned no object".into()))
}
