//! OpenAPI v3 documents per group-version, with the `fieldValidation` parameter and
//! `x-kubernetes-group-version-kind` that kubectl looks for (Swagger 2.0 is `swagger`).

use serde_json::{Map, Value, json};

use super::SchemaSet;
use crate::catalog::Catalog;
use crate::resources::{ResourceType, Subresource, gv_path};

const PATCH_TYPES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];

fn query_param(name: &str, ty: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": ty, "uniqueItems": true}})
}

fn write_params(with_force: bool) -> Vec<Value> {
    let mut p = vec![
        query_param(
            "dryRun",
            "string",
            "When present, indicates that modifications should not be persisted.",
        ),
        query_param(
            "fieldManager",
            "string",
            "fieldManager is a name associated with the actor or entity that is making these changes.",
        ),
        query_param(
            "fieldValidation",
            "string",
            "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields. Valid values are: Ignore, Warn (default) and Strict.",
        ),
    ];
    if with_force {
        p.push(query_param(
            "force",
            "boolean",
            "Force is going to \"force\" Apply requests.",
        ));
    }
    p
}

fn reference(def: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{def}")})
}

fn op(
    action: &str,
    t: &ResourceType,
    gvk: (&str, &str, &str),
    response_def: &str,
    body: Option<Value>,
    params: Vec<Value>,
) -> Value {
    let mut o = json!({
        "operationId": format!("{action}{}", t.kind),
        "tags": [t.gv_path()],
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": gvk.0, "version": gvk.1, "kind": gvk.2},
        "parameters": params,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": reference(response_def)}}}},
    });
    if let Some(b) = body {
        o["requestBody"] = b;
    }
    o
}

fn json_body(def: &str) -> Value {
    json!({"content": {"*/*": {"schema": reference(def)}}, "required": true})
}

/// Custom resources take no strategic merge patch, as in kube-apiserver.
fn patch_body(strategic: bool) -> Value {
    let content: Map<String, Value> = PATCH_TYPES
        .iter()
        .filter(|t| strategic || !t.starts_with("application/strategic"))
        .map(|t| {
            (
                t.to_string(),
                json!({"schema": reference("io.k8s.apimachinery.pkg.apis.meta.v1.Patch")}),
            )
        })
        .collect();
    json!({"content": content, "required": true})
}

fn item_ops(t: &ResourceType, gvk: (&str, &str, &str), def: &str) -> Value {
    json!({
        "get": op("get", t, gvk, def, None, vec![]),
        "put": op("put", t, gvk, def, Some(json_body(def)), write_params(false)),
        "patch": op("patch", t, gvk, def, Some(patch_body(t.custom().is_none())), write_params(true)),
        "delete": op("delete", t, gvk, "io.k8s.apimachinery.pkg.apis.meta.v1.Status", None, vec![query_param("dryRun", "string", "")]),
    })
}

/// Build the v3 document of one group-version.
pub fn v3_document(
    set: &SchemaSet,
    catalog: &Catalog,
    group: &str,
    version: &str,
) -> Option<Value> {
    let types: Vec<_> = catalog.in_group_version(group, version).collect();
    if types.is_empty() {
        return None;
    }
    let mut paths = Map::new();
    let mut custom = Map::new();
    let mut roots: Vec<&str> = vec![
        "io.k8s.apimachinery.pkg.apis.meta.v1.Patch",
        "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
    ];
    for t in &types {
        let gvk = (t.group.as_str(), t.version.as_str(), t.kind.as_str());
        let def = t.definition.as_str();
        match t.custom() {
            Some(c) => {
                custom.insert(
                    def.to_string(),
                    crate::crd::structural::openapi_component(
                        c.schema.as_ref(),
                        &t.group,
                        &t.version,
                        &t.kind,
                    ),
                );
                roots.push("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta");
            }
            None => roots.push(def),
        }
        let base = if t.namespaced {
            format!(
                "/{}/namespaces/{{namespace}}/{}",
                gv_path(group, version),
                t.resource
            )
        } else {
            format!("/{}/{}", gv_path(group, version), t.resource)
        };
        paths.insert(
            base.clone(),
            json!({
                "get": op("list", t, gvk, def, None, vec![]),
                "post": op("post", t, gvk, def, Some(json_body(def)), write_params(false)),
            }),
        );
        paths.insert(format!("{base}/{{name}}"), item_ops(t, gvk, def));
        if t.has(Subresource::Status) {
            paths.insert(format!("{base}/{{name}}/status"), item_ops(t, gvk, def));
        }
        if t.has(Subresource::Scale) {
            roots.push("io.k8s.api.autoscaling.v1.Scale");
            paths.insert(
                format!("{base}/{{name}}/scale"),
                item_ops(
                    t,
                    ("autoscaling", "v1", "Scale"),
                    "io.k8s.api.autoscaling.v1.Scale",
                ),
            );
        }
    }
    let mut schemas = set.closure(&roots);
    schemas.extend(custom);
    if roots.contains(&"io.k8s.api.autoscaling.v1.Scale")
        && !schemas.contains_key("io.k8s.api.autoscaling.v1.Scale")
    {
        schemas.insert("io.k8s.api.autoscaling.v1.Scale".into(), scale_schema());
    }
    if !schemas.contains_key("io.k8s.apimachinery.pkg.apis.meta.v1.Status") {
        schemas.insert(
            "io.k8s.apimachinery.pkg.apis.meta.v1.Status".into(),
            json!({"type": "object"}),
        );
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Sluice", "version": env!("CARGO_PKG_VERSION")},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

fn scale_schema() -> Value {
    json!({
        "type": "object",
        "x-kubernetes-group-version-kind": [{"group": "autoscaling", "kind": "Scale", "version": "v1"}],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}]},
            "spec": {"type": "object", "properties": {"replicas": {"type": "integer", "format": "int32"}}},
            "status": {"type": "object", "properties": {"replicas": {"type": "integer", "format": "int32"}, "selector": {"type": "string"}}},
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v3_has_field_validation_on_patch_with_gvk() {
        let set = SchemaSet::builtin();
        let doc = v3_document(set, Catalog::builtin(), "apps", "v1").expect("apps/v1");
        let item =
            &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert_eq!(
            item["x-kubernetes-group-version-kind"]["kind"],
            "Deployment"
        );
        assert!(
            item["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation" && p["in"] == "query")
        );
        assert!(
            item["requestBody"]["content"]
                .get("application/strategic-merge-patch+json")
                .is_some()
        );
        assert!(
            doc["components"]["schemas"]
                .get("io.k8s.api.core.v1.PodSpec")
                .is_some()
        );
        let core = v3_document(set, Catalog::builtin(), "", "v1").expect("v1");
        assert!(core["paths"].get("/api/v1/namespaces/{name}").is_some());
        assert!(v3_document(set, Catalog::builtin(), "nope", "v1").is_none());
    }
}
