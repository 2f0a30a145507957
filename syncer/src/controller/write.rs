//! How the syncer writes: server-side apply as `sluice-syncer`, deletes counted by kind and
//! outcome, and the comparison that keeps a steady state from writing at all.

use kube::api::{Api, DeleteParams, DynamicObject, PatchParams};
use serde_json::Value;
use sluice_api::sync::FIELD_MANAGER;

use super::state::Syncer;
use crate::drift::contained;

/// Count write `r` as `kind`/`verb`: `Ok` when it took effect or the object was gone
/// already (404).
pub fn counted<T>(
    syncer: &Syncer,
    kind: &'static str,
    verb: &'static str,
    r: kube::Result<T>,
) -> kube::Result<()> {
    let r = match r {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        r => r.map(|_| ()),
    };
    syncer.metrics.write(kind, verb, r.is_ok());
    r
}

/// Delete `name`; false if that failed (already gone is success).
pub async fn delete<K>(
    syncer: &Syncer,
    kind: &'static str,
    api: &Api<K>,
    ns: &str,
    name: &str,
) -> bool
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let deleted = api.delete(name, &DeleteParams::default()).await;
    match counted(syncer, kind, "delete", deleted) {
        Ok(()) => {
            tracing::info!(kind, namespace = ns, name, "deleted");
            true
        }
        Err(e) => {
            tracing::warn!(kind, namespace = ns, name, error = %e, "delete failed");
            false
        }
    }
}

/// Whether `have` already says everything `want` says (see [`crate::drift`]).
pub fn in_place(want: &Value, have: &Value) -> bool {
    let mut want = want.clone();
    // The server names the object's identity itself; compare the rest.
    if let Some(m) = want.as_object_mut() {
        m.remove("apiVersion");
        m.remove("kind");
    }
    contained(&want, have)
}

/// Whether `obj` carries `finalizer`.
pub fn holds(obj: &DynamicObject, finalizer: &str) -> bool {
    obj.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == finalizer))
}

/// Parameters of the syncer's writes that are not server-side applies: named for the
/// syncer, the one writer of Pod mirrors.
pub fn manager_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}

/// Server-side apply as the syncer, taking over fields another manager set.
pub fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}
