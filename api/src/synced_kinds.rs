//! What travels: the namespaced kinds a manifest holds for a workload. Pods do not travel
//! (their controllers do), nor do Events, EndpointSlices or Leases (each cluster makes its
//! own). Shared by the syncer (what it copies), the placement controller (what it labels)
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

/// Every built-in kind that travels.
pub const BUILTIN: &[SyncedKind] = &[
    k("", "v1", "ConfigMap", "configmaps"),
    k("", "v1", "Secret", "secrets"),
    k("", "v1", "ServiceAccount", "serviceaccounts"),
    k("", "v1", "Service", "services"),
    k("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
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
            "Deployment" | "StatefulSet" | "ReplicaSet" | "DaemonSet" | "Job"
        )
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
