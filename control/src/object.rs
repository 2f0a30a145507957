//! System-managed metadata: what the server sets on create and carries over on update.

use serde_json::{Map, Value, json};
use sluice_api::LogicalClusterPath;

use crate::resources::ResourceType;

/// `metadata.creationTimestamp` format (RFC 3339, seconds).
pub use sluice_kube::time::now_rfc3339;

pub fn meta(obj: &Value) -> &Value {
    &obj["metadata"]
}

pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    match obj.get_mut("metadata") {
        Some(Value::Object(m)) => m,
        _ => unreachable!("metadata was just made an object"),
    }
}

pub fn name(obj: &Value) -> Option<&str> {
    obj["metadata"]["name"].as_str()
}

/// A random suffix for `generateName`, from kube's alphabet (no vowels, no look-alikes).
pub fn random_suffix() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// Fields every write sets the same way: kind/apiVersion and, in a server of logical
/// clusters, the logical-cluster annotation (`annotate`: `None` in single-cluster mode,
/// where kube-apiserver adds nothing of the kind and none must leak into what controllers
/// compare and copy).
pub fn stamp_type(obj: &mut Value, t: &ResourceType, annotate: Option<&LogicalClusterPath>) {
    obj["apiVersion"] = json!(t.storage_api_version());
    obj["kind"] = json!(t.kind);
    let m = meta_mut(obj);
    m.remove("resourceVersion");
    m.remove("selfLink");
    if let Some(cluster) = annotate {
        set_annotation(
            obj,
            sluice_api::LOGICAL_CLUSTER_ANNOTATION,
            cluster.as_str(),
        );
    }
}

/// Set annotation `key` of `obj` (making `metadata.annotations` an object if it is not).
pub fn set_annotation(obj: &mut Value, key: &str, value: &str) {
    let m = meta_mut(obj);
    let annotations = m.entry("annotations").or_insert_with(|| json!({}));
    if !annotations.is_object() {
        *annotations = json!({});
    }
    annotations[key] = json!(value);
}

/// Metadata for a new object.
pub fn prepare_create(
    obj: &mut Value,
    t: &ResourceType,
    annotate: Option<&LogicalClusterPath>,
    namespace: Option<&str>,
) {
    stamp_type(obj, t, annotate);
    let m = meta_mut(obj);
    m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    m.insert("creationTimestamp".into(), json!(now_rfc3339()));
    m.insert("generation".into(), json!(1));
    m.remove("deletionTimestamp");
    m.remove("deletionGracePeriodSeconds");
    match namespace {
        Some(ns) => {
            m.insert("namespace".into(), json!(ns));
        }
        None => {
            m.remove("namespace");
        }
    }
}

/// Carry the server-owned fields of `old` into `new` for an update of the main resource
/// (`status` is kept when the type has a status subresource) and bump `generation` when
/// anything but metadata and status changed.
pub fn prepare_update(
    new: &mut Value,
    old: &Value,
    t: &ResourceType,
    annotate: Option<&LogicalClusterPath>,
    keep_status: bool,
) {
    stamp_type(new, t, annotate);
    let om = &old["metadata"];
    if keep_status {
        match old.get("status") {
            Some(s) => new["status"] = s.clone(),
            None => {
                if let Some(o) = new.as_object_mut() {
                    o.remove("status");
                }
            }
        }
    }
    let changed = spec_changed(new, old);
    let m = meta_mut(new);
    for k in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "namespace",
    ] {
        match om.get(k) {
            Some(v) => m.insert(k.into(), v.clone()),
            None => m.remove(k),
        };
    }
    let generation = om["generation"].as_i64().unwrap_or(1);
    m.insert(
        "generation".into(),
        json!(if changed { generation + 1 } else { generation }),
    );
}

/// True when anything outside `metadata` and `status` differs.
pub fn spec_changed(new: &Value, old: &Value) -> bool {
    let strip = |v: &Value| -> Map<String, Value> {
        let mut m = v.as_object().cloned().unwrap_or_default();
        for k in ["metadata", "status", "apiVersion", "kind"] {
            m.remove(k);
        }
        m
    };
    strip(new) != strip(old)
}

/// Write `resourceVersion` into an object.
pub fn set_resource_version(obj: &mut Value, rv: u64) {
    meta_mut(obj).insert("resourceVersion".into(), json!(rv.to_string()));
}

/// Finalizers still on the object.
pub fn finalizers(obj: &Value) -> usize {
    obj["metadata"]["finalizers"]
        .as_array()
        .map(Vec::len)
        .unwrap_or(0)
}

pub fn is_deleting(obj: &Value) -> bool {
    obj["metadata"]
        .get("deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

/// `old` as its `pods/ephemeralcontainers` subresource changes it: `new`'s ephemeral
/// containers, nothing else.
pub fn ephemeral_update(old: &Value, new: &Value) -> Value {
    let mut merged = old.clone();
    match new["spec"].get("ephemeralContainers") {
        Some(list) if !list.is_null() => merged["spec"]["ephemeralContainers"] = list.clone(),
        _ => {
            if let Some(spec) = merged["spec"].as_object_mut() {
                spec.remove("ephemeralContainers");
            }
        }
    }
    merged
}
