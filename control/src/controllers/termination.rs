//! Removal of what a terminating Namespace or Workspace holds, then of the container
//! itself: kube's namespace lifecycle, and its analogue for logical clusters.
//!
//! Driven by the store's watch of the container type, with a periodic re-check for
//! containers whose contents still wait on finalizers.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_api::LogicalClusterPath;
use tokio::sync::watch;

use crate::object;
use crate::pipeline::commit::{Writer, commit};
use crate::pipeline::delete as delete_object;
use crate::state::SharedState;
use crate::storage::{Expect, Key, Op, ResourcePrefix, Revision};

/// What is being terminated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Container {
    Namespace,
    Workspace,
    /// A CRD: its custom resources go first.
    CustomResourceDefinition,
}

impl Container {
    /// The controller's name, in logs.
    pub fn name(self) -> &'static str {
        match self {
            Container::Namespace => "namespace termination",
            Container::Workspace => "workspace termination",
            Container::CustomResourceDefinition => "CRD termination",
        }
    }

    fn prefix(self) -> ResourcePrefix {
        match self {
            Container::Namespace => ResourcePrefix::new("", "namespaces"),
            Container::Workspace => ResourcePrefix::new(sluice_api::sluice::GROUP, "workspaces"),
            Container::CustomResourceDefinition => crate::crd::registry::crd_prefix(),
        }
    }
}

const RECHECK: Duration = Duration::from_millis(250);
/// Contents are removed this long after the container was marked for deletion, so a
/// client deleting a manifest (namespace first, as `kubectl delete -f` does) still deletes
/// each object itself rather than racing the controller into NotFound errors.
const GRACE: Duration = Duration::from_secs(1);

/// Run until `shutdown` flips.
pub async fn run(state: SharedState, container: Container, mut shutdown: watch::Receiver<bool>) {
    let prefix = container.prefix();
    let mut pending: BTreeMap<Key, Instant> = BTreeMap::new();
    loop {
        let mut from = state.store.scan(prefix.as_str(), None, |k, e| {
            if serde_json::from_slice::<Value>(&e.value).is_ok_and(|v| object::is_deleting(&v)) {
                pending.entry(k.clone()).or_insert_with(Instant::now);
            }
            true
        });
        let Ok(mut sub) = state.store.watch(&prefix, from) else {
            tokio::time::sleep(RECHECK).await;
            continue;
        };
        let mut ticker = tokio::time::interval(RECHECK);
        loop {
            let keys: Vec<Key> = pending
                .iter()
                .filter(|(_, seen)| seen.elapsed() >= GRACE)
                .map(|(k, _)| k.clone())
                .collect();
            for key in keys {
                if terminate(&state, container, &key).await {
                    pending.remove(&key);
                }
            }
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = ticker.tick() => {}
                e = sub.next() => match e {
                    Ok(e) => {
                        from = Revision(from.0.max(e.revision.0));
                        if serde_json::from_slice::<Value>(&e.value).is_ok_and(|v| object::is_deleting(&v))
                            && e.kind != crate::storage::EventType::Deleted
                        {
                            pending.entry(e.key.clone()).or_insert_with(Instant::now);
                        }
                    }
                    Err(_) => break,
                },
            }
        }
        let _ = from;
    }
}

/// One pass: delete (or mark) the contents; remove the container once nothing is left.
/// Returns true when the container is gone.
async fn terminate(state: &SharedState, container: Container, key: &Key) -> bool {
    let Some(parts) = key.parts() else {
        return true;
    };
    let Ok(cluster) = parts.cluster.parse::<LogicalClusterPath>() else {
        return true;
    };
    let name = parts.name.to_string();
    // What to remove: (type, cluster, namespace) scopes.
    let (scope_cluster, namespace, types) = match container {
        Container::Namespace => {
            let types: Vec<_> = state
                .crds
                .catalog(&cluster)
                .types()
                .iter()
                .filter(|t| t.namespaced)
                .cloned()
                .collect();
            (cluster.clone(), Some(name.clone()), types)
        }
        Container::Workspace => match cluster.child(&name) {
            Ok(child) => {
                let types = state.crds.catalog(&child).types().to_vec();
                (child, None, types)
            }
            Err(_) => return true,
        },
        Container::CustomResourceDefinition => {
            let Some(crd) = state
                .store
                .get(key)
                .and_then(|e| serde_json::from_slice::<Value>(&e.value).ok())
            else {
                return true;
            };
            let types: Vec<_> = crate::crd::types_from_crd(&crd)
                .into_iter()
                .take(1)
                .collect();
            (cluster.clone(), None, types)
        }
    };
    let mut remaining = 0usize;
    for t in &types {
        let mut keys = Vec::new();
        state.store.scan(
            &t.prefix.scope(Some(&scope_cluster), namespace.as_deref()),
            None,
            |k, _| {
                keys.push(k.clone());
                true
            },
        );
        for k in keys {
            remaining += 1;
            let n = k.parts().map(|p| p.name.to_string()).unwrap_or_default();
            if let Err(e) = delete_object(state, t, &k, &n, &json!({}), false, None).await
                && !matches!(e, crate::errors::ApiError::NotFound { .. })
            {
                tracing::warn!(key = %k, error = %e, "terminating: delete failed");
            }
        }
    }
    if remaining > 0 {
        tracing::debug!(%key, remaining, "terminating: waiting for contents");
        return false;
    }
    let Some(entry) = state.store.get(key) else {
        return true;
    };
    match commit(
        &state.store,
        Writer::Termination,
        Op::Delete {
            key: key.clone(),
            expect: Expect::At(entry.revision),
        },
    )
    .await
    {
        Ok(_) => {
            tracing::info!(%key, "terminated");
            if container == Container::CustomResourceDefinition {
                state.crds.rebuild(&state.store, &cluster);
            }
            true
        }
        Err(_) => false,
    }
}
