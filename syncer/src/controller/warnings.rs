//! Warning Events the syncer writes upstream: an object the cluster refused
//! (`SyncFailed`), and a namespace refused for naming a downstream namespace another holds
//! (`NamespaceConflict`).

use kube::api::{Api, ApiResource, DynamicObject};
use sluice_api::synced_kinds::SyncedKind;

use super::state::{Config, Upstream};
use crate::sources::Sources;
use crate::transform::Origin;

fn event_resource() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::Event>(&())
}

/// Tell each upstream namespace refused for naming a downstream namespace another holds:
/// a Warning Event `NamespaceConflict` on it, once. False if one could not be written.
pub async fn report_conflicts(config: &Config, upstream: &Upstream, sources: &Sources) -> bool {
    let mut ok = true;
    for c in sources.unreported() {
        let (path, ns) = &c.claimant;
        let Ok(client) = upstream.at(path) else {
            continue;
        };
        let message = format!(
            "namespace {ns} is not synced to cluster {}: its namespace there, {}, holds namespace {} of logical cluster {}",
            config.cluster, c.downstream, c.holder.1, c.holder.0
        );
        let regarding = crate::events::Regarding {
            api_version: "v1",
            kind: "Namespace",
            namespace: ns,
            name: ns,
            uid: None,
        };
        let event = crate::events::warning(&regarding, "NamespaceConflict", &message);
        let api: Api<DynamicObject> = Api::namespaced_with(client, ns, &event_resource());
        let written = match serde_json::from_value::<DynamicObject>(event) {
            Ok(obj) => api.create(&Default::default(), &obj).await.map(|_| ()),
            Err(_) => Ok(()),
        };
        match written {
            Ok(()) => sources.reported(c),
            Err(e) => {
                tracing::warn!(error = %e, namespace = %ns, "the namespace conflict was not recorded upstream");
                ok = false;
            }
        }
    }
    ok
}

/// Tell the logical cluster that this cluster refused `name` (of `kind`, from `origin`'s
/// namespace): a Warning Event `SyncFailed` on the object (best effort).
pub async fn refused(
    config: &Config,
    upstream: &Upstream,
    kind: &SyncedKind,
    origin: &Origin,
    name: &str,
    message: &str,
) {
    let Ok(client) = upstream.at(&origin.logical_cluster) else {
        return;
    };
    let api_version = kind.api_version();
    let regarding = crate::events::Regarding {
        api_version: &api_version,
        kind: kind.kind,
        namespace: &origin.namespace,
        name,
        uid: None,
    };
    let message = format!(
        "cluster {} refused the {}: {message}",
        config.cluster, kind.kind
    );
    let event = crate::events::warning(&regarding, "SyncFailed", &message);
    let api: Api<DynamicObject> =
        Api::namespaced_with(client, &origin.namespace, &event_resource());
    if let Ok(obj) = serde_json::from_value::<DynamicObject>(event)
        && let Err(e) = api.create(&Default::default(), &obj).await
    {
        tracing::debug!(error = %e, "the refusal was not recorded upstream");
    }
}
