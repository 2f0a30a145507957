//! Schemas of the served types: generated from the k8s-openapi (and sluice-api) Rust types
//! through schemars, with the strategic-merge-patch facts overlaid from the table derived
//! from the Kubernetes OpenAPI document. One `SchemaSet` feeds the OpenAPI endpoints,
//! strict field validation and pruning, and the strategic merge patch engine.

pub mod fields;
pub mod gnostic;
pub mod openapi;
pub mod served;
pub mod swagger;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde_json::{Map, Value, json};

use crate::catalog::Catalog;
use crate::patch::meta_table::{LIST_META, PATCH_META};

const REF_PREFIX: &str = "#/components/schemas/";

/// Component schemas by definition name.
pub struct SchemaSet {
    pub components: BTreeMap<String, Value>,
}

impl SchemaSet {
    /// The schemas of the built-in catalog, built once.
    pub fn builtin() -> &'static SchemaSet {
        static SET: OnceLock<SchemaSet> = OnceLock::new();
        SET.get_or_init(|| SchemaSet::build(Catalog::builtin()))
    }

    pub fn build(catalog: &Catalog) -> Self {
        let mut generator = schemars::generate::SchemaSettings::openapi3().into_generator();
        for t in catalog.types() {
            if let crate::resources::SchemaKind::Builtin { generate, .. } = &t.schema {
                generate(&mut generator);
            }
        }
        let mut components: BTreeMap<String, Value> =
            generator.take_definitions(true).into_iter().collect();
        for (def, field, strategy, key) in PATCH_META {
            if let Some(prop) = components
                .get_mut(*def)
                .and_then(|d| d.get_mut("properties"))
                .and_then(|p| p.get_mut(*field))
                && let Some(obj) = prop.as_object_mut()
            {
                if !strategy.is_empty() {
                    obj.insert("x-kubernetes-patch-strategy".into(), json!(strategy));
                }
                if !key.is_empty() {
                    obj.insert("x-kubernetes-patch-merge-key".into(), json!(key));
                }
            }
        }
        for (def, field, list_type, keys) in LIST_META {
            if let Some(obj) = components
                .get_mut(*def)
                .and_then(|d| d.get_mut("properties"))
                .and_then(|p| p.get_mut(*field))
                .and_then(Value::as_object_mut)
            {
                obj.insert("x-kubernetes-list-type".into(), json!(list_type));
                if !keys.is_empty() {
                    obj.insert(
                        "x-kubernetes-list-map-keys".into(),
                        json!(keys.split(',').collect::<Vec<_>>()),
                    );
                }
            }
        }
        for t in catalog.types() {
            if let Some(obj) = components
                .get_mut(&t.definition)
                .and_then(Value::as_object_mut)
            {
                obj.insert(
                    "x-kubernetes-group-version-kind".into(),
                    json!([{"group": t.group, "kind": t.kind, "version": t.version}]),
                );
            }
        }
        components.insert(
            "io.k8s.apimachinery.pkg.apis.meta.v1.Patch".into(),
            json!({"description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body.", "type": "object"}),
        );
        Self { components }
    }

    /// Follow `$ref` and single-element `allOf` wrappers to the schema they name.
    pub fn resolve<'a>(&'a self, mut schema: &'a Value) -> &'a Value {
        for _ in 0..8 {
            if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
                match r
                    .strip_prefix(REF_PREFIX)
                    .and_then(|n| self.components.get(n))
                {
                    Some(s) => schema = s,
                    None => return schema,
                }
            } else if let Some([only]) = schema
                .get("allOf")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
            {
                schema = only;
            } else {
                return schema;
            }
        }
        schema
    }

    pub fn definition(&self, name: &str) -> Option<&Value> {
        self.components.get(name)
    }

    /// Every definition reachable from `roots`, for a per-group-version document.
    pub fn closure(&self, roots: &[&str]) -> Map<String, Value> {
        let mut out = Map::new();
        let mut stack: Vec<String> = roots.iter().map(|s| s.to_string()).collect();
        while let Some(name) = stack.pop() {
            if out.contains_key(&name) {
                continue;
            }
            let Some(schema) = self.components.get(&name) else {
                continue;
            };
            collect_refs(schema, &mut stack);
            out.insert(name, schema.clone());
        }
        out
    }
}

fn collect_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(r) = m
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix(REF_PREFIX))
            {
                out.push(r.to_string());
            }
            m.values().for_each(|c| collect_refs(c, out));
        }
        Value::Array(a) => a.iter().for_each(|c| collect_refs(c, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlays_patch_metadata_and_gvk() {
        let set = SchemaSet::builtin();
        let pod_spec = set
            .definition("io.k8s.api.core.v1.PodSpec")
            .expect("PodSpec");
        assert_eq!(
            pod_spec["properties"]["containers"]["x-kubernetes-patch-merge-key"],
            "name"
        );
        assert_eq!(
            pod_spec["properties"]["containers"]["x-kubernetes-patch-strategy"],
            "merge"
        );
        let container = set
            .definition("io.k8s.api.core.v1.Container")
            .expect("Container");
        assert_eq!(
            container["properties"]["ports"]["x-kubernetes-patch-merge-key"],
            "containerPort"
        );
        let d = set
            .definition("io.k8s.api.apps.v1.Deployment")
            .expect("Deployment");
        assert_eq!(
            d["x-kubernetes-group-version-kind"][0]["kind"],
            "Deployment"
        );
        let closure = set.closure(&["io.k8s.api.apps.v1.Deployment"]);
        assert!(closure.contains_key("io.k8s.api.core.v1.Container"));
        assert!(set.definition("dev.sluice.v1alpha1.Workspace").is_some());
    }

    /// Every fact of the derived table lands on a property that exists in our schemas:
    /// a table entry that does not apply would silently change patch semantics.
    #[test]
    fn patch_table_entries_apply() {
        let set = SchemaSet::builtin();
        let mut applied = 0;
        for (def, field, _, _) in PATCH_META {
            if let Some(d) = set.definition(def) {
                assert!(
                    d["properties"].get(*field).is_some(),
                    "{def}.{field} missing from generated schema"
                );
                applied += 1;
            }
        }
        assert!(applied >= 20, "only {applied} patch facts applied");
    }
}
