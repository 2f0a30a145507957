//! Structural-schema semantics for custom resources: defaulting, pruning of unknown fields
//! (unless `x-kubernetes-preserve-unknown-fields`), and validation of types, `required`,
//! `enum`, bounds and patterns, with kube-apiserver's messages.

use serde_json::{Map, Value, json};

use crate::errors::Cause;

const MAX_DEPTH: usize = 64;

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn preserves(schema: &Value) -> bool {
    schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
        || schema.get("x-kubernetes-embedded-resource") == Some(&Value::Bool(true))
}

/// Fill in `default`s of missing properties, recursively.
pub fn apply_defaults(schema: &Value, value: &mut Value, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match value {
        Value::Object(map) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, sub) in props {
                    if !map.contains_key(k)
                        && let Some(d) = sub.get("default")
                    {
                        map.insert(k.clone(), d.clone());
                    }
                    if let Some(v) = map.get_mut(k) {
                        apply_defaults(sub, v, depth + 1);
                    }
                }
            } else if let Some(add) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for v in map.values_mut() {
                    apply_defaults(add, v, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = schema.get("items") {
                for v in items {
                    apply_defaults(item, v, depth + 1);
                }
            }
        }
        _ => {}
    }
}

/// Remove fields the schema does not declare; return their paths.
pub fn prune(
    schema: &Value,
    value: &mut Value,
    path: &str,
    unknown: &mut Vec<String>,
    depth: usize,
) {
    if depth > MAX_DEPTH || preserves(schema) {
        return;
    }
    match value {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let add = schema.get("additionalProperties");
            let mut remove = Vec::new();
            for (k, v) in map.iter_mut() {
                match (props.and_then(|p| p.get(k)), add) {
                    (Some(sub), _) => prune(sub, v, &join(path, k), unknown, depth + 1),
                    (None, Some(a)) if a.is_object() => {
                        prune(a, v, &join(path, k), unknown, depth + 1)
                    }
                    (None, Some(Value::Bool(true))) => {}
                    (None, _) => {
                        if props.is_some()
                            || schema.get("type").and_then(Value::as_str) == Some("object")
                        {
                            unknown.push(join(path, k));
                            remove.push(k.clone());
                        }
                    }
                }
            }
            for k in remove {
                map.remove(&k);
            }
        }
        Value::Array(items) => {
            if let Some(item) = schema.get("items") {
                for (i, v) in items.iter_mut().enumerate() {
                    prune(item, v, &format!("{path}[{i}]"), unknown, depth + 1);
                }
            }
        }
        _ => {}
    }
}

/// The schema type of a JSON value, as kube names it in causes.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        other => other.to_string(),
    }
}

/// Validate `value` against `schema`, adding causes.
pub fn validate(schema: &Value, value: &Value, path: &str, causes: &mut Vec<Cause>, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    let field = if path.is_empty() {
        "<root>".to_string()
    } else {
        path.to_string()
    };
    if value.is_null() {
        if schema.get("nullable") != Some(&Value::Bool(true)) && schema.get("type").is_some() {
            causes.push(Cause {
                reason: "FieldValueTypeInvalid",
                field: field.clone(),
                message: format!(
                    "Invalid value: \"null\": {field} in body must be of type {}: \"null\"",
                    schema["type"].as_str().unwrap_or("object")
                ),
            });
        }
        return;
    }
    let int_or_string = schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    if let Some(ty) = schema.get("type").and_then(Value::as_str) {
        let actual = type_name(value);
        let ok = actual == ty
            || (ty == "number" && actual == "integer")
            || (int_or_string && matches!(actual, "integer" | "string"));
        if !ok {
            causes.push(Cause {
                reason: "FieldValueTypeInvalid",
                field: field.clone(),
                message: format!(
                    "Invalid value: {}: {field} in body must be of type {ty}: \"{actual}\"",
                    shown(value)
                ),
            });
            return;
        }
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.contains(value)
    {
        let supported: Vec<String> = options.iter().map(|o| o.to_string()).collect();
        causes.push(Cause {
            reason: "FieldValueNotSupported",
            field: field.clone(),
            message: format!(
                "Unsupported value: {}: supported values: {}",
                value,
                supported.join(", ")
            ),
        });
    }
    if let Some(n) = value.as_f64() {
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
            && n < min
        {
            causes.push(Cause::invalid(
                field.clone(),
                &n.to_string(),
                format!("{field} in body should be greater than or equal to {min}"),
            ));
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
            && n > max
        {
            causes.push(Cause::invalid(
                field.clone(),
                &n.to_string(),
                format!("{field} in body should be less than or equal to {max}"),
            ));
        }
    }
    if let Some(s) = value.as_str() {
        let len = s.chars().count() as u64;
        if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
            && len > max
        {
            causes.push(Cause {
                reason: "FieldValueTooLong",
                field: field.clone(),
                message: format!("Too long: may not be more than {max} bytes"),
            });
        }
        if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
            && len < min
        {
            causes.push(Cause::invalid(
                field.clone(),
                s,
                format!("{field} in body should be at least {min} chars long"),
            ));
        }
        if let Some(pattern) = schema.get("pattern").and_then(Value::as_str)
            && let Ok(re) = regex::Regex::new(pattern)
            && !re.is_match(s)
        {
            causes.push(Cause::invalid(
                field.clone(),
                s,
                format!("{field} in body should match '{pattern}'"),
            ));
        }
    }
    match value {
        Value::Object(map) => {
            for r in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                if !map.contains_key(r) {
                    causes.push(Cause::required(join(path, r)));
                }
            }
            let props = schema.get("properties").and_then(Value::as_object);
            let add = schema.get("additionalProperties").filter(|a| a.is_object());
            for (k, v) in map {
                if let Some(sub) = props.and_then(|p| p.get(k)) {
                    validate(sub, v, &join(path, k), causes, depth + 1);
                } else if let Some(a) = add {
                    validate(a, v, &join(path, k), causes, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && items.len() as u64 > max
            {
                causes.push(Cause {
                    reason: "FieldValueTooMany",
                    field: field.clone(),
                    message: format!("Too many: {}: must have at most {max} items", items.len()),
                });
            }
            if let Some(item) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    validate(item, v, &format!("{path}[{i}]"), causes, depth + 1);
                }
            }
        }
        _ => {}
    }
}

/// The schema as served in OpenAPI: `metadata` refers to ObjectMeta, the rest as written.
pub fn openapi_component(schema: Option<&Value>, group: &str, version: &str, kind: &str) -> Value {
    let mut s = schema
        .cloned()
        .unwrap_or_else(|| json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
    if let Some(o) = s.as_object_mut() {
        let props = o
            .entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(p) = props.as_object_mut() {
            p.insert("apiVersion".into(), json!({"type": "string"}));
            p.insert("kind".into(), json!({"type": "string"}));
            p.insert("metadata".into(), json!({"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}]}));
        }
        o.insert(
            "x-kubernetes-group-version-kind".into(),
            json!([{"group": group, "kind": kind, "version": version}]),
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["size"], "properties": {
                "size": {"type": "integer", "minimum": 1, "maximum": 10},
                "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                "port": {"x-kubernetes-int-or-string": true},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            }},
            "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}
        }})
    }

    #[test]
    fn defaults_prunes_validates() {
        let mut v =
            json!({"spec": {"size": 3, "bogus": 1, "port": "http", "extra": {"anything": [1]}}});
        apply_defaults(&schema(), &mut v, 0);
        assert_eq!(v["spec"]["color"], "red");
        let mut unknown = Vec::new();
        prune(&schema(), &mut v, "", &mut unknown, 0);
        assert_eq!(unknown, vec!["spec.bogus"]);
        assert_eq!(v["spec"]["extra"]["anything"], json!([1]));
        let mut causes = Vec::new();
        validate(&schema(), &v, "", &mut causes, 0);
        assert!(causes.is_empty(), "{causes:?}");

        let bad = json!({"spec": {"size": "three", "color": "pink"}});
        let mut causes = Vec::new();
        validate(&schema(), &bad, "", &mut causes, 0);
        assert_eq!(causes.len(), 2, "{causes:?}");
        assert_eq!(causes[0].field, "spec.size");
        assert!(
            causes[0]
                .message
                .contains("spec.size in body must be of type integer: \"string\""),
            "{causes:?}"
        );
        let mut causes = Vec::new();
        validate(
            &schema(),
            &json!({"spec": {"size": 11}}),
            "",
            &mut causes,
            0,
        );
        assert!(causes[0].message.contains("less than or equal to 10"));
        let mut causes = Vec::new();
        validate(&schema(), &json!({"spec": {}}), "", &mut causes, 0);
        assert_eq!(causes[0].reason, "FieldValueRequired");
    }
}
