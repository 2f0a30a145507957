//! Deployments: one ReplicaSet per Pod template (named by the template's hash), rolled
//! from old to new within `maxSurge` and `maxUnavailable` (or `Recreate`), with the status
//! fields and conditions `kubectl rollout status` reads.

use std::hash::{Hash, Hasher};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sluice_kube::events::{EventType, Recorder, Regarding};

use super::shared::{Caches, owned_by, value};

/// kube's label naming the template a ReplicaSet runs.
pub const HASH_LABEL: &str = "pod-template-hash";

fn template_hash(template: &Value) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    template.to_string().hash(&mut h);
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut n = h.finish();
    (0..10)
        .map(|_| {
            let c = ALPHABET[(n % ALPHABET.len() as u64) as usize] as char;
            n /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

/// `maxSurge`/`maxUnavailable`: an integer or a percentage of `replicas` (surge rounds up,
/// unavailable down).
fn resolve(v: &Value, replicas: i64, round_up: bool, default: &str) -> i64 {
    let v = if v.is_null() {
        json!(default)
    } else {
        v.clone()
    };
    match v {
        Value::Number(n) => n.as_i64().unwrap_or(0),
        Value::String(s) => {
            let pct: f64 = s.trim_end_matches('%').parse().unwrap_or(25.0);
            let x = pct * replicas as f64 / 100.0;
            (if round_up { x.ceil() } else { x.floor() }) as i64
        }
        _ => 0,
    }
}

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

/// Scale ReplicaSet `rs` to `replicas`, recorded on the Deployment as kube records it.
async fn scale(
    api: &Api<ReplicaSet>,
    rs: &Value,
    replicas: i64,
    (events, deployment): (&Recorder, &Regarding),
) -> kube::Result<()> {
    let name = rs["metadata"]["name"].as_str().unwrap_or("");
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": replicas}})),
    )
    .await?;
    let from = int(&rs["spec"]["replicas"]);
    let way = if replicas > from { "up" } else { "down" };
    let message = format!("Scaled {way} replica set {name} from {from} to {replicas}");
    events
        .record(deployment, EventType::Normal, "ScalingReplicaSet", &message)
        .await;
    Ok(())
}

/// Reconcile one Deployment.
pub async fn reconcile(
    client: &kube::Client,
    caches: &Caches,
    d: &Deployment,
    events: &Recorder,
) -> kube::Result<()> {
    let regarding = Regarding::of(d);
    let ev = (events, &regarding);
    let ns = d.metadata.namespace.clone().unwrap_or_default();
    let name = d.metadata.name.clone().unwrap_or_default();
    let uid = d.metadata.uid.clone().unwrap_or_default();
    let v = value(d);
    let desired = v["spec"]["replicas"].as_i64().unwrap_or(1).max(0);
    let template = &v["spec"]["template"];
    let hash = template_hash(template);
    let api: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    let owned: Vec<Value> = caches
        .replicasets
        .state()
        .iter()
        .filter(|rs| {
            rs.metadata.namespace.as_deref() == Some(ns.as_str()) && owned_by(&rs.metadata, &uid)
        })
        .map(|rs| value(&**rs))
        .collect();
    let new = owned
        .iter()
        .find(|rs| rs["metadata"]["labels"][HASH_LABEL] == hash.as_str())
        .cloned();
    let mut old: Vec<Value> = owned
        .iter()
        .filter(|rs| rs["metadata"]["labels"][HASH_LABEL] != hash.as_str())
        .cloned()
        .collect();
    old.sort_by_key(|rs| {
        rs["metadata"]["creationTimestamp"]
            .as_str()
            .map(str::to_string)
    });
    let revision = owned
        .iter()
        .filter_map(|rs| {
            rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
                .as_str()?
                .parse::<i64>()
                .ok()
        })
        .max()
        .unwrap_or(0);
    let recreate = v["spec"]["strategy"]["type"] == "Recreate";
    let old_replicas: i64 = old.iter().map(|rs| int(&rs["spec"]["replicas"])).sum();
    let Some(new) = new else {
        let mut labels = template["metadata"]["labels"].clone();
        labels[HASH_LABEL] = json!(hash);
        let mut selector = v["spec"]["selector"].clone();
        selector["matchLabels"][HASH_LABEL] = json!(hash);
        let mut t = template.clone();
        t["metadata"]["labels"] = labels.clone();
        let initial = if old_replicas == 0 { desired } else { 0 };
        let rs: ReplicaSet = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {
                "name": format!("{name}-{hash}"), "labels": labels,
                "annotations": {"deployment.kubernetes.io/revision": (revision + 1).to_string()},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true}],
            },
            "spec": {"replicas": initial, "minReadySeconds": v["spec"]["minReadySeconds"], "selector": selector, "template": t},
        }))
        .unwrap_or_default();
        match api.create(&PostParams::default(), &rs).await {
            Ok(_) => {
                let message = format!("Scaled up replica set {name}-{hash} from 0 to {initial}");
                events
                    .record(&regarding, EventType::Normal, "ScalingReplicaSet", &message)
                    .await;
            }
            Err(kube::Error::Api(_)) => {}
            Err(e) => return Err(e),
        }
        return Ok(());
    };
    let new_replicas = int(&new["spec"]["replicas"]);
    if recreate {
        if old_replicas > 0 {
            for rs in old.iter().filter(|rs| int(&rs["spec"]["replicas"]) > 0) {
                scale(&api, rs, 0, ev).await?;
            }
        } else if old.iter().all(|rs| int(&rs["status"]["replicas"]) == 0)
            && new_replicas != desired
        {
            scale(&api, &new, desired, ev).await?;
        }
    } else {
        let surge = resolve(
            &v["spec"]["strategy"]["rollingUpdate"]["maxSurge"],
            desired,
            true,
            "25%",
        );
        let mut unavailable = resolve(
            &v["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"],
            desired,
            false,
            "25%",
        );
        if surge == 0 && unavailable == 0 {
            unavailable = 1;
        }
        let total = new_replicas + old_replicas;
        if old_replicas == 0 && new_replicas != desired {
            scale(&api, &new, desired, ev).await?;
        } else if new_replicas < desired {
            let up = (desired + surge - total).min(desired - new_replicas);
            if up > 0 {
                scale(&api, &new, new_replicas + up, ev).await?;
            }
        }
        // Scale old ReplicaSets down only as far as availability allows.
        let available: i64 = owned
            .iter()
            .map(|rs| int(&rs["status"]["availableReplicas"]))
            .sum();
        let mut can_remove = available - (desired - unavailable);
        for rs in &old {
            let replicas = int(&rs["spec"]["replicas"]);
            if replicas == 0 {
                continue;
            }
            // Pods of an old ReplicaSet that are not available cost no availability.
            let unhealthy = (replicas - int(&rs["status"]["availableReplicas"])).max(0);
            let down = (unhealthy + can_remove.max(0)).min(replicas);
            if down > 0 {
                scale(&api, rs, replicas - down, ev).await?;
                can_remove -= (down - unhealthy).max(0);
            }
        }
    }
    // Status, from the ReplicaSets' status.
    let sum = |f: &str| -> i64 { owned.iter().map(|rs| int(&rs["status"][f])).sum() };
    let available = sum("availableReplicas");
    let updated = int(&new["status"]["replicas"]);
    let unavailable_allowed = if recreate {
        0
    } else {
        resolve(
            &v["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"],
            desired,
            false,
            "25%",
        )
    };
    let complete = updated == desired
        && int(&new["status"]["availableReplicas"]) == desired
        && sum("replicas") == desired;
    let now = sluice_kube::time::now_rfc3339();
    let condition = |ty: &str, ok: bool, reason: &str, message: String| json!({"type": ty, "status": if ok { "True" } else { "False" }, "reason": reason, "message": message, "lastUpdateTime": now, "lastTransitionTime": now});
    let status = json!({
        "observedGeneration": d.metadata.generation,
        "replicas": sum("replicas"),
        "updatedReplicas": updated,
        "readyReplicas": sum("readyReplicas"),
        "availableReplicas": available,
        "unavailableReplicas": (desired - available).max(0),
        "conditions": [
            condition("Available", available >= desired - unavailable_allowed, if available >= desired - unavailable_allowed { "MinimumReplicasAvailable" } else { "MinimumReplicasUnavailable" }, format!("{available} of {desired} replicas available")),
            condition("Progressing", true, if complete { "NewReplicaSetAvailable" } else { "ReplicaSetUpdated" }, format!("ReplicaSet \"{}\" {}", new["metadata"]["name"].as_str().unwrap_or(""), if complete { "has successfully progressed." } else { "is progressing." })),
        ],
    });
    let current = &v["status"];
    let same = [
        "observedGeneration",
        "replicas",
        "updatedReplicas",
        "readyReplicas",
        "availableReplicas",
        "unavailableReplicas",
    ]
    .iter()
    .all(|f| int(&current[*f]) == int(&status[*f]))
        && current["conditions"].as_array().map(|c| {
            c.iter()
                .map(|c| (c["type"].clone(), c["status"].clone(), c["reason"].clone()))
                .collect::<Vec<_>>()
        }) == status["conditions"].as_array().map(|c| {
            c.iter()
                .map(|c| (c["type"].clone(), c["status"].clone(), c["reason"].clone()))
                .collect::<Vec<_>>()
        });
    if !same {
        Api::<Deployment>::namespaced(client.clone(), &ns)
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn surge_and_unavailable() {
        assert_eq!(resolve(&json!("25%"), 3, true, "25%"), 1);
        assert_eq!(resolve(&json!("25%"), 3, false, "25%"), 0);
        assert_eq!(resolve(&Value::Null, 4, false, "25%"), 1);
        assert_eq!(resolve(&json!(2), 10, true, "25%"), 2);
        assert_ne!(
            template_hash(&json!({"a": 1})),
            template_hash(&json!({"a": 2}))
        );
        assert_eq!(template_hash(&json!({"a": 1})).len(), 10);
    }
}
