//! StatefulSets: Pods `<name>-<ordinal>` with stable hostnames under the governing
//! Service, started in order (`OrderedReady`: each waits for the previous to be Running and
//! Ready) or all at once (`Parallel`), scaled down from the highest ordinal, and updated
//! from the highest ordinal down, one Pod at a time; each ordinal mounts claims of its own
//! ([`super::statefulset_claims`]). `spec.ordinals.start` (KEP-3335) shifts the ordinals the
//! set runs to `start..start+replicas`: Pods below it are scaled away like those above, so
//! two clusters can each run part of one set's ordinals while it moves between them.

use std::hash::{Hash, Hasher};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::shared::{Caches, Expectations, owned_by, value};
use super::statefulset_claims as claims;
use crate::pod_state::pod_ready;

pub const REVISION_LABEL: &str = "controller-revision-hash";

fn revision(template: &Value, name: &str) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    template.to_string().hash(&mut h);
    format!("{name}-{:x}", h.finish() & 0xffff_ffff)
}

fn ordinal(pod: &Pod, name: &str) -> Option<usize> {
    pod.metadata
        .name
        .as_deref()?
        .strip_prefix(&format!("{name}-"))?
        .parse()
        .ok()
}

use sluice_api::statefulset::ordinals;

/// The key of a StatefulSet's expectation.
pub fn expectation_key(ns: &str, name: &str) -> String {
    format!("sts/{ns}/{name}")
}

/// Reconcile one StatefulSet.
pub async fn reconcile(
    client: &kube::Client,
    caches: &Caches,
    sts: &StatefulSet,
    expect: &mut Expectations,
) -> kube::Result<()> {
    let ns = sts.metadata.namespace.clone().unwrap_or_default();
    let name = sts.metadata.name.clone().unwrap_or_default();
    let uid = sts.metadata.uid.clone().unwrap_or_default();
    let v = value(sts);
    let range = ordinals(&v);
    let desired = range.len();
    let parallel = v["spec"]["podManagementPolicy"] == "Parallel";
    let template = &v["spec"]["template"];
    let update_revision = revision(template, &name);
    let key = expectation_key(&ns, &name);
    let mut pods: Vec<(usize, std::sync::Arc<Pod>)> = caches
        .pods
        .state()
        .into_iter()
        .filter(|p| {
            p.metadata.namespace.as_deref() == Some(ns.as_str()) && owned_by(&p.metadata, &uid)
        })
        .filter_map(|p| Some((ordinal(&p, &name)?, p)))
        .collect();
    pods.sort_by_key(|(i, _)| *i);
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let healthy = |p: &Pod| p.metadata.deletion_timestamp.is_none() && pod_ready(p);
    if !expect.pending(&key) {
        let mut acted = false;
        // Create missing ordinals of the range, in order unless Parallel.
        for i in range.clone() {
            match pods.iter().find(|(o, _)| *o == i) {
                Some((_, p)) if healthy(p) => continue,
                Some(_) if !parallel => break,
                Some(_) => continue,
                None => {
                    let pod_name = format!("{name}-{i}");
                    let mut labels = template["metadata"]["labels"].clone();
                    labels["statefulset.kubernetes.io/pod-name"] = json!(pod_name);
                    labels["apps.kubernetes.io/pod-index"] = json!(i.to_string());
                    labels[REVISION_LABEL] = json!(update_revision);
                    // Its claims first: the Pod mounts them.
                    claims::ensure(client, &ns, &v, i).await?;
                    let mut spec = template["spec"].clone();
                    claims::mount_claims(&mut spec, &v, i);
                    spec["hostname"] = json!(pod_name);
                    if let Some(svc) = v["spec"]["serviceName"].as_str() {
                        spec["subdomain"] = json!(svc);
                    }
                    let pod: Pod = serde_json::from_value(json!({
                        "apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": pod_name, "labels": labels, "annotations": template["metadata"]["annotations"],
                            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true}]},
                        "spec": spec,
                    }))
                    .unwrap_or_default();
                    match api.create(&PostParams::default(), &pod).await {
                        Ok(_) | Err(kube::Error::Api(_)) => {}
                        Err(e) => return Err(e),
                    }
                    acted = true;
                    if !parallel {
                        break;
                    }
                }
            }
        }
        // Scale down from the highest ordinal outside the range, one at a time unless
        // Parallel.
        if !acted {
            for (i, p) in pods.iter().rev().filter(|(i, _)| !range.contains(i)) {
                if p.metadata.deletion_timestamp.is_none() {
                    let pod = p.metadata.name.as_deref().unwrap_or("");
                    let pod_uid = p.metadata.uid.as_deref().unwrap_or("");
                    claims::condemn(client, &ns, &v, *i, pod, pod_uid).await?;
                    let _ = api
                        .delete(
                            p.metadata.name.as_deref().unwrap_or(""),
                            &DeleteParams::default(),
                        )
                        .await;
                    acted = true;
                }
                if !parallel {
                    break;
                }
            }
        }
        // Roll Pods of an old revision, highest ordinal first, when all others are healthy.
        if !acted && v["spec"]["updateStrategy"]["type"] != "OnDelete" {
            let all_healthy = pods
                .iter()
                .filter(|(i, _)| range.contains(i))
                .all(|(_, p)| healthy(p))
                && pods.iter().filter(|(i, _)| range.contains(i)).count() >= desired;
            if all_healthy
                && let Some((_, p)) = pods.iter().rev().find(|(i, p)| {
                    range.contains(i)
                        && p.metadata
                            .labels
                            .as_ref()
                            .and_then(|l| l.get(REVISION_LABEL))
                            .map(String::as_str)
                            != Some(update_revision.as_str())
                })
            {
                let _ = api
                    .delete(
                        p.metadata.name.as_deref().unwrap_or(""),
                        &DeleteParams::default(),
                    )
                    .await;
                acted = true;
            }
        }
        if acted {
            expect.expect(&key);
        }
    }
    let active: Vec<&Pod> = pods
        .iter()
        .filter(|(i, p)| range.contains(i) && p.metadata.deletion_timestamp.is_none())
        .map(|(_, p)| &**p)
        .collect();
    let ready = active.iter().filter(|p| pod_ready(p)).count();
    let updated = active
        .iter()
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(REVISION_LABEL))
                .map(String::as_str)
                == Some(update_revision.as_str())
        })
        .count();
    let status = json!({
        "observedGeneration": sts.metadata.generation,
        "replicas": active.len(),
        "readyReplicas": ready,
        "availableReplicas": ready,
        "currentReplicas": updated,
        "updatedReplicas": updated,
        "currentRevision": update_revision,
        "updateRevision": update_revision,
    });
    let cur = &v["status"];
    let same = [
        "observedGeneration",
        "replicas",
        "readyReplicas",
        "updatedReplicas",
    ]
    .iter()
    .all(|f| cur[*f].as_i64().unwrap_or(0) == status[*f].as_i64().unwrap_or(0))
        && cur["updateRevision"] == status["updateRevision"];
    if !same {
        Api::<StatefulSet>::namespaced(client.clone(), &ns)
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await?;
    }
    Ok(())
}
