//! What placement keeps of the objects it watches, and how it reads them: each informer
//! trims its objects to what the decisions read, so a fleet costs placement little memory.

use std::collections::BTreeMap;

use kube::api::{ApiResource, DynamicObject};
use serde_json::Value;
use sluice_api::synced_kinds::SyncedKind;
use sluice_api::{LOGICAL_CLUSTER_ANNOTATION, LogicalClusterPath};
use sluice_kube::selector::Selector;

/// Namespaces that are never placed: each cluster has its own.
pub(crate) const SYSTEM_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];

/// The label selector of the namespaces placement watches: not the system ones, which
/// every logical cluster has (by the label kube keeps equal to a namespace's name).
pub(crate) static PLACEABLE_NAMESPACES: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| {
        format!(
            "kubernetes.io/metadata.name notin ({})",
            SYSTEM_NAMESPACES.join(",")
        )
    });

/// The `ApiResource` of a kind known by name.
pub(crate) fn dynamic(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: if group.is_empty() {
            version.into()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// The kinds placement reads: workloads (their demand, readiness and status) and Services
/// (the endpoints a move waits for). The other kinds that travel follow their namespace in
/// the API server; a Secret never reaches placement's memory.
pub(crate) fn decided_on(kind: &SyncedKind) -> bool {
    crate::demand::runs_pods(kind.kind) || (kind.group.is_empty() && kind.kind == "Service")
}

/// What placement never reads and costs the most to keep: kubectl's copy of what was
/// applied (as large as the object) and the field managers' sets (`managedFields`, a JSON
/// tree per manager; most of a small object's metadata).
pub(crate) fn without_last_applied(o: &mut DynamicObject) {
    if let Some(a) = o.metadata.annotations.as_mut() {
        a.remove(sluice_api::sync::LAST_APPLIED_ANNOTATION);
    }
    o.metadata.managed_fields = None;
}

/// What placement never reads of a namespace or Workspace's metadata (it writes them with
/// merge patches that name no version): each is a string per object.
fn without_identity(o: &mut DynamicObject) {
    without_last_applied(o);
    let m = &mut o.metadata;
    m.uid = None;
    m.resource_version = None;
    m.creation_timestamp = None;
    m.generation = None;
}

/// Drop `field` of `data` when it is an empty object (an empty map costs nothing; a map
/// holding one costs a node).
fn drop_empty(data: &mut serde_json::Map<String, Value>, field: &str) {
    if data
        .get(field)
        .is_some_and(|v| v.as_object().is_some_and(serde_json::Map::is_empty) || v.is_null())
    {
        data.remove(field);
    }
}

/// What placement reads of a namespace: its labels, annotations, deletion and conditions;
/// not its spec (the `kubernetes` finalizer), its phase, nor who it is.
pub(crate) fn namespace_view(o: &mut DynamicObject) {
    without_identity(o);
    // The label kube keeps equal to the name: put back by [`namespace_labels`].
    if let Some(l) = o.metadata.labels.as_mut() {
        l.remove(NAME_LABEL);
        if l.is_empty() {
            o.metadata.labels = None;
        }
    }
    if let Some(data) = o.data.as_object_mut() {
        data.remove("spec");
        if let Some(status) = data.get_mut("status").and_then(Value::as_object_mut) {
            status.remove("phase");
        }
        drop_empty(data, "status");
    }
}

/// What placement reads of a Workspace: its policy (`spec`), under its logical cluster.
pub(crate) fn workspace_view(o: &mut DynamicObject) {
    without_identity(o);
    if let Some(data) = o.data.as_object_mut() {
        data.retain(|k, _| k == "spec");
        drop_empty(data, "spec");
    }
    if let Some(l) = &o.metadata.labels
        && l.is_empty()
    {
        o.metadata.labels = None;
    }
    if let Some(a) = o.metadata.annotations.as_mut() {
        a.retain(|k, _| k == LOGICAL_CLUSTER_ANNOTATION);
    }
}

/// What placement reads of a Pod mirror: who reported it (a label) and its finalizers.
pub(crate) fn metadata_only(o: &mut DynamicObject) {
    without_last_applied(o);
    o.data = Value::Object(serde_json::Map::new());
}

/// The logical cluster an object read through the wildcard belongs to.
pub(crate) fn path_of(o: &DynamicObject) -> Option<LogicalClusterPath> {
    o.metadata
        .annotations
        .as_ref()?
        .get(LOGICAL_CLUSTER_ANNOTATION)?
        .parse()
        .ok()
}

pub(crate) fn labels_of(o: &DynamicObject) -> BTreeMap<String, String> {
    o.metadata.labels.clone().unwrap_or_default()
}

/// The label kube keeps on every namespace, equal to its name (a Placement may select by it).
const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// A cached namespace's labels, with the name label [`namespace_view`] left out.
pub(crate) fn namespace_labels(o: &DynamicObject) -> BTreeMap<String, String> {
    let mut labels = labels_of(o);
    if let Some(name) = &o.metadata.name {
        labels.insert(NAME_LABEL.to_string(), name.clone());
    }
    labels
}

/// A `metav1.LabelSelector` as JSON; unset selects everything.
pub(crate) fn parse_selector(v: &Value) -> Result<Selector, sluice_kube::selector::SelectorError> {
    if v.is_null() {
        return Ok(Selector::default());
    }
    match serde_json::from_value(v.clone()) {
        Ok(s) => Selector::parse(&s),
        Err(e) => Err(sluice_kube::selector::SelectorError::Operator(
            0,
            format!("unreadable selector: {e}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use sluice_api::synced_kinds::BUILTIN;

    use super::*;

    #[test]
    fn cached_namespaces_and_workspaces_keep_what_placement_reads() {
        let mut ns: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "shop", "labels": {"state.sluice.dev/east": "Sync", "kubernetes.io/metadata.name": "shop"},
                "annotations": {"sluice.dev/logical-cluster": "root:a", "drained.sluice.dev/last": "x"}},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active", "conditions": [{"type": "Placed"}]}}))
        .unwrap();
        namespace_view(&mut ns);
        assert_eq!(
            ns.data,
            json!({"status": {"conditions": [{"type": "Placed"}]}})
        );
        let mut bare: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "app", "uid": "u", "resourceVersion": "5",
                "annotations": {"sluice.dev/logical-cluster": "root:a"}},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}))
        .unwrap();
        namespace_view(&mut bare);
        assert_eq!(bare.data, json!({}));
        assert_eq!(ns.metadata.labels.as_ref().map(BTreeMap::len), Some(1));
        assert_eq!(namespace_labels(&ns)[NAME_LABEL], "shop");
        assert_eq!(
            (bare.metadata.uid, bare.metadata.resource_version),
            (None, None)
        );
        assert_eq!(ns.metadata.annotations.as_ref().unwrap().len(), 2);
        let mut ws: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "Workspace",
            "metadata": {"name": "a", "annotations": {"sluice.dev/logical-cluster": "root",
                "other": "x"}},
            "spec": {"policy": {}}, "status": {"phase": "Ready"}}))
        .unwrap();
        workspace_view(&mut ws);
        assert_eq!(ws.data, json!({"spec": {"policy": {}}}));
        assert_eq!(path_of(&ws), Some(LogicalClusterPath::root()));
        assert_eq!(ws.metadata.annotations.as_ref().unwrap().len(), 1);
        assert!(PLACEABLE_NAMESPACES.contains("notin (kube-system,kube-public,kube-node-lease)"));
    }

    #[test]
    fn placement_reads_workloads_and_services_only() {
        let read: Vec<&str> = BUILTIN
            .iter()
            .filter(|k| decided_on(k))
            .map(|k| k.kind)
            .collect();
        assert!(read.contains(&"Deployment") && read.contains(&"Service"));
        for never in ["Secret", "ConfigMap", "ServiceAccount", "Ingress"] {
            assert!(!read.contains(&never), "{never}");
        }
    }
}
