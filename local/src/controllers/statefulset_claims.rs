//! A StatefulSet's claims, as kube's controller makes them: one per ordinal and
//! `volumeClaimTemplates` entry, named `<template>-<set>-<ordinal>`, made before the Pod
//! that mounts it and kept across that Pod's restarts, so an ordinal finds its own data
//! again. `persistentVolumeClaimRetentionPolicy` decides who owns a claim: with
//! `whenDeleted: Delete` the StatefulSet (the garbage collector takes the claims with the
//! set), with `whenScaled: Delete` the Pod of an ordinal scaled away (they go with it);
//! `Retain`, the default of both, leaves them for the next Pod of that ordinal.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sluice_api::statefulset::{claim_name, ordinal_claims as claims_of, owner, templates};

/// `spec` (a Pod's, from the set's template) with a volume per claim template, naming the
/// ordinal's claim (in place of a template volume of the same name, as kube does).
pub fn mount_claims(spec: &mut Value, sts: &Value, ordinal: usize) {
    let set = sts["metadata"]["name"].as_str().unwrap_or_default();
    let mut volumes: Vec<Value> = spec["volumes"].as_array().cloned().unwrap_or_default();
    for (name, _) in templates(sts) {
        volumes.retain(|v| v["name"].as_str() != Some(name));
        volumes.push(json!({"name": name,
            "persistentVolumeClaim": {"claimName": claim_name(name, set, ordinal)}}));
    }
    if !volumes.is_empty() {
        spec["volumes"] = Value::from(volumes);
    }
}

/// Make the ordinal's claims that are not there yet (one that is, is kept as it is).
pub async fn ensure(
    client: &kube::Client,
    ns: &str,
    sts: &Value,
    ordinal: usize,
) -> kube::Result<()> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    for claim in claims_of(sts, ordinal) {
        let Ok(claim) = serde_json::from_value::<PersistentVolumeClaim>(claim) else {
            continue;
        };
        match api.create(&PostParams::default(), &claim).await {
            Ok(_) => {}
            // There already (kept from before), or refused as the user wrote it (the Pod
            // then waits for its claim, with the reason on it).
            Err(kube::Error::Api(e)) => {
                tracing::debug!(namespace = %ns, claim = ?claim.metadata.name, error = %e.message, "claim not made");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// An ordinal scaled away under `whenScaled: Delete`: its claims are given to its Pod
/// (`pod`, `pod_uid`), so they go with it.
pub async fn condemn(
    client: &kube::Client,
    ns: &str,
    sts: &Value,
    ordinal: usize,
    pod: &str,
    pod_uid: &str,
) -> kube::Result<()> {
    if sts["spec"]["persistentVolumeClaimRetentionPolicy"]["whenScaled"] != "Delete" {
        return Ok(());
    }
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    for claim in claims_of(sts, ordinal) {
        let Some(name) = claim["metadata"]["name"].as_str() else {
            continue;
        };
        let Some(have) = api.get_opt(name).await? else {
            continue;
        };
        let mut owners = serde_json::to_value(have.metadata.owner_references.unwrap_or_default())
            .unwrap_or_else(|_| json!([]));
        let Some(list) = owners.as_array_mut() else {
            continue;
        };
        if list.iter().any(|o| o["uid"] == pod_uid) {
            continue;
        }
        list.push(owner("v1", "Pod", pod, pod_uid, false));
        let patch = json!({"metadata": {"ownerReferences": owners}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_ordinal_mounts_claims_of_its_own() {
        let sts = json!({"metadata": {"name": "db"},
            "spec": {"volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {}}]}});
        let mut spec = json!({"volumes": [{"name": "data", "emptyDir": {}}, {"name": "other", "emptyDir": {}}]});
        mount_claims(&mut spec, &sts, 2);
        assert_eq!(
            spec["volumes"],
            json!([{"name": "other", "emptyDir": {}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-db-2"}}])
        );
    }
}
