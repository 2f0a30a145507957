//! The claims a StatefulSet's ordinals mount, made in the logical cluster as kube's
//! controller makes them in a cluster (`<template>-<set>-<ordinal>` from its
//! `volumeClaimTemplates`). Made upstream, each is an object of the namespace like a claim
//! the user applied: it travels down to the cluster, whose controller finds it there and
//! makes no empty one of its own, it reports where it is bound, and its data follows the
//! namespace when it moves, one ordinal at a time ([`crate::copy`], docs/stateful.md).
//! `persistentVolumeClaimRetentionPolicy` is kept: `whenDeleted: Delete` makes the set
//! their owner (the garbage collector takes them with it), `whenScaled: Delete` deletes an
//! ordinal's claims once it is scaled away and its Pod is gone everywhere.

use serde_json::Value;
use sluice_api::statefulset::{claim_names, has_templates, ordinal_claims, ordinal_of, ordinals};

/// How many claims one reconcile makes at most: a set of a million replicas makes its
/// claims a batch at a time (each write brings the namespace back), never in one pass.
pub const MAX_PER_PASS: usize = 64;

/// The StatefulSets of `objects` that make claims, and are not being deleted.
fn sets<'a>(objects: &'a [(&str, &'a Value)]) -> impl Iterator<Item = &'a Value> + 'a {
    objects
        .iter()
        .filter(|(kind, v)| {
            *kind == "StatefulSet"
                && has_templates(v)
                && v["metadata"]["deletionTimestamp"].is_null()
        })
        .map(|(_, v)| *v)
}

/// The claims the sets of `objects` mount that no object of the namespace names yet
/// (`exists`: a claim or a claim's mirror of that name is there), at most `limit`, in
/// ordinal order.
pub fn missing(
    objects: &[(&str, &Value)],
    exists: impl Fn(&str) -> bool,
    limit: usize,
) -> Vec<Value> {
    let mut out = Vec::new();
    for set in sets(objects) {
        for i in ordinals(set) {
            if out.len() >= limit {
                return out;
            }
            // An ordinal whose claims all exist costs one lookup each; a set whose claims
            // are all there is walked without allocating claims.
            if claim_names(set, i).iter().all(|c| exists(c)) {
                continue;
            }
            out.extend(
                ordinal_claims(set, i)
                    .into_iter()
                    .filter(|c| c["metadata"]["name"].as_str().is_some_and(|n| !exists(n))),
            );
        }
    }
    out.truncate(limit);
    out
}

/// The claims of `objects` that a set with `whenScaled: Delete` scaled away: an ordinal
/// outside its range whose Pod (`<set>-<ordinal>`) no cluster runs (`running`).
pub fn scaled_away(objects: &[(&str, &Value)], running: impl Fn(&str) -> bool) -> Vec<String> {
    let claims: Vec<&str> = objects
        .iter()
        .filter(|(kind, v)| {
            *kind == "PersistentVolumeClaim" && v["metadata"]["deletionTimestamp"].is_null()
        })
        .filter_map(|(_, v)| v["metadata"]["name"].as_str())
        .collect();
    let mut out = Vec::new();
    for set in sets(objects) {
        if set["spec"]["persistentVolumeClaimRetentionPolicy"]["whenScaled"] != "Delete" {
            continue;
        }
        let name = set["metadata"]["name"].as_str().unwrap_or_default();
        let range = ordinals(set);
        for claim in &claims {
            if let Some(i) = ordinal_of(set, claim)
                && !range.contains(&i)
                && !running(&format!("{name}-{i}"))
            {
                out.push(claim.to_string());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn set(replicas: i64, policy: Value) -> Value {
        json!({"metadata": {"name": "db", "uid": "u1"}, "spec": {"replicas": replicas,
            "selector": {"matchLabels": {"app": "db"}},
            "persistentVolumeClaimRetentionPolicy": policy,
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}]}})
    }

    fn names(v: &[Value]) -> Vec<&str> {
        v.iter()
            .filter_map(|c| c["metadata"]["name"].as_str())
            .collect()
    }

    #[test]
    fn each_ordinal_s_claims_are_made_once() {
        let s = set(3, json!({}));
        let objects = [("StatefulSet", &s)];
        let made = missing(&objects, |c| c == "data-db-1", MAX_PER_PASS);
        assert_eq!(names(&made), ["data-db-0", "data-db-2"]);
        assert_eq!(made[0]["metadata"]["labels"], json!({"app": "db"}));
        assert_eq!(made[0]["spec"]["accessModes"], json!(["ReadWriteOnce"]));
        assert!(made[0]["metadata"].get("ownerReferences").is_none());
        assert!(missing(&objects, |_| true, MAX_PER_PASS).is_empty());
        let owned = set(1, json!({"whenDeleted": "Delete"}));
        let made = missing(&[("StatefulSet", &owned)], |_| false, MAX_PER_PASS);
        assert_eq!(made[0]["metadata"]["ownerReferences"][0]["uid"], "u1");
    }

    #[test]
    fn a_huge_set_makes_a_batch_at_a_time_and_a_deleted_one_none() {
        let s = set(i64::from(i32::MAX), json!({}));
        assert_eq!(missing(&[("StatefulSet", &s)], |_| false, 5).len(), 5);
        let mut gone = set(3, json!({}));
        gone["metadata"]["deletionTimestamp"] = json!("2026-11-29T00:00:00Z");
        assert!(missing(&[("StatefulSet", &gone)], |_| false, 5).is_empty());
        let plain = json!({"metadata": {"name": "db"}, "spec": {"replicas": 3}});
        assert!(missing(&[("StatefulSet", &plain)], |_| false, 5).is_empty());
    }

    #[test]
    fn claims_scaled_away_go_under_when_scaled_delete_once_their_pod_is_gone() {
        let s = set(1, json!({"whenScaled": "Delete"}));
        let c = |n: &str| json!({"metadata": {"name": n}});
        let (c0, c1, c2, other) = (
            c("data-db-0"),
            c("data-db-1"),
            c("data-db-2"),
            c("data-web-1"),
        );
        let objects = [
            ("StatefulSet", &s),
            ("PersistentVolumeClaim", &c0),
            ("PersistentVolumeClaim", &c1),
            ("PersistentVolumeClaim", &c2),
            ("PersistentVolumeClaim", &other),
        ];
        assert_eq!(scaled_away(&objects, |p| p == "db-2"), ["data-db-1"]);
        let kept = set(1, json!({"whenScaled": "Retain"}));
        let objects = [("StatefulSet", &kept), ("PersistentVolumeClaim", &c1)];
        assert!(scaled_away(&objects, |_| false).is_empty());
    }
}
