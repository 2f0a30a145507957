//! A write's parameters from its request — field manager, dry run, `fieldValidation`,
//! who asked — and what it reports back besides its result.

use serde_json::Value;

use crate::errors::{ApiError, ApiResult};

/// What to do with fields a type does not know (`fieldValidation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FieldValidation {
    /// Refuse the request.
    Strict,
    /// Drop them and say so in a warning.
    #[default]
    Warn,
    /// Drop them silently.
    Ignore,
}

impl FieldValidation {
    /// From the query parameter; kube's default is `Warn`.
    pub fn parse(value: Option<&str>) -> Self {
        match value {
            Some("Strict") => Self::Strict,
            Some("Ignore") => Self::Ignore,
            _ => Self::Warn,
        }
    }
}

/// One write's parameters and what it reports besides its result.
#[derive(Debug, Default)]
pub struct Write {
    /// The field manager that owns what this write sets.
    pub manager: String,
    /// Admit and validate, but persist nothing.
    pub dry_run: bool,
    pub field_validation: FieldValidation,
    /// Warnings for the client (unknown fields under `Warn`).
    pub warnings: Vec<String>,
    /// Who asked for the write (`None` for the server's own writes).
    pub user: Option<crate::auth::User>,
    /// Annotations for the request's audit event (admission policies), as `(key, value)`.
    pub audit_annotations: Vec<(String, String)>,
}

/// A request body as JSON, or kube's 400 for what is not.
pub fn parse_json(bytes: &[u8]) -> ApiResult<Value> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::BadRequest(format!("error decoding object: {e}")))
}
