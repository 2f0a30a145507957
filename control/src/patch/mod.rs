//! The three patch formats kubectl sends: JSON patch (RFC 6902), JSON merge patch
//! (RFC 7386) and strategic merge patch. Every failure is a `PatchError`, never a panic.

pub(crate) mod meta_table;
pub mod strategic;

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

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PatchError {
    /// The patch document itself is malformed.
    #[error("{0}")]
    Malformed(String),
    /// The patch is well formed but cannot be applied to this object.
    #[error("{0}")]
    Apply(String),
}

/// Apply a JSON patch.
pub fn json_patch(target: &Value, patch: &[u8]) -> Result<Value, PatchError> {
    let ops: json_patch::Patch = serde_json::from_slice(patch)
        .map_err(|e| PatchError::Malformed(format!("error decoding patch: {e}")))?;
    let mut doc = target.clone();
    json_patch::patch(&mut doc, &ops).map_err(|e| PatchError::Apply(e.to_string()))?;
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
