//! A claim's `sluice.dev/storage` annotation (docs/stateful.md) takes only the values that
//! mean something — `moves` or `shared` — so a typo is refused where it is written rather
//! than read as "moves" on the day the app moves.

use serde_json::Value;
use sluice_api::claim_copy::{STORAGE_ANNOTATION, Storage};

use crate::errors::{ApiError, ApiResult, Cause};
use crate::pipeline::hooks::{Hook, HookCx};
use crate::resources::Subresource;

pub struct ClaimStorage;

/// The problem with `obj`'s annotation, if it has one.
fn cause(obj: &Value) -> Option<Cause> {
    let v = &obj["metadata"]["annotations"][STORAGE_ANNOTATION];
    let s = v.as_str()?;
    if Storage::parse(s).is_some() {
        return None;
    }
    let supported: Vec<String> = Storage::VALUES.iter().map(|v| format!("{v:?}")).collect();
    Some(Cause {
        reason: "FieldValueNotSupported",
        field: format!("metadata.annotations[{STORAGE_ANNOTATION}]"),
        message: format!(
            "Unsupported value: {}: supported values: {}",
            serde_json::json!(s),
            supported.join(", ")
        ),
    })
}

fn check(cx: &HookCx<'_>, obj: &Value) -> ApiResult<()> {
    match cause(obj) {
        None => Ok(()),
        Some(c) => Err(ApiError::Invalid {
            gr: cx.t.gr.clone(),
            kind: cx.t.kind.clone(),
            name: crate::object::name(obj).unwrap_or_default().to_string(),
            causes: vec![c],
        }),
    }
}

impl Hook for ClaimStorage {
    fn admit_create(&self, cx: &HookCx<'_>, obj: &mut Value) -> ApiResult<()> {
        check(cx, obj)
    }

    fn admit_update(
        &self,
        cx: &HookCx<'_>,
        _old: &Value,
        new: &mut Value,
        sub: Option<Subresource>,
    ) -> ApiResult<()> {
        if sub.is_some() {
            return Ok(());
        }
        check(cx, new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_moves_and_shared_are_taken() {
        let claim = |v: &str| json!({"metadata": {"annotations": {STORAGE_ANNOTATION: v}}});
        assert!(cause(&claim("shared")).is_none());
        assert!(cause(&claim("moves")).is_none());
        assert!(cause(&json!({"metadata": {}})).is_none());
        let c = cause(&claim("Shared ")).expect("refused");
        assert_eq!(c.field, "metadata.annotations[sluice.dev/storage]");
        assert_eq!(
            c.message,
            r#"Unsupported value: "Shared ": supported values: "moves", "shared""#
        );
    }
}
