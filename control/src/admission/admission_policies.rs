//! ValidatingAdmissionPolicies and their bindings are checked as kube checks them when
//! written ([`crate::policies::config`]: every CEL expression compiled, the compiler's
//! message at the field), so the dispatcher only ever evaluates what parses.

use serde_json::Value;

use crate::errors::Cause;
use crate::pipeline::hooks::Hook;
use crate::policies::config::{BINDING_KIND, POLICY_KIND, parse_binding, parse_policy};

pub struct AdmissionPolicies;

impl Hook for AdmissionPolicies {
    fn validate(&self, obj: &Value) -> Vec<Cause> {
        match obj["kind"].as_str() {
            Some(POLICY_KIND) => parse_policy(obj).err().unwrap_or_default(),
            Some(BINDING_KIND) => parse_binding(obj).err().unwrap_or_default(),
            _ => Vec::new(),
        }
    }
}
