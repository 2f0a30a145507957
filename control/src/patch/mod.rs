//! The three patch formats kubectl sends: JSON patch (RFC 6902), JSON merge patch
//! (RFC 7386) and strategic merge patch. Every failure is a `PatchError`, never a panic.

mod error;
pub(crate) mod meta_table;
pub mod strategic;

pub use error::PatchError;

use serde_json::Value;

use crate::schema::SchemaSet;

/// Patch content types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    Json,
    Merge,
    Strategic,
    Apply,
}

impl PatchType {
    pub fn from_content_type(ct: &str) -> Option<Self> {
        match ct.split(';').next().unwrap_or("").trim() {
            "application/json-patch+json" => Some(PatchType::Json),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => {
                Some(PatchType::Apply)
            }
            _ => None,
        }
    }
}

/// Most operations one JSON patch may hold (kube-apiserver's `maxJSONPatchOperations`).
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;
/// Most bytes a JSON patch's `copy` operations may add in all (kube-apiserver's
/// `JSONPatchMaxCopyBytes`, the request limit): without it, a few kilobytes of copies that
/// each double the object exhaust the server's memory.
pub const MAX_JSON_PATCH_COPY_BYTES: usize = 3 * 1024 * 1024;
/// Deepest nesting a patch may produce. Deeper values could not be read back (the JSON
/// decoder stops at 128 levels) and would exhaust the stack of whatever walks them.
pub const MAX_DEPTH: usize = 100;

/// The serialized size of `v`, near enough (strings without escapes), without recursion.
pub fn json_size(v: &Value) -> usize {
    let mut size = 0;
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        size += match v {
            Value::Null => 4,
            Value::Bool(_) => 5,
            Value::Number(n) => n.to_string().len(),
            Value::String(s) => s.len() + 2,
            Value::Array(a) => {
                stack.extend(a.iter());
                2 + a.len()
            }
            Value::Object(o) => {
                stack.extend(o.values());
                2 + o.keys().map(|k| k.len() + 4).sum::<usize>()
            }
        };
    }
    size
}

/// How deeply `v` nests (a scalar: 0), without recursion.
pub fn json_depth(v: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(v, 0usize)];
    while let Some((v, d)) = stack.pop() {
        deepest = deepest.max(d);
        match v {
            Value::Array(a) => stack.extend(a.iter().map(|c| (c, d + 1))),
            Value::Object(o) => stack.extend(o.values().map(|c| (c, d + 1))),
            _ => {}
        }
    }
    deepest
}

/// Apply a JSON patch, bounded as kube bounds it: at most
/// [`MAX_JSON_PATCH_OPERATIONS`] operations (413), copies adding at most
/// [`MAX_JSON_PATCH_COPY_BYTES`] (422), and nothing nested deeper than [`MAX_DEPTH`] (422).
pub fn json_patch(target: &Value, patch: &[u8]) -> Result<Value, PatchError> {
    use json_patch::PatchOperation as Op;
    let ops: json_patch::Patch = serde_json::from_slice(patch)
        .map_err(|e| PatchError::Malformed(format!("error decoding patch: {e}")))?;
    if ops.0.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(PatchError::TooLarge(format!(
            "The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {}",
            ops.0.len()
        )));
    }
    let mut doc = target.clone();
    let mut copied = 0usize;
    for op in &ops.0 {
        // What the operation puts where, checked before it is made.
        let placed = match op {
            Op::Add(a) => Some((a.path.count(), json_depth(&a.value))),
            Op::Replace(r) => Some((r.path.count(), json_depth(&r.value))),
            Op::Copy(c) => {
                let from = doc.pointer(c.from.as_str());
                copied += from.map_or(0, json_size);
                if copied > MAX_JSON_PATCH_COPY_BYTES {
                    return Err(PatchError::Apply(format!(
                        "Unable to complete the copy, the accumulated size increase of copy is {copied}, exceeding the limit {MAX_JSON_PATCH_COPY_BYTES}"
                    )));
                }
                Some((c.path.count(), from.map_or(0, json_depth)))
            }
            Op::Move(m) => Some((
                m.path.count(),
                doc.pointer(m.from.as_str()).map_or(0, json_depth),
            )),
            Op::Remove(_) | Op::Test(_) => None,
        };
        if let Some((at, depth)) = placed
            && at + depth > MAX_DEPTH
        {
            return Err(PatchError::Apply(format!(
                "the patch would nest {} levels deep at {}, more than the limit of {MAX_DEPTH}",
                at + depth,
                op.path()
            )));
        }
        json_patch::patch(&mut doc, std::slice::from_ref(op))
            .map_err(|e| PatchError::Apply(e.to_string()))?;
    }
    Ok(doc)
}

/// Apply a JSON merge patch.
pub fn merge_patch(target: &Value, patch: &[u8]) -> Result<Value, PatchError> {
    let p: Value = serde_json::from_slice(patch)
        .map_err(|e| PatchError::Malformed(format!("error decoding patch: {e}")))?;
    if !p.is_object() {
        return Err(PatchError::Malformed(
            "merge patch must be a JSON object".into(),
        ));
    }
    let mut doc = target.clone();
    json_patch::merge(&mut doc, &p);
    Ok(doc)
}

/// Apply a strategic merge patch to an object of OpenAPI definition `def`.
pub fn strategic_patch(
    set: &SchemaSet,
    def: &str,
    target: &Value,
    patch: &[u8],
) -> Result<Value, PatchError> {
    let p: Value = serde_json::from_slice(patch)
        .map_err(|e| PatchError::Malformed(format!("error decoding patch: {e}")))?;
    let schema = set.definition(def);
    strategic::apply(set, schema, target, &p)
}

#[cfg(test)]
mod tests;
