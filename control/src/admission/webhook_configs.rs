//! Webhook configurations are checked as kube checks them when written
//! ([`crate::webhooks::config::parse`]), so the dispatcher only ever calls what parses. And
//! a workspace's webhooks are reached through their Service only: a `clientConfig.url` would
//! have the control plane connect wherever a tenant names (its own network, another
//! tenant's endpoints) and tell the tenant what it found there, so only the root logical
//! cluster — the platform's — may name URLs.

use serde_json::Value;

use crate::errors::{ApiError, ApiResult, Cause};
use crate::pipeline::hooks::{Hook, HookCx};
use crate::resources::Subresource;
use crate::webhooks::config::{Phase, parse};

pub struct WebhookConfigurations;

/// The causes of URLs named outside the root logical cluster.
fn urls_outside_root(cx: &HookCx<'_>, obj: &Value) -> ApiResult<()> {
    if cx.cluster.is_root() {
        return Ok(());
    }
    let causes: Vec<Cause> = obj["webhooks"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .filter(|(_, h)| h["clientConfig"].get("url").is_some_and(|u| !u.is_null()))
        .map(|(i, _)| {
            Cause::forbidden(
                format!("webhooks[{i}].clientConfig.url"),
                format!(
                    "a webhook of logical cluster {} is reached through its Service (clientConfig.service): the control plane calls no address a workspace names",
                    cx.cluster
                ),
            )
        })
        .collect();
    if causes.is_empty() {
        return Ok(());
    }
    Err(ApiError::Invalid {
        gr: cx.t.gr.clone(),
        kind: cx.t.kind.clone(),
        name: crate::object::name(obj).unwrap_or_default().to_string(),
        causes,
    })
}

impl Hook for WebhookConfigurations {
    fn validate(&self, obj: &Value) -> Vec<Cause> {
        let Some(phase) = obj["kind"].as_str().and_then(Phase::of_kind) else {
            return Vec::new();
        };
        parse(obj, phase).err().unwrap_or_default()
    }

    fn admit_create(&self, cx: &HookCx<'_>, obj: &mut Value) -> ApiResult<()> {
        urls_outside_root(cx, obj)
    }

    fn admit_update(
        &self,
        cx: &HookCx<'_>,
        _old: &Value,
        new: &mut Value,
        _sub: Option<Subresource>,
    ) -> ApiResult<()> {
        urls_outside_root(cx, new)
    }
}
