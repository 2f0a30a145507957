//! Pods end gracefully: one bound to a node is marked with its grace period and stopped
//! there first; its node agent deletes it with grace period 0 once the containers are gone.

use serde_json::Value;

use crate::pipeline::hooks::{Deletion, Hook};

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
