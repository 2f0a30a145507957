//! `autoscaling/v1` HorizontalPodAutoscalers as views of `autoscaling/v2` ones (kube's
//! `pkg/apis/autoscaling/v1` conversion): v1's `targetCPUUtilizationPercentage` is v2's
//! CPU `Resource` metric with a `Utilization` target, and `currentCPUUtilizationPercentage`
//! its current value. What v1 has no field for travels in annotations: the conditions and
//! the behavior under kube's names (same shapes), the other metrics under
//! [`METRICS`]/[`CURRENT_METRICS`] in v2's shape (kube keeps them in a v1-only shape
//! there). An annotation a client wrote that is not of its type stays a plain annotation.

use k8s_openapi::api::autoscaling::v2;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{Conversion, put_annotation, take_annotation};

/// `autoscaling/v1` ↔ `autoscaling/v2`.
pub const HPA_V1: Conversion = Conversion {
    storage_group: "autoscaling",
    storage_version: "v2",
    to_storage,
    from_storage,
};

/// v2 metrics other than the CPU utilization target, as JSON.
pub const METRICS: &str = "autoscaling.sluice.dev/v2-metrics";
/// v2 current metrics other than CPU utilization, as JSON.
pub const CURRENT_METRICS: &str = "autoscaling.sluice.dev/v2-current-metrics";
/// kube's annotation for the conditions.
pub const CONDITIONS: &str = "autoscaling.alpha.kubernetes.io/conditions";
/// kube's annotation for the scaling behavior.
pub const BEHAVIOR: &str = "autoscaling.alpha.kubernetes.io/behavior";

/// The annotation `key` of `v` as a `T`, taken off only when it is one.
fn take_typed<T: DeserializeOwned>(v: &mut Value, key: &str) -> Option<Value> {
    let raw = v["metadata"]["annotations"][key].as_str()?;
    let parsed: Value = serde_json::from_str(raw).ok()?;
    serde_json::from_value::<T>(parsed.clone()).ok()?;
    take_annotation(v, key);
    Some(parsed)
}

/// The first CPU utilization percentage among `metrics` (its `side`: `target` of a spec
/// metric, `current` of a status one), and every other metric in order.
fn split_cpu(metrics: Option<Value>, side: &str) -> (Option<Value>, Vec<Value>) {
    let Some(Value::Array(metrics)) = metrics else {
        return (None, Vec::new());
    };
    let mut cpu = None;
    let mut rest = Vec::new();
    for m in metrics {
        let at = &m["resource"][side];
        let utilization = m["type"] == "Resource"
            && m["resource"]["name"] == "cpu"
            && at["averageUtilization"].is_number()
            && (side == "current" || at["type"] == "Utilization");
        if utilization && cpu.is_none() {
            cpu = Some(at["averageUtilization"].clone());
        } else {
            rest.push(m);
        }
    }
    (cpu, rest)
}

fn to_storage(mut v: Value) -> Value {
    let metrics = take_typed::<Vec<v2::MetricSpec>>(&mut v, METRICS);
    let current = take_typed::<Vec<v2::MetricStatus>>(&mut v, CURRENT_METRICS);
    let conditions = take_typed::<Vec<v2::HorizontalPodAutoscalerCondition>>(&mut v, CONDITIONS);
    let behavior = take_typed::<v2::HorizontalPodAutoscalerBehavior>(&mut v, BEHAVIOR);
    v["apiVersion"] = json!("autoscaling/v2");
    if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
        let mut all = Vec::new();
        if let Some(cpu) = spec.remove("targetCPUUtilizationPercentage") {
            all.push(json!({"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": cpu}}}));
        }
        if let Some(Value::Array(more)) = metrics {
            all.extend(more);
        }
        if !all.is_empty() {
            spec.insert("metrics".into(), Value::Array(all));
        }
        if let Some(b) = behavior {
            spec.insert("behavior".into(), b);
        }
    }
    if let Some(status) = v.get_mut("status").and_then(Value::as_object_mut) {
        let mut all = Vec::new();
        if let Some(cpu) = status.remove("currentCPUUtilizationPercentage") {
            all.push(json!({"type": "Resource", "resource": {"name": "cpu",
                "current": {"averageUtilization": cpu}}}));
        }
        if let Some(Value::Array(more)) = current {
            all.extend(more);
        }
        if !all.is_empty() {
            status.insert("currentMetrics".into(), Value::Array(all));
        }
        if let Some(c) = conditions {
            status.insert("conditions".into(), c);
        }
    }
    v
}

fn from_storage(mut v: Value) -> Value {
    v["apiVersion"] = json!("autoscaling/v1");
    let mut notes = Vec::new();
    if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
        let (cpu, rest) = split_cpu(spec.remove("metrics"), "target");
        if let Some(c) = cpu {
            spec.insert("targetCPUUtilizationPercentage".into(), c);
        }
        if !rest.is_empty() {
            notes.push((METRICS, Value::Array(rest)));
        }
        if let Some(b) = spec.remove("behavior") {
            notes.push((BEHAVIOR, b));
        }
    }
    if let Some(status) = v.get_mut("status").and_then(Value::as_object_mut) {
        let (cpu, rest) = split_cpu(status.remove("currentMetrics"), "current");
        if let Some(c) = cpu {
            status.insert("currentCPUUtilizationPercentage".into(), c);
        }
        if !rest.is_empty() {
            notes.push((CURRENT_METRICS, Value::Array(rest)));
        }
        if let Some(c) = status.remove("conditions") {
            notes.push((CONDITIONS, c));
        }
    }
    for (key, value) in notes {
        put_annotation(&mut v, key, value.to_string());
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2_hpa() -> Value {
        json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "n", "annotations": {"team": "a"}},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "minReplicas": 1, "maxReplicas": 5,
                "metrics": [
                    {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}},
                    {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "100Mi"}}},
                ],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}},
            },
            "status": {
                "currentReplicas": 2, "desiredReplicas": 2,
                "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 30}}}],
                "conditions": [{"type": "AbleToScale", "status": "True"}],
            },
        })
    }

    #[test]
    fn v1_shows_the_cpu_target_and_keeps_the_rest_in_annotations() {
        let v1 = from_storage(v2_hpa());
        assert_eq!(v1["apiVersion"], "autoscaling/v1");
        assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 60);
        assert_eq!(v1["status"]["currentCPUUtilizationPercentage"], 30);
        assert!(v1["spec"].get("metrics").is_none());
        let a = &v1["metadata"]["annotations"];
        assert!(a[METRICS].as_str().unwrap().contains("memory"));
        assert!(
            a[BEHAVIOR]
                .as_str()
                .unwrap()
                .contains("stabilizationWindowSeconds")
        );
        assert!(a[CONDITIONS].as_str().unwrap().contains("AbleToScale"));
        // Read through v1, written back: nothing is lost.
        assert_eq!(to_storage(v1), v2_hpa());
    }

    #[test]
    fn an_annotation_of_the_wrong_shape_stays_an_annotation() {
        let v1 = json!({
            "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "annotations": {METRICS: "[{\"type\": 7}]"}},
            "spec": {"maxReplicas": 3, "targetCPUUtilizationPercentage": 50},
        });
        let v2 = to_storage(v1);
        assert_eq!(v2["metadata"]["annotations"][METRICS], "[{\"type\": 7}]");
        assert_eq!(v2["spec"]["metrics"].as_array().unwrap().len(), 1);
    }
}
