//! The served documents, built on first use and kept: OpenAPI v3 per group-version with
//! its content hash, the v3 discovery root, and Swagger 2.0 as JSON and protobuf.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::SchemaSet;
use super::openapi::v3_document;
use crate::catalog::Catalog;
use crate::resources::gv_path;

/// A serialized document and its content hash.
type Document = (Bytes, String);

/// Serialized documents, built on first use and kept: they only change with the catalog.
#[derive(Default)]
pub struct OpenApiCache {
    /// Keyed by catalog generation (0 for built-in group-versions), group and version.
    v3: Mutex<HashMap<(u64, String, String), Option<Document>>>,
    /// The Swagger 2.0 document as JSON and in protobuf.
    v2: Mutex<Option<(Bytes, Bytes)>>,
}

fn hash_hex(b: &[u8]) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    b.hash(&mut h);
    format!("{:016X}", h.finish())
}

impl OpenApiCache {
    /// The document of a group-version and its content hash.
    pub fn v3(
        &self,
        set: &SchemaSet,
        catalog: &Catalog,
        group: &str,
        version: &str,
    ) -> Option<(Bytes, String)> {
        let generation = if catalog
            .in_group_version(group, version)
            .any(|t| t.custom().is_some())
        {
            catalog.generation
        } else {
            0
        };
        let mut cache = self.v3.lock().unwrap_or_else(|p| p.into_inner());
        if generation > 0 {
            cache
                .retain(|(g, gr, v), _| *g == 0 || *g == generation || gr != group || v != version);
        }
        let key = (generation, group.to_string(), version.to_string());
        if let Some(hit) = cache.get(&key) {
            return hit.clone();
        }
        // Only what exists is cached: a client naming group-versions at random must not
        // grow the cache.
        let doc = v3_document(set, catalog, group, version)?;
        let bytes = Bytes::from(serde_json::to_vec(&doc).ok()?);
        let hash = hash_hex(&bytes);
        let found = Some((bytes, hash));
        cache.insert(key, found.clone());
        found
    }

    /// The v3 discovery document: one entry per group-version with its URL and hash.
    pub fn v3_root(&self, set: &SchemaSet, catalog: &Catalog, prefix: &str) -> Value {
        let mut paths = Map::new();
        for (group, versions) in catalog.groups() {
            for version in versions {
                if let Some((_, hash)) = self.v3(set, catalog, &group, &version) {
                    let gv = gv_path(&group, &version);
                    paths.insert(gv.clone(), json!({"serverRelativeURL": format!("{prefix}/openapi/v3/{gv}?hash={hash}")}));
                }
            }
        }
        json!({"paths": paths})
    }

    /// The Swagger 2.0 document: JSON, or gnostic's protobuf when `protobuf`.
    pub fn v2(&self, set: &SchemaSet, catalog: &Catalog, protobuf: bool) -> Bytes {
        let mut cache = self.v2.lock().unwrap_or_else(|p| p.into_inner());
        let (json, proto) = cache.get_or_insert_with(|| {
            let doc = super::swagger::document(set, catalog);
            (
                Bytes::from(serde_json::to_vec(&doc).unwrap_or_default()),
                Bytes::from(super::gnostic::encode(&doc)),
            )
        });
        if protobuf {
            proto.clone()
        } else {
            json.clone()
        }
    }
}
