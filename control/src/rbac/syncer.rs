//! What a syncer may do upstream, decided in code rather than by RBAC objects (like kcp's
//! syncer virtual workspace): a syncer identity (user `system:sluice:syncer:<cluster>` in
//! group `system:sluice:syncers`, from a client certificate the control plane's CA signed)
//! reads only what is placed on its cluster and writes only objects placed there, their
//! status and its own Pod and claim mirrors, Events and heartbeat Lease. It cannot read another
//! cluster's placements, nor any Secret that is not placed on its cluster.
//!
//! - list/watch (across logical clusters or in one): the label selector must require
//!   `state.sluice.dev/<cluster>` (Pods: or `sluice.dev/cluster=<cluster>`, the mirrors);
//!   Namespaces and CustomResourceDefinitions may be read whole (names and schemas, no
//!   tenant data).
//! - get, update, patch of one object (or its status): it must carry one of those labels
//!   (a Pod mirror not yet created: its namespace must be placed on the cluster); delete:
//!   only its Pod and claim mirrors. What a write may change is checked once the new object is known
//!   ([`may_change`], [`may_create`]): on objects placed on its cluster, only its own
//!   status report, import report and finalizer.
//! - create: Events (and Pods) in a namespace placed on the cluster.
//! - Namespaces: patch (its MCS import report).
//! - its heartbeat Lease in the root's `kube-node-lease`.

use serde_json::Value;
use sluice_api::sync::{
    IMPORTS_ANNOTATION_PREFIX, LABEL_CLUSTER, STATE_LABEL_PREFIX, STATUS_ANNOTATION_PREFIX,
    SYNC_FINALIZER_PREFIX,
};
use sluice_api::{ClusterName, LogicalClusterPath};

use super::{Action, Decision};
use crate::auth::User;
use crate::selectors::LabelSelector;
use crate::storage::{ResourcePrefix, Store};

/// The user name prefix of syncer identities.
pub const USER_PREFIX: &str = "system:sluice:syncer:";
/// The group every syncer identity is in.
pub const GROUP: &str = "system:sluice:syncers";

/// The cluster a syncer identity syncs, if `user` is one.
pub fn cluster_of(user: &User) -> Option<ClusterName> {
    let name = user.name.strip_prefix(USER_PREFIX)?;
    (user.groups.iter().any(|g| g == GROUP) && !name.is_empty()).then(|| ClusterName::new(name))
}

/// What is known of the request beyond its RBAC attributes.
pub struct Request<'a> {
    /// `None`: across logical clusters (`/clusters/*`).
    pub cluster: Option<&'a LogicalClusterPath>,
    pub label_selector: Option<&'a str>,
}

fn labels_allow(obj: &Value, state_label: &str, cluster: &ClusterName, pods: bool) -> bool {
    let labels = &obj["metadata"]["labels"];
    labels.get(state_label).is_some()
        || (pods && labels[LABEL_CLUSTER].as_str() == Some(cluster.as_str()))
}

/// Decide `action` for the syncer of `cluster`.
pub fn decide(
    store: &Store,
    cluster: &ClusterName,
    action: &Action<'_>,
    req: &Request<'_>,
) -> Decision {
    let allow = Decision::allow_if;
    let Action::Resource {
        verb,
        group,
        resource,
        subresource,
        namespace,
        name,
    } = *action
    else {
        // Discovery, OpenAPI, health.
        return allow(matches!(action, Action::NonResource { verb: "get", .. }));
    };
    let state_label = format!("{STATE_LABEL_PREFIX}{cluster}");
    // Pods and claims: its own mirrors it may write.
    let pods = sluice_api::synced_kinds::is_mirrored_resource(group, resource);
    let whole_readable = (group.is_empty() && resource == "namespaces")
        || (group == "apiextensions.k8s.io" && resource == "customresourcedefinitions");
    let stored = |c: &LogicalClusterPath, ns: &str, n: &str| -> Option<Value> {
        let ns = (!ns.is_empty()).then_some(ns);
        let e = store.get(&ResourcePrefix::new(group, resource).key(c, ns, n))?;
        serde_json::from_slice(&e.value).ok()
    };
    let namespace_placed = |c: &LogicalClusterPath| {
        store
            .get(&ResourcePrefix::new("", "namespaces").key(c, None, namespace))
            .and_then(|e| serde_json::from_slice::<Value>(&e.value).ok())
            .is_some_and(|ns| ns["metadata"]["labels"].get(&state_label).is_some())
    };
    match verb {
        "list" | "watch" => {
            if whole_readable {
                return Decision::Allow;
            }
            let Some(selector) = req
                .label_selector
                .and_then(|s| LabelSelector::parse(s).ok())
            else {
                return Decision::NoOpinion;
            };
            allow(
                selector.requires(&state_label)
                    || (pods && selector.requires_value(LABEL_CLUSTER, cluster.as_str())),
            )
        }
        _ => {
            let Some(c) = req.cluster else {
                return Decision::NoOpinion;
            };
            if group == "coordination.k8s.io" && resource == "leases" {
                return allow(
                    c.is_root()
                        && namespace == sluice_api::liveness::SYNCER_LEASE_NAMESPACE
                        && name == sluice_api::liveness::syncer_lease_name(cluster),
                );
            }
            if whole_readable && verb == "get" {
                return Decision::Allow;
            }
            if group.is_empty() && resource == "namespaces" {
                return allow(verb == "patch" && subresource.is_empty());
            }
            if group.is_empty() && resource == "events" {
                return allow(matches!(verb, "create" | "patch" | "get") && namespace_placed(c));
            }
            if name.is_empty() {
                // Creating with a generated name, deleting collections: not a syncer's.
                return allow(pods && verb == "create" && namespace_placed(c));
            }
            // The object or its status: no other subresource (no tokens, no scale).
            if !(subresource.is_empty() || subresource == "status") {
                return Decision::NoOpinion;
            }
            let own_mirror = |o: &Value| {
                pods && o["metadata"]["labels"][LABEL_CLUSTER].as_str() == Some(cluster.as_str())
            };
            match (verb, stored(c, namespace, name)) {
                // Only its own Pod and claim mirrors does it delete.
                ("delete", Some(obj)) => allow(own_mirror(&obj)),
                (_, Some(obj)) => allow(labels_allow(&obj, &state_label, cluster, pods)),
                // A Pod mirror is created by an apply (a patch of a Pod not there yet).
                (_, None) => allow(pods && verb == "patch" && namespace_placed(c)),
            }
        }
    }
}

/// Whether the syncer of `cluster` may turn `old` into `new` (an update or patch of an
/// object of `resource`; `sub`: the subresource written). Its own Pod and claim mirrors, Events and
/// heartbeat Lease it may change at will; anything else placed on its cluster only in its
/// own status report (`status.sluice.dev/<cluster>`), its MCS import report
/// (`imports.sluice.dev/<cluster>`) and its finalizer (`syncer.sluice.dev/<cluster>`) —
/// not the spec, not labels, not another cluster's reports. `Err` says what else changed.
pub fn may_change(
    cluster: &ClusterName,
    group: &str,
    resource: &str,
    old: &Value,
    new: &Value,
) -> Result<(), String> {
    let own_pod =
        |o: &Value| o["metadata"]["labels"][LABEL_CLUSTER].as_str() == Some(cluster.as_str());
    if sluice_api::synced_kinds::is_mirrored_resource(group, resource)
        && own_pod(old)
        && own_pod(new)
    {
        return Ok(());
    }
    if (group.is_empty() && resource == "events")
        || (group == "coordination.k8s.io" && resource == "leases")
    {
        return Ok(());
    }
    let own_keys = [
        format!("{STATUS_ANNOTATION_PREFIX}{cluster}"),
        format!("{IMPORTS_ANNOTATION_PREFIX}{cluster}"),
    ];
    let own_finalizer = format!("{SYNC_FINALIZER_PREFIX}{cluster}");
    let strip = |o: &Value| {
        let mut o = o.clone();
        if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
            for k in ["managedFields", "resourceVersion", "generation"] {
                meta.remove(k);
            }
            if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
                for k in &own_keys {
                    a.remove(k);
                }
                if a.is_empty() {
                    meta.remove("annotations");
                }
            }
            if let Some(f) = meta.get_mut("finalizers").and_then(Value::as_array_mut) {
                f.retain(|v| v.as_str() != Some(own_finalizer.as_str()));
                if f.is_empty() {
                    meta.remove("finalizers");
                }
            }
        }
        o
    };
    let (old, new) = (strip(old), strip(new));
    if old == new {
        return Ok(());
    }
    let what = ["metadata", "spec", "status", "data", "stringData"]
        .into_iter()
        .find(|k| old.get(*k) != new.get(*k))
        .unwrap_or("the object");
    Err(format!(
        "the syncer of cluster {cluster} may change only its own status report, import report and finalizer here, not {what}"
    ))
}

/// Whether the syncer of `cluster` may create `obj` of `resource`: Events, its heartbeat
/// Lease (which one, [`decide`] checked), and Pods only as its own mirrors.
pub fn may_create(
    cluster: &ClusterName,
    group: &str,
    resource: &str,
    obj: &Value,
) -> Result<(), String> {
    match (group, resource) {
        ("", "events") | ("coordination.k8s.io", "leases") => Ok(()),
        _ if sluice_api::synced_kinds::is_mirrored_resource(group, resource)
            && obj["metadata"]["labels"][LABEL_CLUSTER].as_str() == Some(cluster.as_str()) =>
        {
            Ok(())
        }
        _ => Err(format!(
            "the syncer of cluster {cluster} creates only Events, its Lease and its own Pod and claim mirrors (label {LABEL_CLUSTER}={cluster})"
        )),
    }
}
