//! Events up: a downstream Event about an object there is upstream (a synced object, or a
//! Pod's mirror) is copied to that object's logical cluster once per change.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ApiResource, DynamicObject, Patch};
use sluice_api::LogicalClusterPath;

use super::state::Sides;
use super::watched::Watched;
use super::write::apply_params;

/// The resourceVersion of each downstream Event copied up, by namespace and name.
#[derive(Default)]
pub struct Copied(HashMap<(String, String), String>);

/// Copy up the Events of downstream namespace `down_ns` into upstream namespace `source`;
/// false if a write failed.
pub async fn copy_events(
    s: &Sides,
    w: &Watched,
    copied: &mut Copied,
    down_ns: &str,
    source: Option<&(LogicalClusterPath, String)>,
) -> bool {
    if !w.events.is_ready() {
        return true;
    }
    let mut ok = true;
    let resource = ApiResource::erase::<Event>(&());
    let in_ns = w.events.store.in_namespace("", down_ns);
    // Forget what is gone downstream (its upstream copy stays, as Events do).
    copied.0.retain(|(ns, name), _| {
        ns != down_ns
            || in_ns
                .iter()
                .any(|e| e.metadata.name.as_deref() == Some(name))
    });
    let Some((path, up_ns)) = source else {
        return true;
    };
    for ev in in_ns {
        let (Some(name), Some(rv)) = (
            ev.metadata.name.clone(),
            ev.metadata.resource_version.clone(),
        ) else {
            continue;
        };
        let key = (down_ns.to_string(), name);
        if copied.0.get(&key) == Some(&rv) {
            continue;
        }
        let about = &ev.involved_object;
        let (Some(kind), Some(obj_name)) = (about.kind.as_deref(), about.name.as_deref()) else {
            continue;
        };
        let scope = path.as_str();
        // A Pod is a mirror, or one made upstream (a synced object like the others).
        let mirror = (kind == "Pod")
            .then(|| w.mirrors.store.get_in(scope, up_ns, obj_name))
            .flatten()
            .map(|m| ("v1".to_string(), m.metadata.uid.clone()));
        let found: Option<(String, Option<String>)> = mirror.or_else(|| {
            w.kinds
                .iter()
                .filter(|k| k.kind.kind == kind)
                .find_map(|k| {
                    let o = k.up.store.get_in(scope, up_ns, obj_name)?;
                    Some((k.kind.api_version(), o.metadata.uid.clone()))
                })
        });
        let Some((api_version, uid)) = found else {
            continue;
        };
        let regarding = crate::events::Regarding {
            api_version: &api_version,
            kind,
            namespace: up_ns,
            name: obj_name,
            uid: uid.as_deref(),
        };
        let Some(up) = serde_json::to_value(&*ev)
            .ok()
            .and_then(|v| crate::events::upstream_event(&v, &regarding, &s.config.cluster))
        else {
            continue;
        };
        let Ok(client) = s.upstream.at(path) else {
            continue;
        };
        let up_name = up["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let api: Api<DynamicObject> = Api::namespaced_with(client, up_ns, &resource);
        let written = api
            .patch(&up_name, &apply_params(), &Patch::Apply(&up))
            .await;
        s.syncer.metrics.write("Event", "copy", written.is_ok());
        match written {
            Ok(_) => {
                copied.0.insert(key, rv);
            }
            // Refused (the logical cluster or namespace is gone, or it is invalid there):
            // not retried until it changes.
            Err(kube::Error::Api(e)) if e.code < 500 => {
                tracing::debug!(namespace = %up_ns, event = %up_name, error = %e.message, "an event was refused upstream");
                copied.0.insert(key, rv);
            }
            Err(e) => {
                tracing::debug!(namespace = %up_ns, event = %up_name, error = %e, "copying an event up failed");
                ok = false;
            }
        }
    }
    ok
}
