//! A StatefulSet's ordinals and the claims its `volumeClaimTemplates` make per ordinal,
//! named and built as kube's controller makes them (`<template>-<set>-<ordinal>`). The local
//! clusters' controller makes them on a cluster; placement makes them in the logical
//! cluster first, so each ordinal's claim is an object of the namespace (as on one kube
//! cluster) whose data follows a move, one ordinal at a time (docs/stateful.md).

use serde_json::{Value, json};

/// The ordinals set `v` (as JSON) runs: `replicas` of them from `spec.ordinals.start`.
pub fn ordinals(v: &Value) -> std::ops::Range<usize> {
    let n = |x: &Value| usize::try_from(x.as_i64().unwrap_or(0).max(0)).unwrap_or(0);
    let desired = match &v["spec"]["replicas"] {
        Value::Null => 1,
        r => n(r),
    };
    let start = n(&v["spec"]["ordinals"]["start"]);
    start..start.saturating_add(desired)
}

/// The claim of `template` for ordinal `ordinal` of set `set`.
pub fn claim_name(template: &str, set: &str, ordinal: usize) -> String {
    format!("{template}-{set}-{ordinal}")
}

/// The set's claim templates, by name.
pub fn templates(sts: &Value) -> impl Iterator<Item = (&str, &Value)> {
    sts["spec"]["volumeClaimTemplates"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| Some((t["metadata"]["name"].as_str()?, t)))
}

/// Whether the set makes claims of its own.
pub fn has_templates(sts: &Value) -> bool {
    templates(sts).next().is_some()
}

/// The names of the claims ordinal `ordinal` of `sts` mounts.
pub fn claim_names(sts: &Value, ordinal: usize) -> Vec<String> {
    let set = sts["metadata"]["name"].as_str().unwrap_or_default();
    templates(sts)
        .map(|(t, _)| claim_name(t, set, ordinal))
        .collect()
}

/// The ordinal of `sts` whose claim `claim` is, if it is one of its claims.
pub fn ordinal_of(sts: &Value, claim: &str) -> Option<usize> {
    let set = sts["metadata"]["name"].as_str()?;
    templates(sts).find_map(|(t, _)| {
        let digits = claim
            .strip_prefix(t)?
            .strip_prefix('-')?
            .strip_prefix(set)?;
        let digits = digits.strip_prefix('-')?;
        // kube's names: decimal, no sign, no leading zero.
        if digits.is_empty()
            || !digits.bytes().all(|b| b.is_ascii_digit())
            || (digits.len() > 1 && digits.starts_with('0'))
        {
            return None;
        }
        digits.parse().ok()
    })
}

/// An owner reference.
pub fn owner(api_version: &str, kind: &str, name: &str, uid: &str, controller: bool) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
        "controller": controller, "blockOwnerDeletion": true})
}

/// The claims ordinal `ordinal` of `sts` (the set as JSON) mounts: the template's labels
/// and the set's selector labels, its annotations and spec; owned by the set under
/// `whenDeleted: Delete` (then the garbage collector takes them with it).
pub fn ordinal_claims(sts: &Value, ordinal: usize) -> Vec<Value> {
    let set = sts["metadata"]["name"].as_str().unwrap_or_default();
    let uid = sts["metadata"]["uid"].as_str().unwrap_or_default();
    let delete_with_set =
        sts["spec"]["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Delete";
    templates(sts)
        .map(|(name, t)| {
            let mut labels = t["metadata"]["labels"].clone();
            if !labels.is_object() {
                labels = json!({});
            }
            for (k, v) in sts["spec"]["selector"]["matchLabels"]
                .as_object()
                .into_iter()
                .flatten()
            {
                labels[k] = v.clone();
            }
            let mut metadata = json!({"name": claim_name(name, set, ordinal), "labels": labels});
            if let Some(a) = t["metadata"]["annotations"].as_object() {
                metadata["annotations"] = Value::Object(a.clone());
            }
            if delete_with_set && !uid.is_empty() {
                metadata["ownerReferences"] =
                    json!([owner("apps/v1", "StatefulSet", set, uid, true)]);
            }
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": metadata,
                "spec": t["spec"]})
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_start_at_spec_ordinals_start() {
        assert_eq!(ordinals(&json!({"spec": {}})), 0..1);
        assert_eq!(ordinals(&json!({"spec": {"replicas": 3}})), 0..3);
        assert_eq!(
            ordinals(&json!({"spec": {"replicas": 2, "ordinals": {"start": 1}}})),
            1..3
        );
        assert_eq!(
            ordinals(&json!({"spec": {"replicas": 0, "ordinals": {"start": 5}}})),
            5..5
        );
        assert_eq!(
            ordinals(&json!({"spec": {"replicas": -4, "ordinals": {"start": -1}}})),
            0..0
        );
        let huge =
            ordinals(&json!({"spec": {"replicas": i64::MAX, "ordinals": {"start": i64::MAX}}}));
        assert!(huge.start <= huge.end);
    }

    #[test]
    fn each_ordinal_has_claims_of_its_own() {
        let sts = json!({"metadata": {"name": "db", "uid": "u1"},
            "spec": {"selector": {"matchLabels": {"app": "db"}},
                "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete"},
                "volumeClaimTemplates": [{"metadata": {"name": "data", "labels": {"tier": "x"}},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}});
        let claims = ordinal_claims(&sts, 2);
        assert_eq!(claims[0]["metadata"]["name"], "data-db-2");
        assert_eq!(
            claims[0]["metadata"]["labels"],
            json!({"tier": "x", "app": "db"})
        );
        assert_eq!(claims[0]["metadata"]["ownerReferences"][0]["uid"], "u1");
        assert_eq!(claims[0]["spec"]["accessModes"], json!(["ReadWriteOnce"]));
        assert_eq!(claim_names(&sts, 0), vec!["data-db-0".to_string()]);
        let retained = json!({"metadata": {"name": "db"}, "spec": {"volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {}}]}});
        assert!(
            ordinal_claims(&retained, 0)[0]["metadata"]
                .get("ownerReferences")
                .is_none()
        );
    }

    #[test]
    fn a_claim_names_its_ordinal_only_in_kube_s_form() {
        let sts = json!({"metadata": {"name": "db"},
            "spec": {"volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {}}]}});
        assert_eq!(ordinal_of(&sts, "data-db-0"), Some(0));
        assert_eq!(ordinal_of(&sts, "data-db-12"), Some(12));
        for other in [
            "data-db-",
            "data-db-01",
            "data-db--1",
            "data-db-x",
            "data-dbx-1",
            "logs-db-1",
            "data-db-1é",
            "data-db-99999999999999999999999",
        ] {
            assert_eq!(ordinal_of(&sts, other), None, "{other}");
        }
    }
}
