//! What the page may ask for, done with the kubeconfig's identity and nothing more: move a
//! namespace (its `sluice.dev/cluster` label, as `kubectl label` does), cordon, drain or
//! uncordon a cluster (its spec, as `sluice drain` does). The API server decides; its
//! refusal goes back to the page with its code and words.

use serde::Deserialize;
use serde_json::json;
use sluice_api::logical_cluster::is_dns_label;
use sluice_api::sync::LABEL_CLUSTER;
use sluice_api::{ClusterName, LogicalClusterPath};
use sluice_kube::Roots;

/// An action as the page sends it (JSON).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(tag = "action", rename_all = "camelCase", deny_unknown_fields)]
pub enum Action {
    /// Pin `namespace` of `logicalCluster` to `cluster`.
    #[serde(rename_all = "camelCase")]
    Move {
        logical_cluster: String,
        namespace: String,
        cluster: String,
    },
    Cordon {
        cluster: String,
    },
    Drain {
        cluster: String,
    },
    Uncordon {
        cluster: String,
    },
}

impl Action {
    /// Its name, for metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Move { .. } => "move",
            Action::Cordon { .. } => "cordon",
            Action::Drain { .. } => "drain",
            Action::Uncordon { .. } => "uncordon",
        }
    }
}

/// Why an action was not done.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    /// The request itself is wrong (422).
    #[error("{0}")]
    Invalid(String),
    /// The API server refused: its code and message (403 for a user without rights).
    #[error("{message}")]
    Refused { code: u16, message: String },
    /// The API server could not be asked (502).
    #[error("{0}")]
    Unreachable(String),
}

impl ActionError {
    /// The HTTP status the page gets.
    pub fn code(&self) -> u16 {
        match self {
            ActionError::Invalid(_) => 422,
            ActionError::Refused { code, .. } => *code,
            ActionError::Unreachable(_) => 502,
        }
    }
}

impl From<kube::Error> for ActionError {
    fn from(e: kube::Error) -> Self {
        match e {
            kube::Error::Api(s) => ActionError::Refused {
                code: s.code,
                message: s.message,
            },
            e => ActionError::Unreachable(e.to_string()),
        }
    }
}

fn cluster_name(c: &str) -> Result<ClusterName, ActionError> {
    if is_dns_label(c) {
        Ok(ClusterName::new(c))
    } else {
        Err(ActionError::Invalid(format!(
            "cluster {c:?}: must be a DNS label"
        )))
    }
}

/// Check the action's names before anything is asked of the server.
pub fn check(action: &Action) -> Result<(), ActionError> {
    match action {
        Action::Move {
            logical_cluster,
            namespace,
            cluster,
        } => {
            logical_cluster.parse::<LogicalClusterPath>().map_err(|e| {
                ActionError::Invalid(format!("logical cluster {logical_cluster:?}: {e}"))
            })?;
            if !is_dns_label(namespace) {
                return Err(ActionError::Invalid(format!(
                    "namespace {namespace:?}: must be a DNS label"
                )));
            }
            cluster_name(cluster).map(|_| ())
        }
        Action::Cordon { cluster } | Action::Drain { cluster } | Action::Uncordon { cluster } => {
            cluster_name(cluster).map(|_| ())
        }
    }
}

/// Do `action` as the kubeconfig's identity; what was done, in words.
pub async fn perform(roots: &Roots, action: &Action) -> Result<String, ActionError> {
    check(action)?;
    let unreachable = |e: sluice_kube::ClientError| ActionError::Unreachable(e.to_string());
    match action {
        Action::Move {
            logical_cluster,
            namespace,
            cluster,
        } => {
            let client = roots
                .at(&format!("/clusters/{logical_cluster}"))
                .map_err(unreachable)?;
            let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
            let patch = json!({"metadata": {"labels": {LABEL_CLUSTER: cluster}}});
            api.patch(
                namespace,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await?;
            Ok(format!(
                "namespace {namespace} of {logical_cluster} is to run on {cluster}"
            ))
        }
        Action::Cordon { cluster } | Action::Drain { cluster } | Action::Uncordon { cluster } => {
            let name = cluster_name(cluster)?;
            let (cordon, drain, said) = match action {
                Action::Cordon { .. } => (true, false, "cordoned"),
                Action::Drain { .. } => (true, true, "cordoned and draining"),
                _ => (false, false, "uncordoned"),
            };
            sluice_placement::drain::set(roots, &name, cordon, drain)
                .await
                .map_err(|e| match e {
                    sluice_placement::drain::DrainError::Api(e) => e.into(),
                    sluice_placement::drain::DrainError::NotFound(c) => ActionError::Refused {
                        code: 404,
                        message: format!("cluster {c:?} does not exist"),
                    },
                    e => ActionError::Unreachable(e.to_string()),
                })?;
            Ok(format!("cluster {cluster} {said}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_parse_and_names_are_checked() {
        let a: Action = serde_json::from_str(
            r#"{"action":"move","logicalCluster":"root:shop","namespace":"web","cluster":"west"}"#,
        )
        .expect("a move");
        assert!(check(&a).is_ok());
        assert_eq!(a.name(), "move");
        let d: Action =
            serde_json::from_str(r#"{"action":"drain","cluster":"east"}"#).expect("a drain");
        assert!(check(&d).is_ok());
        for bad in [
            r#"{"action":"move","logicalCluster":"root:Shop!","namespace":"web","cluster":"west"}"#,
            r#"{"action":"move","logicalCluster":"root","namespace":"ünï","cluster":"west"}"#,
            r#"{"action":"cordon","cluster":"a/b"}"#,
        ] {
            let a: Action = serde_json::from_str(bad).expect("parses");
            let e = check(&a).expect_err(bad);
            assert_eq!(e.code(), 422, "{bad}");
        }
        assert!(serde_json::from_str::<Action>(r#"{"action":"delete","cluster":"x"}"#).is_err());
        assert!(
            serde_json::from_str::<Action>(r#"{"action":"drain","cluster":"x","extra":1}"#)
                .is_err()
        );
    }
}
