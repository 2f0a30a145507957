//! Labels and annotations that Sluice's own parts write (`state.sluice.dev/<cluster>`,
//! `capacity.sluice.dev/...`, `replicas.sluice.dev/...`, `status.sluice.dev/...`): in a
//! logical cluster a client may not set, change or remove them, or it could place its
//! namespace on a cluster placement did not choose, skip its quota, or forge a report.
//! Who may is decided by the authenticated identity — the administrators (the placement
//! controllers run as one), syncers and the clusterset's components — never by a field
//! manager. The keys meant for users stay theirs: `sluice.dev/cluster` (checked against the
//! workspace's policy), `sluice.dev/syncable`, `sluice.dev/export` and a claim's `sluice.dev/storage`.

use serde_json::Value;

use crate::auth::User;

/// Keys under `sluice.dev` that users set.
const USER_KEYS: &[&str] = &[
    sluice_api::sync::LABEL_CLUSTER,
    "sluice.dev/syncable",
    // A Service opts out of the clusterset (docs/mcs.md).
    "sluice.dev/export",
    // A claim's data is shared by the clusters or moves with the app (docs/stateful.md).
    sluice_api::claim_copy::STORAGE_ANNOTATION,
];

/// Keys the server stamps on every write itself (a client's value is replaced).
const STAMPED: &[&str] = &[
    sluice_api::LOGICAL_CLUSTER_ANNOTATION,
    sluice_api::tenancy::POD_SECURITY_ANNOTATION,
    sluice_api::sync::INGRESS_HOSTS_ANNOTATION,
    sluice_api::sync::ANNOTATION_DOWNSTREAM_NAMESPACE,
];

/// Whether `key` belongs to Sluice's parts.
fn reserved(key: &str) -> bool {
    let Some((domain, _)) = key.split_once('/') else {
        return false;
    };
    (domain == "sluice.dev" || domain.ends_with(".sluice.dev"))
        && !USER_KEYS.contains(&key)
        && !STAMPED.contains(&key)
}

/// Whether `user` is one of the system's own parts.
pub fn is_system(user: &User) -> bool {
    user.is_admin()
        || crate::rbac::syncer::cluster_of(user).is_some()
        || crate::rbac::clusterset::component_of(user).is_some()
}

/// The first reserved key a write by `user` to an object of `resource` from `old` to `new`
/// sets, changes or removes: `(which metadata map, key)`. Only a Namespace's state labels
/// count: on the objects in it the server makes them its namespace's anyway.
pub fn first_changed<'a>(
    user: Option<&User>,
    resource: &str,
    old: Option<&'a Value>,
    new: &'a Value,
) -> Option<(&'static str, String)> {
    if user.is_none_or(is_system) {
        return None;
    }
    let counts = |k: &str| {
        reserved(k)
            && (resource == "namespaces" || !k.starts_with(sluice_api::sync::STATE_LABEL_PREFIX))
    };
    for map in ["labels", "annotations"] {
        let of = |o: Option<&'a Value>| o.and_then(|o| o["metadata"][map].as_object());
        let (before, after) = (of(old), of(Some(new)));
        let keys = before
            .into_iter()
            .flat_map(|m| m.keys())
            .chain(after.into_iter().flat_map(|m| m.keys()));
        for k in keys {
            if counts(k) && before.and_then(|m| m.get(k)) != after.and_then(|m| m.get(k)) {
                return Some((map, k.clone()));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tenant() -> User {
        User {
            name: "alice".into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_tenant_may_not_place_itself_or_forge_reports() {
        let old = json!({"metadata": {"labels": {"state.sluice.dev/east": "Sync", "app": "x"}}});
        let mut new = old.clone();
        new["metadata"]["labels"]["app"] = json!("y");
        new["metadata"]["labels"]["sluice.dev/cluster"] = json!("west");
        assert_eq!(
            first_changed(Some(&tenant()), "namespaces", Some(&old), &new),
            None
        );
        new["metadata"]["labels"]["state.sluice.dev/west"] = json!("Sync");
        assert_eq!(
            first_changed(Some(&tenant()), "namespaces", Some(&old), &new),
            Some(("labels", "state.sluice.dev/west".into()))
        );
        let dropped = json!({"metadata": {"labels": {"app": "x"}}});
        assert!(first_changed(Some(&tenant()), "namespaces", Some(&old), &dropped).is_some());
        let forged = json!({"metadata": {"annotations": {"capacity.sluice.dev/admitted": "true"}}});
        assert!(first_changed(Some(&tenant()), "namespaces", None, &forged).is_some());
        // The server's own writes and the system's parts may.
        assert_eq!(first_changed(None, "namespaces", None, &forged), None);
        let admin = User {
            name: "admin".into(),
            groups: vec!["system:masters".into()],
            ..Default::default()
        };
        assert_eq!(
            first_changed(Some(&admin), "namespaces", None, &forged),
            None
        );
        // On the objects of a namespace, state labels are the server's to set anyway.
        let copied = json!({"metadata": {"labels": {"state.sluice.dev/east": "Sync"}}});
        assert_eq!(
            first_changed(Some(&tenant()), "deployments", None, &copied),
            None
        );
        let share = json!({"metadata": {"annotations": {"replicas.sluice.dev/east": "9"}}});
        assert!(first_changed(Some(&tenant()), "deployments", None, &share).is_some());
        // Keys that only look alike are the user's.
        let lookalike =
            json!({"metadata": {"labels": {"notsluice.dev/x": "1", "sluice.devx/y": "2"}}});
        assert_eq!(
            first_changed(Some(&tenant()), "configmaps", None, &lookalike),
            None
        );
    }
}
