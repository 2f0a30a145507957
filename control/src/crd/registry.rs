//! Per-logical-cluster catalogs: the built-ins, plus the types of that cluster's CRDs.
//! Clusters without CRDs share the built-in catalog and cost nothing here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use serde_json::Value;
use sluice_api::LogicalClusterPath;

use crate::catalog::Catalog;
use crate::resources::ResourceType;
use crate::storage::{ResourcePrefix, Store};

pub fn crd_prefix() -> ResourcePrefix {
    ResourcePrefix::new(super::CRD_GROUP, "customresourcedefinitions")
}

#[derive(Default)]
pub struct CrdRegistry {
    clusters: RwLock<HashMap<LogicalClusterPath, Arc<Catalog>>>,
    /// What a wildcard request (`/clusters/*`) is served: the built-ins and every custom
    /// type some logical cluster defines (the first definition by cluster path when several
    /// do), so a controller can watch a custom kind across logical clusters.
    wildcard: RwLock<Option<Arc<Catalog>>>,
    generation: AtomicU64,
}

impl CrdRegistry {
    pub fn catalog(&self, cluster: &LogicalClusterPath) -> Arc<Catalog> {
        self.clusters
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(cluster)
            .cloned()
            .unwrap_or_else(|| Catalog::builtin_arc().clone())
    }

    /// The types served to a wildcard request.
    pub fn wildcard(&self) -> Arc<Catalog> {
        self.wildcard
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_else(|| Catalog::builtin_arc().clone())
    }

    /// Recompute a cluster's catalog from the CRDs stored for it.
    pub fn rebuild(&self, store: &Store, cluster: &LogicalClusterPath) {
        let mut custom = Vec::new();
        store.scan(&crd_prefix().scope(Some(cluster), None), None, |_, e| {
            if let Ok(crd) = serde_json::from_slice::<Value>(&e.value) {
                if crate::object::is_deleting(&crd) && crate::object::finalizers(&crd) == 0 {
                    return true;
                }
                custom.extend(super::types_from_crd(&crd));
            }
            true
        });
        let mut clusters = self.clusters.write().unwrap_or_else(|p| p.into_inner());
        if custom.is_empty() {
            clusters.remove(cluster);
        } else {
            let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
            clusters.insert(
                cluster.clone(),
                Arc::new(Catalog::with_custom(custom, generation)),
            );
        }
        // The union, recomputed under the same lock so it never misses a rebuild.
        let mut paths: Vec<&LogicalClusterPath> = clusters.keys().collect();
        paths.sort();
        let builtin = Catalog::builtin().types().len();
        let mut union: Vec<Arc<ResourceType>> = Vec::new();
        for path in paths {
            for t in clusters[path].types().iter().skip(builtin) {
                let known = union.iter().any(|u| {
                    u.group == t.group && u.version == t.version && u.resource == t.resource
                });
                if !known {
                    union.push(t.clone());
                }
            }
        }
        let wildcard = (!union.is_empty()).then(|| {
            let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
            Arc::new(Catalog::with_custom(union, generation))
        });
        *self.wildcard.write().unwrap_or_else(|p| p.into_inner()) = wildcard;
    }

    /// Rebuild every cluster that holds CRDs (at start).
    pub fn rebuild_all(&self, store: &Store) {
        let mut clusters = std::collections::BTreeSet::new();
        store.scan(crd_prefix().as_str(), None, |k, _| {
            if let Some(c) = k
                .cluster()
                .and_then(|c| c.parse::<LogicalClusterPath>().ok())
            {
                clusters.insert(c);
            }
            true
        });
        for c in clusters {
            self.rebuild(store, &c);
        }
    }
}
