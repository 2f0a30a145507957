//! The OpenAPI v2 (Swagger 2.0) document, derived from the v3 documents of the catalog:
//! parameters carry their type themselves, request bodies become `in: body` parameters,
//! responses name their schema directly, and what Swagger 2.0 cannot say (`nullable`,
//! `anyOf`, `oneOf`) is left out the way kube-apiserver's v2 document leaves it out.
//! Clients read it as JSON or, as kubectl does, in protobuf ([`super::gnostic`]).

use serde_json::{Map, Value, json};

use super::SchemaSet;
use super::openapi::v3_document;
use crate::catalog::Catalog;

const V3_REF: &str = "#/components/schemas/";
const V2_REF: &str = "#/definitions/";
const METHODS: [&str; 7] = ["get", "put", "post", "delete", "options", "head", "patch"];

/// The whole catalog's Swagger 2.0 document.
pub fn document(set: &SchemaSet, catalog: &Catalog) -> Value {
    let mut paths = Map::new();
    for (group, versions) in catalog.groups() {
        for version in versions {
            if let Some(doc) = v3_document(set, catalog, &group, &version)
                && let Some(p) = doc["paths"].as_object()
            {
                for (k, item) in p {
                    paths.insert(k.clone(), path_item(item));
                }
            }
        }
    }
    let definitions: Map<String, Value> = set
        .components
        .iter()
        .map(|(k, v)| (k.clone(), schema(v)))
        .collect();
    json!({
        "swagger": "2.0",
        "info": {"title": "Sluice", "version": env!("CARGO_PKG_VERSION")},
        "paths": paths,
        "definitions": definitions,
    })
}

fn path_item(item: &Value) -> Value {
    let mut out = Map::new();
    let Some(item) = item.as_object() else {
        return Value::Object(out);
    };
    for (k, v) in item {
        if METHODS.contains(&k.as_str()) {
            out.insert(k.clone(), operation(v));
        } else if k == "parameters" {
            out.insert(k.clone(), parameters(v, None));
        } else if k.starts_with("x-") {
            out.insert(k.clone(), v.clone());
        }
    }
    Value::Object(out)
}

fn operation(op: &Value) -> Value {
    let mut out = Map::new();
    let Some(op) = op.as_object() else {
        return Value::Object(out);
    };
    for (k, v) in op {
        match k.as_str() {
            "parameters" | "requestBody" => {}
            "responses" => {
                let (responses, produces) = responses(v);
                out.insert("responses".into(), responses);
                if !produces.is_empty() {
                    out.insert("produces".into(), json!(produces));
                }
            }
            "operationId" | "tags" | "summary" | "description" | "deprecated" => {
                out.insert(k.clone(), v.clone());
            }
            _ if k.starts_with("x-") => {
                out.insert(k.clone(), v.clone());
            }
            _ => {}
        }
    }
    let body = op.get("requestBody");
    if let Some(b) = body
        && let Some(content) = b["content"].as_object()
    {
        out.insert("consumes".into(), json!(content.keys().collect::<Vec<_>>()));
    }
    out.insert(
        "parameters".into(),
        parameters(op.get("parameters").unwrap_or(&Value::Null), body),
    );
    Value::Object(out)
}

/// v3 parameters with their type inline, and the request body as an `in: body` one.
fn parameters(params: &Value, body: Option<&Value>) -> Value {
    let mut out: Vec<Value> = params
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let mut q = Map::new();
            for k in ["name", "in", "description", "required"] {
                if let Some(v) = p.get(k) {
                    q.insert(k.into(), v.clone());
                }
            }
            if let Some(s) = p["schema"].as_object() {
                for (k, v) in s {
                    q.insert(k.clone(), v.clone());
                }
            }
            Value::Object(q)
        })
        .collect();
    if let Some(b) = body
        && let Some(s) = b["content"]
            .as_object()
            .and_then(|c| c.values().next())
            .map(|m| &m["schema"])
    {
        out.push(json!({
            "name": "body",
            "in": "body",
            "required": b["required"].as_bool().unwrap_or(false),
            "schema": schema(s),
        }));
    }
    Value::Array(out)
}

/// Responses with their schema inline; the media types they come in.
fn responses(r: &Value) -> (Value, Vec<String>) {
    let mut produces = Vec::new();
    let mut out = Map::new();
    for (code, resp) in r.as_object().into_iter().flatten() {
        let mut o = Map::new();
        o.insert(
            "description".into(),
            resp.get("description").cloned().unwrap_or(json!("")),
        );
        if let Some(content) = resp["content"].as_object() {
            for mime in content.keys() {
                if !produces.contains(mime) {
                    produces.push(mime.clone());
                }
            }
            if let Some(s) = content.values().next().map(|m| &m["schema"])
                && !s.is_null()
            {
                o.insert("schema".into(), schema(s));
            }
        }
        out.insert(code.clone(), Value::Object(o));
    }
    (Value::Object(out), produces)
}

/// A v3 schema as Swagger 2.0 says it.
fn schema(s: &Value) -> Value {
    let Some(o) = s.as_object() else {
        return s.clone();
    };
    let mut out = Map::new();
    for (k, v) in o {
        match k.as_str() {
            "nullable" | "anyOf" | "oneOf" | "not" => {}
            "$ref" => {
                out.insert(k.clone(), json!(v.as_str().map(v2_ref)));
            }
            "allOf" => match v.as_array().map(Vec::as_slice) {
                // `allOf: [{$ref}]` is how v3 gives a reference a description.
                Some([one]) if one.get("$ref").is_some() => {
                    out.insert("$ref".into(), json!(one["$ref"].as_str().map(v2_ref)));
                }
                _ => {
                    out.insert(
                        k.clone(),
                        json!(
                            v.as_array()
                                .into_iter()
                                .flatten()
                                .map(schema)
                                .collect::<Vec<_>>()
                        ),
                    );
                }
            },
            "properties" => {
                let props: Map<String, Value> = v
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(name, p)| (name.clone(), schema(p)))
                    .collect();
                out.insert(k.clone(), Value::Object(props));
            }
            "items" | "additionalProperties" if v.is_object() => {
                out.insert(k.clone(), schema(v));
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    // int-or-string: kube-apiserver's v2 says `type: string, format: int-or-string`.
    if o.get("x-kubernetes-int-or-string") == Some(&json!(true)) && !out.contains_key("type") {
        out.insert("type".into(), json!("string"));
        out.insert("format".into(), json!("int-or-string"));
    }
    Value::Object(out)
}

fn v2_ref(r: &str) -> String {
    match r.strip_prefix(V3_REF) {
        Some(name) => format!("{V2_REF}{name}"),
        None => r.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_is_swagger_2() {
        let doc = document(SchemaSet::builtin(), Catalog::builtin());
        assert_eq!(doc["swagger"], "2.0");
        let text = doc.to_string();
        assert!(
            !text.contains(V3_REF),
            "every reference points into definitions"
        );
        assert!(!text.contains("\"requestBody\""));
        let patch = &doc["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"]["kind"],
            "ConfigMap"
        );
        let params = patch["parameters"].as_array().expect("parameters");
        let fv = params
            .iter()
            .find(|p| p["name"] == "fieldValidation")
            .expect("fieldValidation");
        assert_eq!(fv["in"], "query");
        assert_eq!(fv["type"], "string");
        let body = params.iter().find(|p| p["in"] == "body").expect("body");
        assert_eq!(body["required"], true);
        let cm = &doc["definitions"]["io.k8s.api.core.v1.ConfigMap"];
        assert_eq!(
            cm["properties"]["metadata"]["$ref"],
            "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
        );
        assert_eq!(
            cm["x-kubernetes-group-version-kind"][0]["kind"],
            "ConfigMap"
        );
    }
}
