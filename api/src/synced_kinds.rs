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

/// The label selector of the upstream Pods that travel: not the syncers' mirrors, which
/// carry [`crate::sync::LABEL_CLUSTER`].
pub const NOT_MIRRORED: &str = "!sluice.dev/cluster";

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
        )
    }

    /// The label selector that picks, of this kind's upstream objects, those that travel
    /// (the Pods users made, not the mirrors); `None` when all of them do.
    pub fn upstream_selector(&self) -> Option<&'static str> {
        (self.group.is_empty() && self.kind == "Pod").then_some(NOT_MIRRORED)
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
        let deployment = BUILTIN.iter().find(|k| k.kind == "Deployment").unwrap();
        assert!(!deployment.is_mirror(mirror.iter()));
        assert_eq!(deployment.upstream_selector(), None);
    }
}
