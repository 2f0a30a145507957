//! On each placed upstream namespace, what this cluster's MCS imports hold for it
//! ([`crate::imports`]) and its dataplane's traffic to draining sources, where that
//! changed: a move waits on these reports.

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams};
use sluice_api::LogicalClusterPath;
use sluice_api::sync::imports_annotation;

use super::state::Sides;
use super::watched::{Watched, placed_anywhere};

/// Report the imports of downstream namespace `down_ns` on upstream namespace `source`;
/// false if the write failed.
pub async fn report_imports(
    s: &Sides,
    w: &Watched,
    down_ns: &str,
    source: Option<&(LogicalClusterPath, String)>,
) -> bool {
    if !w.imports.is_ready() || !w.logical_namespaces.is_ready() {
        return true;
    }
    let Some((path, up_ns)) = source else {
        return true;
    };
    let Some(ns) = w.logical_namespaces.get_in(path.as_str(), "", up_ns) else {
        return true;
    };
    if !placed_anywhere(&ns) {
        return true;
    }
    let key = imports_annotation(&s.config.cluster);
    let dataplane = w
        .namespaces
        .get("", down_ns)
        .map(|n| crate::imports::Dataplane::of(&n))
        .unwrap_or_default();
    let want = crate::imports::annotation_value(&crate::imports::report(
        &w.imports.store.in_namespace("", down_ns),
        &dataplane,
    ));
    let have = ns.metadata.annotations.as_ref().and_then(|a| a.get(&key));
    if have == want.as_ref() {
        return true;
    }
    let Ok(client) = s.upstream.at(path) else {
        return true;
    };
    let api: Api<Namespace> = Api::all(client);
    let patch = serde_json::json!({"metadata": {"annotations": {&key: want}}});
    let written = api
        .patch(up_ns, &PatchParams::default(), &Patch::Merge(&patch))
        .await;
    s.syncer
        .metrics
        .write("Namespace", "report", written.is_ok());
    match written {
        Ok(_) => true,
        Err(kube::Error::Api(e)) if e.code == 404 => true,
        Err(e) => {
            tracing::warn!(namespace = %up_ns, error = %e, "reporting imports failed");
            false
        }
    }
}
