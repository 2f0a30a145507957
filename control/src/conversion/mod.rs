//! Built-in types served in a version other than the one they are stored in, converted on
//! every read and write as kube-apiserver converts them: `autoscaling/v1`
//! HorizontalPodAutoscalers are stored as `autoscaling/v2` ([`hpa`]), and `events.k8s.io/v1`
//! Events are the core `v1` Events ([`events`]) — one object, two views, so an Event
//! recorded by client-go's newer recorder shows in `kubectl get events` and the other way
//! round. Conversions are total functions on JSON: what a view has no field for travels in
//! annotations, so a read-modify-write through either view loses nothing.

pub mod events;
pub mod hpa;

use serde_json::Value;

/// How a served version maps onto the version it is stored as.
#[derive(Debug)]
pub struct Conversion {
    /// The group of the stored form (its storage prefix is that group's resource).
    pub storage_group: &'static str,
    pub storage_version: &'static str,
    /// The served form made the stored one (on writes).
    pub to_storage: fn(Value) -> Value,
    /// The stored form made the served one (on reads, watches and write responses).
    pub from_storage: fn(Value) -> Value,
}

/// Move `obj[from]` to `obj[to]` (top level of an object), if present.
fn rename(obj: &mut serde_json::Map<String, Value>, from: &str, to: &str) {
    if let Some(v) = obj.remove(from) {
        obj.insert(to.to_string(), v);
    }
}

/// `obj`'s annotation `key`, removed.
fn take_annotation(obj: &mut Value, key: &str) -> Option<String> {
    let annotations = obj["metadata"]["annotations"].as_object_mut()?;
    let v = annotations.remove(key)?;
    if annotations.is_empty()
        && let Some(m) = obj["metadata"].as_object_mut()
    {
        m.remove("annotations");
    }
    v.as_str().map(str::to_string)
}

/// Set `obj`'s annotation `key` to `value`.
fn put_annotation(obj: &mut Value, key: &str, value: String) {
    if !obj["metadata"].is_object() {
        obj["metadata"] = Value::Object(Default::default());
    }
    if !obj["metadata"]["annotations"].is_object() {
        obj["metadata"]["annotations"] = Value::Object(Default::default());
    }
    obj["metadata"]["annotations"][key] = Value::String(value);
}
