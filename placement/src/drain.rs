//! Cordon, drain and uncordon a cluster as a client does it (`sluice drain`, `sluice
//! uncordon`): write the Cluster's spec, then read the progress the placement controller
//! reports — which namespaces still run there, and where each is in its move.

use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::core::DynamicObject;
use serde_json::json;
use sluice_api::ClusterName;
use sluice_api::sync::state_label;
use sluice_kube::Roots;

use crate::controller::{CONDITION_PLACED, dynamic};

/// Why a drain could not be started or followed.
#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    #[error("cluster {0:?} does not exist (kubectl get clusters lists them)")]
    NotFound(String),
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error(transparent)]
    Client(#[from] sluice_kube::ClientError),
}

fn clusters(roots: &Roots) -> Result<Api<DynamicObject>, DrainError> {
    Ok(Api::all_with(
        roots.at("/clusters/root")?,
        &dynamic("sluice.dev", "v1alpha1", "Cluster", "clusters"),
    ))
}

/// Set the cluster's cordon (`unschedulable`) and `drain`.
pub async fn set(
    roots: &Roots,
    cluster: &ClusterName,
    cordon: bool,
    drain: bool,
) -> Result<(), DrainError> {
    let patch = json!({"spec": {"unschedulable": cordon, "drain": drain}});
    match clusters(roots)?
        .patch(
            cluster.as_str(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Err(DrainError::NotFound(cluster.to_string())),
        Err(e) => Err(e.into()),
    }
}

/// A namespace that still runs on the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Left {
    /// `<logical cluster>/<namespace>`.
    pub namespace: String,
    /// Its `Placed` condition's reason (`Moving`, `DrainQueued`, ...).
    pub phase: String,
    pub message: String,
}

/// The namespaces that still run on `cluster`, across every logical cluster.
pub async fn left(roots: &Roots, cluster: &ClusterName) -> Result<Vec<Left>, DrainError> {
    let api: Api<DynamicObject> = Api::all_with(
        roots.at("/clusters/*")?,
        &dynamic("", "v1", "Namespace", "namespaces"),
    );
    let list = api
        .list(&ListParams::default().labels(&state_label(cluster)))
        .await?;
    Ok(list
        .items
        .iter()
        .map(|ns| {
            let path = ns
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(sluice_api::LOGICAL_CLUSTER_ANNOTATION))
                .cloned()
                .unwrap_or_default();
            let placed = ns.data["status"]["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == CONDITION_PLACED));
            let field = |f: &str| {
                placed
                    .and_then(|c| c[f].as_str())
                    .unwrap_or_default()
                    .to_string()
            };
            Left {
                namespace: format!("{path}/{}", ns.metadata.name.clone().unwrap_or_default()),
                phase: field("reason"),
                message: field("message"),
            }
        })
        .collect())
}
