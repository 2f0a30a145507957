//! What travels: the namespaced kinds a manifest holds for a workload, and the Pods users
//! create themselves (not the mirrors of the Pods a cluster's controllers made, which
//! travel the other way). Events, EndpointSlices and Leases do not travel (each cluster
//! makes its own). Shared by the syncer (what it copies), the placement controller (what it labels)
//! and the API server's admission hook (what keeps the state labels of its namespace).

/// A kind the syncer copies down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncedKind {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
}

const fn k(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
) -> SyncedKind {
    SyncedKind {
        group,
        version,
        kind,
        plural,
    }
}

/// The label selector of the upstream Pods and claims that travel: not the syncers'
/// mirrors, which carry [`crate::sync::LABEL_CLUSTER`].
pub const NOT_MIRRORED: &str = "!sluice.dev/cluster";

/// The core resources (plurals) a cluster makes objects of that its syncer mirrors up
/// into the logical cluster, read-only: Pods (made by the cluster's workload controllers)
/// and PersistentVolumeClaims (made by its StatefulSet controller from claim templates).
pub const MIRRORED_RESOURCES: [&str; 2] = ["pods", "persistentvolumeclaims"];

/// Whether `group`/`resource` is one of [`MIRRORED_RESOURCES`].
pub fn is_mirrored_resource(group: &str, resource: &str) -> bool {
    group.is_empty() && MIRRORED_RESOURCES.contains(&resource)
}

/// Label on a CustomResourceDefinition in a logical cluster: its custom resources travel
/// (namespaced ones: a cluster-scoped kind has no namespace to be placed with).
pub const SYNCABLE_LABEL: &str = "sluice.dev/syncable";

/// The kind a CustomResourceDefinition (as JSON) marked syncable defines, in its storage
/// version; `None` when it is not marked, not namespaced or incomplete.
pub fn syncable_kind(crd: &serde_json::Value) -> Option<&'static SyncedKind> {
    if crd["metadata"]["labels"][SYNCABLE_LABEL] != "true" || crd["spec"]["scope"] != "Namespaced" {
        return None;
    }
    let spec = &crd["spec"];
    let versions = spec["versions"].as_array()?;
    let version = versions
        .iter()
        .find(|v| v["storage"] == true)
        .or_else(|| versions.first())?["name"]
        .as_str()?;
    Some(custom(
        spec["group"].as_str()?,
        version,
        spec["names"]["kind"].as_str()?,
        spec["names"]["plural"].as_str()?,
    ))
}

/// The custom kind `group/version` `kind` (`plural`), made `'static` once per distinct kind,
/// so custom kinds are handled as the built-in ones are (the set is small and only grows).
pub fn custom(group: &str, version: &str, kind: &str, plural: &str) -> &'static SyncedKind {
    static CUSTOM: std::sync::Mutex<Vec<&'static SyncedKind>> = std::sync::Mutex::new(Vec::new());
    let mut all = CUSTOM.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(k) = all
        .iter()
        .find(|k| k.group == group && k.version == version && k.kind == kind && k.plural == plural)
    {
        return k;
    }
    let keep = |s: &str| -> &'static str { Box::leak(s.to_string().into_boxed_str()) };
    let k: &'static SyncedKind = Box::leak(Box::new(SyncedKind {
        group: keep(group),
        version: keep(version),
        kind: keep(kind),
        plural: keep(plural),
    }));
    all.push(k);
    k
}

/// Every built-in kind that travels.
pub const BUILTIN: &[SyncedKind] = &[
    k("", "v1", "Pod", "pods"),
    k("", "v1", "ConfigMap", "configmaps"),
    k("", "v1", "Secret", "secrets"),
    k("", "v1", "ServiceAccount", "serviceaccounts"),
    k("", "v1", "Service", "services"),
    k("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
    k("", "v1", "ReplicationController", "replicationcontrollers"),
    k("apps", "v1", "Deployment", "deployments"),
    k("apps", "v1", "StatefulSet", "statefulsets"),
    k("apps", "v1", "DaemonSet", "daemonsets"),
    k("apps", "v1", "ReplicaSet", "replicasets"),
    k("batch", "v1", "Job", "jobs"),
    k("batch", "v1", "CronJob", "cronjobs"),
    k("networking.k8s.io", "v1", "Ingress", "ingresses"),
    k(
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
    ),
    k(
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
    ),
    k(
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
    ),
    k(
        "multicluster.x-k8s.io",
        "v1beta1",
        "ServiceExport",
        "serviceexports",
    ),
];

impl SyncedKind {
    /// Whether the kind has a status the syncer reports back up (replica counts).
    pub fn reports_status(&self) -> bool {
        matches!(
            self.kind,
            "Deployment"
                | "StatefulSet"
                | "ReplicaSet"
                | "ReplicationController"
                | "DaemonSet"
                | "Job"
                | "Pod"
                | "PersistentVolumeClaim"
        )
    }

    /// The label selector that picks, of this kind's upstream objects, those that travel
    /// (the Pods and claims users made, not the mirrors); `None` when all of them do.
    pub fn upstream_selector(&self) -> Option<&'static str> {
        is_mirrored_resource(self.group, self.plural).then_some(NOT_MIRRORED)
    }

    /// Whether `labels` mark an upstream object of this kind as a mirror of a downstream
    /// one (which does not travel down again).
    pub fn is_mirror<'a>(&self, mut labels: impl Iterator<Item = &'a String>) -> bool {
        self.upstream_selector().is_some() && labels.any(|k| k == crate::sync::LABEL_CLUSTER)
    }

    /// The built-in kind served as `group`/`plural`.
    pub fn find(group: &str, plural: &str) -> Option<&'static SyncedKind> {
        BUILTIN
            .iter()
            .find(|k| k.group == group && k.plural == plural)
    }

    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_pods_users_made_travel() {
        assert_eq!(NOT_MIRRORED, format!("!{}", crate::sync::LABEL_CLUSTER));
        let pod = BUILTIN.iter().find(|k| k.kind == "Pod").unwrap();
        let mirror = [crate::sync::LABEL_CLUSTER.to_string()];
        assert!(pod.is_mirror(mirror.iter()));
        assert!(!pod.is_mirror(["app".to_string()].iter()));
        let claim = BUILTIN
            .iter()
            .find(|k| k.kind == "PersistentVolumeClaim")
            .unwrap();
        assert!(claim.is_mirror(mirror.iter()));
        assert_eq!(claim.upstream_selector(), Some(NOT_MIRRORED));
        let deployment = BUILTIN.iter().find(|k| k.kind == "Deployment").unwrap();
        assert!(!deployment.is_mirror(mirror.iter()));
        assert_eq!(deployment.upstream_selector(), None);
    }

    #[test]
    fn a_crd_marked_syncable_names_its_kind_once() {
        let crd = serde_json::json!({
            "metadata": {"name": "widgets.example.com", "labels": {"sluice.dev/syncable": "true"}},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"kind": "Widget", "plural": "widgets"},
                "versions": [{"name": "v1beta1", "storage": false}, {"name": "v1", "storage": true}]},
        });
        let k = syncable_kind(&crd).unwrap();
        assert_eq!(
            (k.group, k.version, k.kind, k.plural),
            ("example.com", "v1", "Widget", "widgets")
        );
        assert!(std::ptr::eq(k, syncable_kind(&crd).unwrap()), "made once");
        let mut unmarked = crd.clone();
        unmarked["metadata"]["labels"] = serde_json::json!({});
        assert!(syncable_kind(&unmarked).is_none());
        let mut cluster_scoped = crd;
        cluster_scoped["spec"]["scope"] = "Cluster".into();
        assert!(syncable_kind(&cluster_scoped).is_none());
    }
}
