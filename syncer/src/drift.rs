//! Whether a downstream object already says everything the syncer wants it to say. The
//! downstream API server adds defaults and status, so equality is too strict: the desired
//! object must be contained in the actual one. When it is, the syncer writes nothing (a
//! steady state costs no writes); when a user edited a synced field downstream, it is not,
//! and the syncer applies again, which reverts the edit.

use serde_json::Value;

/// `desired` ⊆ `actual`: every field of `desired` is in `actual` with the same value
/// (objects recursively; lists element by element and of the same length, since a list
/// the syncer owns is owned whole).
pub fn contained(desired: &Value, actual: &Value) -> bool {
    match (desired, actual) {
        (Value::Object(d), Value::Object(a)) => d
            .iter()
            .all(|(k, dv)| a.get(k).is_some_and(|av| contained(dv, av))),
        (Value::Array(d), Value::Array(a)) => {
            d.len() == a.len() && d.iter().zip(a).all(|(dv, av)| contained(dv, av))
        }
        (Value::Number(d), Value::Number(a)) => d.as_f64() == a.as_f64(),
        (d, a) => d == a,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::contained;

    #[test]
    fn defaults_downstream_are_not_drift_but_edits_are() {
        let desired = json!({"spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "web", "image": "nginx"}]}}}});
        let defaulted = json!({"spec": {"replicas": 3, "progressDeadlineSeconds": 600, "template": {"spec": {"containers": [{"name": "web", "image": "nginx", "imagePullPolicy": "Always"}]}}}, "status": {"replicas": 3}});
        assert!(contained(&desired, &defaulted));
        let edited = json!({"spec": {"replicas": 5, "template": {"spec": {"containers": [{"name": "web", "image": "nginx"}]}}}});
        assert!(!contained(&desired, &edited));
        let extra_container = json!({"spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "web", "image": "nginx"}, {"name": "x"}]}}}});
        assert!(!contained(&desired, &extra_container));
        assert!(contained(&json!({"a": 1}), &json!({"a": 1.0})));
        assert!(!contained(&json!({"a": null}), &json!({})));
    }
}
