//! ReplicaSets, and their predecessor ReplicationControllers (the same job with an
//! equality selector, still in older manifests): as many active Pods from the template as
//! `spec.replicas` asks.

use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use sluice_kube::events::{EventType, Recorder, Regarding};

use super::shared::{Caches, Expectations, owned_by, value};
use crate::pod_state::{pod_active, pod_ready};

/// The key of a ReplicaSet's (or ReplicationController's) expectation.
pub fn expectation_key(kind: &str, ns: &str, name: &str) -> String {
    format!("{kind}/{ns}/{name}")
}

/// Reconcile one ReplicaSet or ReplicationController.
pub async fn reconcile<K>(
    client: &kube::Client,
    caches: &Caches,
    rs: &K,
    expect: &mut Expectations,
    events: &Recorder,
) -> kube::Result<()>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let meta = rs.meta();
    let ns = meta.namespace.clone().unwrap_or_default();
    let name = meta.name.clone().unwrap_or_default();
    let uid = meta.uid.clone().unwrap_or_default();
    let (owner_api_version, owner_kind) = (K::api_version(&()), K::kind(&()));
    let v = value(rs);
    let desired = v["spec"]["replicas"].as_i64().unwrap_or(1).max(0) as usize;
    let mut pods: Vec<std::sync::Arc<Pod>> = caches
        .pods
        .in_namespace("", &ns)
        .into_iter()
        .filter(|p| owned_by(&p.metadata, &uid))
        .collect();
    pods.retain(|p| pod_active(p));
    let key = expectation_key(owner_kind.as_ref(), &ns, &name);
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    if pods.len() != desired && !expect.pending(&key) {
        if pods.len() < desired {
            for _ in pods.len()..desired {
                let template = &v["spec"]["template"];
                let pod: Pod = serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {
                        "generateName": format!("{name}-"),
                        "labels": template["metadata"]["labels"],
                        "annotations": template["metadata"]["annotations"],
                        "ownerReferences": [{"apiVersion": owner_api_version, "kind": owner_kind, "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true}],
                    },
                    "spec": template["spec"],
                }))
                .unwrap_or_default();
                let made = pod_api.create(&PostParams::default(), &pod).await?;
                let message = format!(
                    "Created pod: {}",
                    made.metadata.name.as_deref().unwrap_or("")
                );
                events
                    .record(
                        &Regarding::of(rs),
                        EventType::Normal,
                        "SuccessfulCreate",
                        &message,
                    )
                    .await;
            }
        } else {
            // Not-ready Pods go first, then the newest.
            pods.sort_by_key(|p| {
                (
                    pod_ready(p),
                    std::cmp::Reverse(p.metadata.creation_timestamp.as_ref().map(|t| t.0)),
                )
            });
            for p in pods.iter().take(pods.len() - desired) {
                let pod_name = p.metadata.name.as_deref().unwrap_or("");
                if pod_api
                    .delete(pod_name, &DeleteParams::default())
                    .await
                    .is_ok()
                {
                    let message = format!("Deleted pod: {pod_name}");
                    events
                        .record(
                            &Regarding::of(rs),
                            EventType::Normal,
                            "SuccessfulDelete",
                            &message,
                        )
                        .await;
                }
            }
        }
        expect.expect(&key);
    } else if pods.len() == desired {
        expect.satisfied(&key);
    }
    let ready = pods.iter().filter(|p| pod_ready(p)).count();
    let status = json!({
        "replicas": pods.len(),
        "fullyLabeledReplicas": pods.len(),
        "readyReplicas": ready,
        "availableReplicas": ready,
        "observedGeneration": meta.generation,
    });
    if v["status"]["replicas"] != status["replicas"]
        || v["status"]["readyReplicas"].as_u64().unwrap_or(0) != ready as u64
        || v["status"]["observedGeneration"] != status["observedGeneration"]
    {
        Api::<K>::namespaced(client.clone(), &ns)
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await?;
    }
    Ok(())
}
