//! Strategic merge patch, following apimachinery's `strategicpatch` semantics: maps merge,
//! `null` deletes, lists with `x-kubernetes-patch-strategy: merge` merge by their merge key
//! (or as sets for primitives), other lists are replaced; and the directives kubectl sends:
//! `$patch` (replace/delete/merge), `$retainKeys`, `$setElementOrder/<field>`,
//! `$deleteFromPrimitiveList/<field>`.
//!
//! Lists are matched through an index (by merge key, or by value for primitives), never by
//! scanning the original once per patch item: a patch of n items on a list of m costs
//! O(n + m), so a tenant's long list cannot make one request quadratic.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::error::PatchError;
use crate::schema::SchemaSet;

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ORDER: &str = "$setElementOrder/";
const DELETE_PRIMITIVE: &str = "$deleteFromPrimitiveList/";
/// Nesting bound: deeper patches are rejected instead of risking the stack.
const MAX_DEPTH: usize = 100;

/// What the schema says about one field.
struct FieldMeta<'a> {
    merge: bool,
    retain_keys: bool,
    merge_key: Option<&'a str>,
    /// Schema of the field's value (of its items, for a list).
    schema: Option<&'a Value>,
}

fn field_meta<'a>(set: &'a SchemaSet, schema: Option<&'a Value>, field: &str) -> FieldMeta<'a> {
    let prop = schema
        .map(|s| set.resolve(s))
        .and_then(|s| s.get("properties"))
        .and_then(|p| p.get(field));
    let strategy = prop
        .and_then(|p| p.get("x-kubernetes-patch-strategy"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let merge_key = prop
        .and_then(|p| p.get("x-kubernetes-patch-merge-key"))
        .and_then(Value::as_str);
    let value_schema = prop.map(|p| {
        let resolved = set.resolve(p);
        resolved.get("items").unwrap_or(resolved)
    });
    let value_schema = value_schema.or_else(|| {
        // Maps (labels, data, ...) describe their values with additionalProperties.
        schema
            .map(|s| set.resolve(s))
            .and_then(|s| s.get("additionalProperties"))
            .filter(|a| a.is_object())
    });
    FieldMeta {
        merge: strategy.split(',').any(|s| s == "merge"),
        retain_keys: strategy.split(',').any(|s| s == "retainKeys"),
        merge_key,
        schema: value_schema,
    }
}

/// Apply `patch` to `target`, an object described by `schema`.
pub fn apply(
    set: &SchemaSet,
    schema: Option<&Value>,
    target: &Value,
    patch: &Value,
) -> Result<Value, PatchError> {
    let Value::Object(p) = patch else {
        return Err(PatchError::Malformed(
            "strategic merge patch must be a JSON object".into(),
        ));
    };
    let original = match target {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    merge_map(set, schema, original, p, 0).map(Value::Object)
}

fn merge_map(
    set: &SchemaSet,
    schema: Option<&Value>,
    mut original: Map<String, Value>,
    patch: &Map<String, Value>,
    depth: usize,
) -> Result<Map<String, Value>, PatchError> {
    if depth > MAX_DEPTH {
        return Err(PatchError::Malformed("patch is nested too deeply".into()));
    }
    if let Some(d) = patch.get(DIRECTIVE) {
        match d.as_str() {
            Some("replace") => {
                let mut out = patch.clone();
                out.remove(DIRECTIVE);
                return strip(set, schema, &Value::Object(out), depth).map(|v| match v {
                    Value::Object(m) => m,
                    _ => Map::new(),
                });
            }
            Some("delete") => return Ok(Map::new()),
            Some("merge") => {}
            _ => {
                return Err(PatchError::Malformed(format!(
                    "unknown patch type: {d} in map"
                )));
            }
        }
    }
    if let Some(retain) = patch.get(RETAIN_KEYS) {
        let keys = retain
            .as_array()
            .ok_or_else(|| PatchError::Malformed("$retainKeys must be a list of strings".into()))?;
        let keys: Vec<&str> = keys.iter().filter_map(Value::as_str).collect();
        original.retain(|k, _| keys.contains(&k.as_str()));
    }
    for (k, v) in patch {
        if let Some(field) = k.strip_prefix(DELETE_PRIMITIVE) {
            let remove: HashSet<String> = v
                .as_array()
                .ok_or_else(|| PatchError::Malformed(format!("{k} must be a list")))?
                .iter()
                .map(identity)
                .collect();
            if let Some(Value::Array(list)) = original.get_mut(field) {
                list.retain(|x| !remove.contains(&identity(x)));
            }
        }
    }
    for (k, v) in patch {
        if k.starts_with('$') {
            continue;
        }
        if v.is_null() {
            original.remove(k);
            continue;
        }
        let meta = field_meta(set, schema, k);
        let merged = match (original.remove(k), v) {
            (Some(Value::Object(o)), Value::Object(pm)) => {
                let m = merge_map(set, meta.schema, o, pm, depth + 1)?;
                if pm.get(DIRECTIVE).and_then(Value::as_str) == Some("delete") {
                    continue;
                }
                Value::Object(m)
            }
            (Some(Value::Array(o)), Value::Array(pl)) if meta.merge => {
                merge_list(set, &meta, o, pl, depth + 1)?
            }
            (None, Value::Array(pl)) if meta.merge => {
                merge_list(set, &meta, Vec::new(), pl, depth + 1)?
            }
            (None, Value::Object(pm))
                if pm.get(DIRECTIVE).and_then(Value::as_str) == Some("delete") =>
            {
                continue;
            }
            (_, pv) => strip(set, meta.schema, pv, depth + 1)?,
        };
        let _ = meta.retain_keys;
        original.insert(k.clone(), merged);
    }
    for (k, v) in patch {
        if let Some(field) = k.strip_prefix(SET_ORDER) {
            let order = v
                .as_array()
                .ok_or_else(|| PatchError::Malformed(format!("{k} must be a list")))?;
            let meta = field_meta(set, schema, field);
            if let Some(Value::Array(list)) = original.get_mut(field) {
                reorder(list, order, meta.merge_key);
            }
        }
    }
    Ok(original)
}

fn key_of<'v>(item: &'v Value, merge_key: &str) -> Option<&'v Value> {
    item.get(merge_key)
}

fn merge_list(
    set: &SchemaSet,
    meta: &FieldMeta<'_>,
    mut original: Vec<Value>,
    patch: &[Value],
    depth: usize,
) -> Result<Value, PatchError> {
    if depth > MAX_DEPTH {
        return Err(PatchError::Malformed("patch is nested too deeply".into()));
    }
    if patch
        .iter()
        .any(|p| p.get(DIRECTIVE).and_then(Value::as_str) == Some("replace"))
    {
        let rest: Vec<Value> = patch
            .iter()
            .filter(|p| p.get(DIRECTIVE).is_none())
            .cloned()
            .collect();
        return strip(set, meta.schema, &Value::Array(rest), depth);
    }
    match meta.merge_key {
        None => {
            // A set of primitives (e.g. finalizers): union, keeping the original order.
            let mut seen: HashSet<String> = original.iter().map(identity).collect();
            for p in patch {
                if p.is_object() {
                    return Err(PatchError::Malformed(
                        "a list without a merge key cannot hold maps in a merge patch".into(),
                    ));
                }
                if seen.insert(identity(p)) {
                    original.push(p.clone());
                }
            }
            Ok(Value::Array(original))
        }
        Some(mk) => {
            // Slots (a deleted item leaves `None`) and where each merge key sits.
            let mut slots: Vec<Option<Value>> = original.into_iter().map(Some).collect();
            let mut at: HashMap<String, Vec<usize>> = HashMap::new();
            for (i, o) in slots.iter().enumerate() {
                if let Some(k) = o.as_ref().and_then(|o| key_of(o, mk)) {
                    at.entry(identity(k)).or_default().push(i);
                }
            }
            for p in patch {
                let Value::Object(pm) = p else {
                    return Err(PatchError::Malformed(format!(
                        "list items must be maps with merge key {mk:?}"
                    )));
                };
                let key = key_of(p, mk).ok_or_else(|| {
                    PatchError::Malformed(format!(
                        "map: {p} does not contain declared merge key: {mk}"
                    ))
                })?;
                let id = identity(key);
                match pm.get(DIRECTIVE).and_then(Value::as_str) {
                    Some("delete") => {
                        for i in at.remove(&id).unwrap_or_default() {
                            slots[i] = None;
                        }
                    }
                    Some("replace") | Some("merge") | None => {
                        match at.get(&id).and_then(|positions| positions.first()) {
                            Some(&i) => {
                                let existing = match slots[i].take() {
                                    Some(Value::Object(m)) => m,
                                    _ => Map::new(),
                                };
                                slots[i] = Some(Value::Object(merge_map(
                                    set,
                                    meta.schema,
                                    existing,
                                    pm,
                                    depth + 1,
                                )?));
                            }
                            None => {
                                let stripped =
                                    merge_map(set, meta.schema, Map::new(), pm, depth + 1)?;
                                at.entry(id).or_default().push(slots.len());
                                slots.push(Some(Value::Object(stripped)));
                            }
                        }
                    }
                    Some(other) => {
                        return Err(PatchError::Malformed(format!(
                            "unknown patch type: {other} in list"
                        )));
                    }
                }
            }
            Ok(Value::Array(slots.into_iter().flatten().collect()))
        }
    }
}

/// What list items are matched by: the value's JSON text (merge keys and primitive
/// items are scalars, whose text is their identity).
fn identity(v: &Value) -> String {
    v.to_string()
}

/// Order `list` by `order` (items or merge-key maps); unlisted items keep their relative
/// order after the listed ones.
fn reorder(list: &mut Vec<Value>, order: &[Value], merge_key: Option<&str>) {
    let id = |item: &Value| match merge_key {
        Some(mk) => item.get(mk).map(identity),
        None => Some(identity(item)),
    };
    let mut ranks: HashMap<String, usize> = HashMap::new();
    for (i, o) in order.iter().enumerate() {
        if let Some(k) = id(o) {
            ranks.entry(k).or_insert(i);
        }
    }
    let rank = |item: &Value| -> usize {
        id(item)
            .and_then(|k| ranks.get(&k).copied())
            .unwrap_or(usize::MAX)
    };
    let mut ranked: Vec<(usize, usize, Value)> = list
        .drain(..)
        .enumerate()
        .map(|(i, v)| (rank(&v), i, v))
        .collect();
    ranked.sort_by_key(|(r, i, _)| (*r, *i));
    list.extend(ranked.into_iter().map(|(_, _, v)| v));
}

/// A patch value stored where nothing was: drop directives (and nulls in maps) inside it.
fn strip(
    set: &SchemaSet,
    schema: Option<&Value>,
    v: &Value,
    depth: usize,
) -> Result<Value, PatchError> {
    if depth > MAX_DEPTH {
        return Err(PatchError::Malformed("patch is nested too deeply".into()));
    }
    Ok(match v {
        Value::Object(m) => Value::Object(merge_map(set, schema, Map::new(), m, depth + 1)?),
        Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for i in items {
                if i.get(DIRECTIVE).is_some() && i.as_object().is_some_and(|m| m.len() == 1) {
                    continue;
                }
                out.push(strip(set, schema, i, depth + 1)?);
            }
            Value::Array(out)
        }
        other => other.clone(),
    })
}
