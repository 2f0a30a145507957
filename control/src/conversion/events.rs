//! `events.k8s.io/v1` Events as views of core `v1` Events (kube's
//! `pkg/apis/events/v1` conversion): the same fields under the new API's names —
//! `regarding` is `involvedObject`, `note` is `message`, `reportingController` is
//! `source`'s successor `reportingComponent`, the `deprecated*` fields are the old
//! counters and timestamps.

use serde_json::{Map, Value, json};

use super::{Conversion, rename};

/// `events.k8s.io/v1` Event ↔ `v1` Event.
pub const EVENTS_V1: Conversion = Conversion {
    storage_group: "",
    storage_version: "v1",
    to_storage,
    from_storage,
};

/// (events.k8s.io name, core name).
const FIELDS: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

fn to_storage(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        for (new, old) in FIELDS {
            rename(o, new, old);
        }
        o.insert("apiVersion".into(), json!("v1"));
    }
    v
}

fn from_storage(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        for (new, old) in FIELDS {
            rename(o, old, new);
        }
        o.insert("apiVersion".into(), json!("events.k8s.io/v1"));
        drop_nulls(o);
    }
    v
}

/// Fields left null are omitted, as kube's encoder omits them.
fn drop_nulls(o: &mut Map<String, Value>) {
    o.retain(|_, v| !v.is_null());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_reads_the_same_through_both_apis() {
        let core = json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "n"},
            "involvedObject": {"kind": "Pod", "name": "p"},
            "message": "pulled", "reason": "Pulled", "type": "Normal",
            "source": {"component": "kubelet"}, "count": 3,
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:01:00Z",
            "reportingComponent": "kubelet", "reportingInstance": "node-1", "action": "Pull",
        });
        let new = from_storage(core.clone());
        assert_eq!(new["apiVersion"], "events.k8s.io/v1");
        assert_eq!(new["regarding"]["name"], "p");
        assert_eq!(new["note"], "pulled");
        assert_eq!(new["deprecatedCount"], 3);
        assert_eq!(new["reportingController"], "kubelet");
        assert!(new.get("message").is_none());
        assert_eq!(to_storage(new), core);
    }
}
