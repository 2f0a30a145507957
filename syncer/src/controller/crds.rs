//! Custom resource definitions marked syncable in any logical cluster: the cluster gets
//! each definition as it is now (applied again when it changes), and its kind joins the
//! kinds that travel.

use std::collections::HashMap;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::Value;
use sluice_api::LOGICAL_CLUSTER_ANNOTATION;
use sluice_api::sync::{FIELD_MANAGER, LABEL_SYNCED};
use sluice_api::synced_kinds::syncable_kind;

use super::state::Sides;
use super::watched::{Watched, crd_resource};

/// The resourceVersion of each definition last applied to the cluster, by logical cluster
/// and name.
#[derive(Default)]
pub struct Installed(HashMap<(String, String), String>);

/// What installing the definitions did.
pub struct Outcome {
    /// A kind joined (its informers started).
    pub new_kinds: bool,
    /// A definition could not be applied.
    pub failed: bool,
}

/// Apply every syncable definition not applied as it is now, and watch the kinds that are
/// new.
pub async fn install_all(s: &Sides, w: &mut Watched, installed: &mut Installed) -> Outcome {
    let mut out = Outcome {
        new_kinds: false,
        failed: false,
    };
    if !w.crds.is_ready() {
        return out;
    }
    for crd in w.crds.store.state() {
        let key = (
            crd.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(LOGICAL_CLUSTER_ANNOTATION))
                .cloned()
                .unwrap_or_default(),
            crd.metadata.name.clone().unwrap_or_default(),
        );
        let rv = crd.metadata.resource_version.clone().unwrap_or_default();
        if installed.0.get(&key) == Some(&rv) {
            continue;
        }
        let Ok(v) = serde_json::to_value(&*crd) else {
            continue;
        };
        let Some(kind) = syncable_kind(&v) else {
            continue;
        };
        // The cluster serves the kind before its objects are applied there.
        if !install(s, &v).await {
            out.failed = true;
            continue;
        }
        installed.0.insert(key, rv);
        if w.add_kind(kind) {
            tracing::info!(kind = kind.kind, group = kind.group, "custom kind syncable");
            out.new_kinds = true;
        }
    }
    out
}

/// Apply the syncable CustomResourceDefinition `crd` (from a logical cluster) to the
/// cluster, without taking fields over from another manager (a definition the cluster's
/// admin installed differently is left as it is, and the objects it refuses are reported);
/// false if that failed for another reason.
async fn install(s: &Sides, crd: &Value) -> bool {
    let Some(name) = crd["metadata"]["name"].as_str() else {
        return true;
    };
    let mut spec = crd["spec"].clone();
    if let Some(s) = spec.as_object_mut() {
        s.remove("conversion");
    }
    let want = serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name, "labels": {LABEL_SYNCED: "true"}},
        "spec": spec,
    });
    let api: Api<DynamicObject> = Api::all_with(s.config.downstream.clone(), &crd_resource());
    let written = api
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(&want),
        )
        .await;
    match written {
        Ok(_) => {
            s.syncer
                .metrics
                .write("CustomResourceDefinition", "apply", true);
            true
        }
        Err(kube::Error::Api(e)) if e.code == 409 => {
            tracing::warn!(crd = name, message = %e.message, "the cluster has its own definition of a syncable kind");
            true
        }
        Err(e) => {
            s.syncer
                .metrics
                .write("CustomResourceDefinition", "apply", false);
            tracing::warn!(crd = name, error = %e, "installing a syncable kind's definition failed");
            false
        }
    }
}
