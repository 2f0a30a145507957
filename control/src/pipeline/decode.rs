//! Decoding request bodies into objects of a served type.

use serde_json::Value;

use super::params::{FieldValidation, Write, parse_json};
use crate::errors::{ApiError, ApiResult};
use crate::resources::{ResourceType, SchemaKind};
use crate::state::ApiState;

/// Decode a request body (JSON, YAML or Kubernetes protobuf by `content_type`) into an
/// object of type `t`, then [`check_decoded`].
pub fn decode_body(
    state: &ApiState,
    t: &ResourceType,
    content_type: &str,
    bytes: &[u8],
    w: &mut Write,
) -> ApiResult<Value> {
    let ct = content_type;
    let mut obj: Value = if ct.starts_with(crate::codec::PROTOBUF) {
        crate::codec::protobuf::decode(bytes, &t.definition).map_err(|e| {
            ApiError::BadRequest(format!(
                "{} in version \"{}\" cannot be handled as a {}: {e}",
                t.kind, t.version, t.kind
            ))
        })?
    } else if ct.starts_with("application/yaml") || ct.starts_with("application/apply-patch+yaml") {
        parse_yaml(bytes)?
    } else {
        parse_json(bytes)?
    };
    if !obj.is_object() {
        return Err(ApiError::BadRequest(format!(
            "{} in version \"{}\" cannot be handled as a {}: body must be a JSON object",
            t.kind, t.version, t.kind
        )));
    }
    check_decoded(state, t, &mut obj, w)?;
    Ok(obj)
}

/// A YAML body as JSON. The parser's budget, sized to a request body (3 MiB), refuses
/// expansion attacks — a billion laughs, deep nesting — before they allocate: at most
/// 100,000 nodes, 1,000 aliases, 4 MiB recorded for aliases and 4 MiB of scalars.
pub fn parse_yaml(bytes: &[u8]) -> ApiResult<Value> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| ApiError::BadRequest(format!("body is not UTF-8: {e}")))?;
    let mut budget = serde_saphyr::Budget::default();
    budget.max_nodes = 100_000;
    budget.max_events = 400_000;
    budget.max_aliases = 1_000;
    budget.max_recorded_anchor_events = 100_000;
    budget.max_recorded_anchor_bytes = 4 * 1024 * 1024;
    budget.max_total_scalar_bytes = 4 * 1024 * 1024;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    serde_saphyr::from_str_with_options(text, options)
        .map_err(|e| ApiError::BadRequest(format!("error converting YAML to JSON: {e}")))
}

/// The checks shared by bodies and patch results: type identity, unknown fields (pruned;
/// refused, warned about or ignored by the request's field validation), value types.
pub fn check_decoded(
    state: &ApiState,
    t: &ResourceType,
    obj: &mut Value,
    w: &mut Write,
) -> ApiResult<()> {
    if let Some(kind) = obj.get("kind").and_then(Value::as_str)
        && kind != t.kind
    {
        return Err(ApiError::BadRequest(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            t.kind
        )));
    }
    if let Some(av) = obj.get("apiVersion").and_then(Value::as_str)
        && av != t.api_version()
    {
        return Err(ApiError::BadRequest(format!(
            "the API version in the data ({av}) does not match the expected API version ({})",
            t.api_version()
        )));
    }
    let unknown = match &t.schema {
        SchemaKind::Builtin { .. } => state.schemas.prune_unknown(&t.definition, obj),
        SchemaKind::Custom(c) => {
            let mut unknown = Vec::new();
            if let Some(schema) = &c.schema {
                crate::crd::structural::apply_defaults(schema, obj, 0);
                let meta = obj.as_object_mut().and_then(|o| o.remove("metadata"));
                crate::crd::structural::prune(schema, obj, "", &mut unknown, 0);
                if let (Some(m), Some(o)) = (meta, obj.as_object_mut()) {
                    o.insert("metadata".into(), m);
                }
                unknown.retain(|u| u != "apiVersion" && u != "kind");
            }
            unknown
        }
    };
    if !unknown.is_empty() {
        match w.field_validation {
            FieldValidation::Strict => {
                let list: Vec<String> = unknown
                    .iter()
                    .map(|u| format!("unknown field {:?}", u))
                    .collect();
                return Err(ApiError::BadRequest(format!(
                    "strict decoding error: {}",
                    list.join(", ")
                )));
            }
            FieldValidation::Ignore => {}
            FieldValidation::Warn => w
                .warnings
                .extend(unknown.iter().map(|u| format!("unknown field {:?}", u))),
        }
    }
    match &t.schema {
        SchemaKind::Builtin { decode, .. } => decode(obj).map_err(|e| {
            ApiError::BadRequest(format!(
                "{} in version \"{}\" cannot be handled as a {}: {e}",
                t.kind, t.version, t.kind
            ))
        }),
        SchemaKind::Custom(_) => Ok(()),
    }
}
