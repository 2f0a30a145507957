//! Ephemeral containers (`kubectl debug`) join a running Pod through its
//! `pods/ephemeralcontainers` subresource, and only there: not when the Pod is created, not
//! through the Pod itself; once added, one is never changed or removed (kube's rules and
//! wording). A mirror of a Pod a physical cluster runs carries what its cluster says: its
//! syncer writes it whole.

use serde_json::Value;
use sluice_api::sync::LABEL_CLUSTER;

use crate::errors::{ApiResult, Cause};
use crate::pipeline::hooks::{Hook, HookCx};
use crate::resources::Subresource;

/// Where kube reports ephemeral-container rules.
const FIELD: &str = "spec.ephemeralContainers";

pub struct EphemeralContainers;

fn list(pod: &Value) -> &[Value] {
    pod["spec"]["ephemeralContainers"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// What an update through the subresource may not do: remove or change an ephemeral
/// container that is there.
pub fn update_causes(old: &Value, new: &Value) -> Vec<Cause> {
    let added = list(new);
    let mut causes = Vec::new();
    for was in list(old) {
        let name = was["name"].as_str().unwrap_or_default();
        match added.iter().find(|c| c["name"].as_str() == Some(name)) {
            None => causes.push(Cause::forbidden(
                FIELD,
                format!("existing ephemeral containers {name:?} may not be removed"),
            )),
            Some(now) if now != was => causes.push(Cause::forbidden(
                format!("{FIELD}[{name}]"),
                format!("existing ephemeral containers {name:?} may not be changed"),
            )),
            Some(_) => {}
        }
    }
    causes
}

/// Whether the writer copies the pod from where it runs: a mirror, written by its syncer
/// (or by the server's own controllers).
fn copied(cx: &HookCx<'_>, pod: &Value) -> bool {
    let mirror = pod["metadata"]["labels"][LABEL_CLUSTER].is_string();
    mirror
        && cx
            .user
            .is_none_or(|u| u.is_controller() || crate::rbac::syncer::cluster_of(u).is_some())
}

fn refuse(cx: &HookCx<'_>, pod: &Value, causes: Vec<Cause>) -> ApiResult<()> {
    if causes.is_empty() {
        return Ok(());
    }
    Err(crate::pipeline::invalid(
        cx.t,
        crate::object::name(pod).unwrap_or_default(),
        causes,
    ))
}

impl Hook for EphemeralContainers {
    fn admit_create(&self, cx: &HookCx<'_>, obj: &mut Value) -> ApiResult<()> {
        if list(obj).is_empty() || copied(cx, obj) {
            return Ok(());
        }
        refuse(
            cx,
            obj,
            vec![Cause::forbidden(FIELD, "cannot be set on create")],
        )
    }

    fn admit_update(
        &self,
        cx: &HookCx<'_>,
        old: &Value,
        new: &mut Value,
        sub: Option<Subresource>,
    ) -> ApiResult<()> {
        match sub {
            Some(Subresource::EphemeralContainers) => refuse(cx, new, update_causes(old, new)),
            None if list(old) != list(new) && !copied(cx, new) => refuse(
                cx,
                new,
                vec![Cause::forbidden(
                    FIELD,
                    "ephemeral containers are added through the pods/ephemeralcontainers subresource only, and never changed or removed",
                )],
            ),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::object::ephemeral_update;

    #[test]
    fn the_subresource_adds_and_never_changes_or_removes() {
        let old = json!({"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "main"}],
            "ephemeralContainers": [{"name": "d1", "image": "busybox"}]}});
        let mut asked = old.clone();
        asked["metadata"]["labels"]["a"] = json!("changed");
        asked["spec"]["containers"][0]["image"] = json!("changed");
        asked["spec"]["ephemeralContainers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "d2", "image": "busybox"}));
        let new = ephemeral_update(&old, &asked);
        assert_eq!(new["metadata"], old["metadata"]);
        assert_eq!(new["spec"]["containers"], old["spec"]["containers"]);
        assert_eq!(list(&new).len(), 2);
        assert!(update_causes(&old, &new).is_empty());

        let removed = ephemeral_update(&old, &json!({"spec": {}}));
        let causes = update_causes(&old, &removed);
        assert_eq!(
            (causes[0].field.as_str(), causes[0].message.as_str()),
            (
                "spec.ephemeralContainers",
                "Forbidden: existing ephemeral containers \"d1\" may not be removed"
            )
        );
        let changed = ephemeral_update(
            &old,
            &json!({"spec": {"ephemeralContainers": [{"name": "d1", "image": "alpine"}]}}),
        );
        assert_eq!(
            update_causes(&old, &changed)[0].message,
            "Forbidden: existing ephemeral containers \"d1\" may not be changed"
        );
    }
}
