//! Webhook configurations are checked as kube checks them when written
//! ([`crate::webhooks::config::parse`]), so the dispatcher only ever calls what parses.

use serde_json::Value;

use crate::errors::Cause;
use crate::pipeline::hooks::Hook;
use crate::webhooks::config::{Phase, parse};

pub struct WebhookConfigurations;

impl Hook for WebhookConfigurations {
    fn validate(&self, obj: &Value) -> Vec<Cause> {
        let Some(phase) = obj["kind"].as_str().and_then(Phase::of_kind) else {
            return Vec::new();
        };
        parse(obj, phase).err().unwrap_or_default()
    }
}
