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

/// The kinds placement reads: workloads (their demand, readiness and status), Services
/// (the endpoints a move waits for) and PersistentVolumeClaims (their status, from where
/// they are bound). The other kinds that travel follow their namespace in the API server;
/// a Secret never reaches placement's memory.
pub(crate) fn decided_on(kind: &SyncedKind) -> bool {
    crate::demand::runs_pods(kind.kind)
        || (kind.group.is_empty() && matches!(kind.kind, "Service" | "PersistentVolumeClaim"))
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

/// Annotations a namespace carries that placement never reads: kept out of its view.
const UNREAD_ANNOTATIONS: [&str; 4] = [
    LOGICAL_CLUSTER_ANNOTATION,
    sluice_api::sync::LAST_APPLIED_ANNOTATION,
    sluice_api::sync::ANNOTATION_DOWNSTREAM_NAMESPACE,
    sluice_api::tenancy::POD_SECURITY_ANNOTATION,
];

/// A namespace as placement reads it: its labels, the annotations placement and the
/// syncers write, whether it is being deleted, and its conditions. Not its spec (the
/// `kubernetes` finalizer), phase, identity or managed fields: a fleet's namespaces cost
/// placement their names and what is placed.
#[derive(Debug)]
pub(crate) struct NamespaceView {
    pub path: LogicalClusterPath,
    pub name: String,
    /// Without the name label kube keeps equal to the name (put back by [`Self::labels`]).
    labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub deleting: bool,
    pub conditions: Vec<Value>,
}

impl NamespaceView {
    pub(crate) fn of(o: &DynamicObject) -> Self {
        // Collected, not cloned and then trimmed: a map emptied by `remove` keeps its
        // node (half a KiB), a map collected empty allocates nothing.
        let labels = o
            .metadata
            .labels
            .iter()
            .flatten()
            .filter(|(k, _)| k.as_str() != NAME_LABEL)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let annotations = o
            .metadata
            .annotations
            .iter()
            .flatten()
            .filter(|(k, _)| !UNREAD_ANNOTATIONS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Self {
            path: path_of(o).unwrap_or_else(LogicalClusterPath::root),
            name: o.metadata.name.clone().unwrap_or_default(),
            labels,
            annotations,
            deleting: o.metadata.deletion_timestamp.is_some(),
            conditions: o.data["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
        }
    }

    /// Its labels, with the name label (a Placement may select by it).
    pub(crate) fn labels(&self) -> BTreeMap<String, String> {
        let mut labels = self.labels.clone();
        labels.insert(NAME_LABEL.to_string(), self.name.clone());
        labels
    }

    /// The clusters it is placed on (its state labels).
    pub(crate) fn placed(&self) -> Vec<sluice_api::ClusterName> {
        sluice_api::sync::placed_clusters(self.labels.iter())
    }

    /// Its condition of `type`.
    pub(crate) fn condition(&self, kind: &str) -> Option<&Value> {
        self.conditions.iter().find(|c| c["type"] == kind)
    }
}

/// A Workspace as placement reads it: the logical cluster it makes and its policy.
#[derive(Debug)]
pub(crate) struct WorkspaceView {
    pub name: String,
    pub policy: Option<sluice_api::tenancy::WorkspacePolicy>,
}

impl WorkspaceView {
    pub(crate) fn of(o: &DynamicObject) -> Self {
        Self {
            name: o.metadata.name.clone().unwrap_or_default(),
            policy: crate::tenancy::policy_of(&o.data),
        }
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

/// The label kube keeps on every namespace, equal to its name.
const NAME_LABEL: &str = "kubernetes.io/metadata.name";

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
        let ns: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "shop", "uid": "u", "resourceVersion": "5",
                "labels": {"state.sluice.dev/east": "Sync", "kubernetes.io/metadata.name": "shop"},
                "annotations": {"sluice.dev/logical-cluster": "root:a", "drained.sluice.dev/last": "x",
                    "sluice.dev/downstream-namespace": "shop-x", "sluice.dev/pod-security": "baseline"}},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active", "conditions": [{"type": "Placed"}]}}))
        .unwrap();
        let v = NamespaceView::of(&ns);
        assert_eq!(v.path, "root:a".parse().unwrap());
        assert_eq!(v.labels.len(), 1, "the name label is not kept");
        assert_eq!(v.labels()[NAME_LABEL], "shop");
        assert_eq!(v.placed(), [sluice_api::ClusterName::new("east")]);
        assert_eq!(
            v.annotations.keys().collect::<Vec<_>>(),
            ["drained.sluice.dev/last"]
        );
        assert!(v.condition("Placed").is_some() && !v.deleting);
        let ws: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "Workspace",
            "metadata": {"name": "a", "annotations": {"sluice.dev/logical-cluster": "root"}},
            "spec": {"policy": {}}, "status": {"phase": "Ready"}}))
        .unwrap();
        let w = WorkspaceView::of(&ws);
        assert_eq!(w.name, "a");
        assert!(w.policy.is_some());
        assert!(PLACEABLE_NAMESPACES.contains("notin (kube-system,kube-public,kube-node-lease)"));
    }

    #[test]
    fn placement_reads_workloads_services_and_claims_only() {
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
