//! API errors and their one mapping to the wire: a Kubernetes `Status`.

use serde_json::{Value, json};

use crate::storage::{StorageError, WatchError};

/// The group and resource an error is about, as kube-apiserver names it in messages
/// (`deployments.apps`, `configmaps`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupResource {
    pub group: String,
    pub resource: String,
}

impl std::fmt::Display for GroupResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            f.write_str(&self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

fn forbidden_message(gr: &GroupResource, name: &str, message: &str) -> String {
    if gr.resource.is_empty() {
        format!("forbidden: {message}")
    } else if name.is_empty() {
        format!("{gr} is forbidden: {message}")
    } else {
        format!("{gr} {name:?} is forbidden: {message}")
    }
}

/// One field-level problem of an Invalid object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueNotSupported`, ...
    pub reason: &'static str,
    pub field: String,
    pub message: String,
}

impl Cause {
    pub fn invalid(field: impl Into<String>, value: &str, detail: impl Into<String>) -> Self {
        let detail = detail.into();
        Self {
            reason: "FieldValueInvalid",
            field: field.into(),
            message: format!("Invalid value: {}: {}", json!(value), detail),
        }
    }

    /// [`Cause::invalid`] of a value that is not a string (kube prints numbers, booleans
    /// and objects as they are, without quotes).
    pub fn invalid_value(
        field: impl Into<String>,
        value: &Value,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            reason: "FieldValueInvalid",
            field: field.into(),
            message: format!("Invalid value: {value}: {}", detail.into()),
        }
    }

    pub fn required(field: impl Into<String>) -> Self {
        Self {
            reason: "FieldValueRequired",
            field: field.into(),
            message: "Required value".into(),
        }
    }

    /// kube's `Duplicate value: "<value>"`.
    pub fn duplicate(field: impl Into<String>, value: &str) -> Self {
        Self {
            reason: "FieldValueDuplicate",
            field: field.into(),
            message: format!("Duplicate value: {value:?}"),
        }
    }

    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            reason: "FieldValueForbidden",
            field: field.into(),
            message: format!("Forbidden: {}", detail.into()),
        }
    }
}

/// Every way an API request can fail.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{gr} \"{name}\" not found")]
    NotFound { gr: GroupResource, name: String },
    #[error("{gr} \"{name}\" already exists")]
    AlreadyExists { gr: GroupResource, name: String },
    #[error("Operation cannot be fulfilled on {gr} \"{name}\": {detail}")]
    Conflict {
        gr: GroupResource,
        name: String,
        detail: String,
    },
    /// Server-side apply touched fields another manager owns.
    #[error("{message}")]
    ApplyConflict {
        gr: GroupResource,
        name: String,
        message: String,
        causes: Vec<Cause>,
    },
    #[error("{kind} \"{name}\" is invalid: {}", causes_summary(.causes))]
    Invalid {
        gr: GroupResource,
        kind: String,
        name: String,
        causes: Vec<Cause>,
    },
    #[error("{0}")]
    BadRequest(String),
    #[error("Unauthorized")]
    Unauthorized,
    #[error("{0}")]
    Forbidden(String),
    /// No authorizer allowed the request (kube-apiserver's `NewForbidden` wording).
    #[error("{}", forbidden_message(gr, name, message))]
    RbacForbidden {
        gr: GroupResource,
        name: String,
        message: String,
    },
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    #[error("the server could not find the requested resource")]
    PathNotFound,
    #[error("{0}")]
    NotAcceptable(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    Gone(String),
    #[error("{0}")]
    Expired(String),
    /// kube's 413: `Request entity too large: limit is 3145728`.
    #[error("Request entity too large: {0}")]
    RequestEntityTooLarge(String),
    #[error("{0}")]
    UnprocessableEntity(String),
    #[error("Internal error occurred: {0}")]
    Internal(String),
    /// Refused by fairness (kube's API Priority and Fairness wording); sent with
    /// `Retry-After`.
    #[error("{0}")]
    TooManyRequests(#[from] crate::fairness::TooManyRequests),
    /// An admission webhook refused the request: its code (400–599) and reason, and kube's
    /// message (`admission webhook "<name>" denied the request: ...`).
    #[error("{message}")]
    Denied {
        code: u16,
        reason: String,
        message: String,
    },
    /// A ValidatingAdmissionPolicy refused the request: kube's `NewForbidden` wording with
    /// the failed validation's reason and code, the message again as the one cause.
    #[error("{}", forbidden_message(gr, name, message))]
    PolicyDenied {
        gr: GroupResource,
        name: String,
        code: u16,
        reason: &'static str,
        message: String,
    },
}

fn causes_summary(causes: &[Cause]) -> String {
    if causes.len() == 1 {
        format!("{}: {}", causes[0].field, causes[0].message)
    } else {
        let parts: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        format!("[{}]", parts.join(", "))
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    /// An object or body over `limit` bytes.
    pub fn too_large(limit: usize) -> Self {
        ApiError::RequestEntityTooLarge(format!("limit is {limit}"))
    }

    pub fn code(&self) -> u16 {
        match self {
            ApiError::NotFound { .. } | ApiError::PathNotFound => 404,
            ApiError::AlreadyExists { .. }
            | ApiError::Conflict { .. }
            | ApiError::ApplyConflict { .. } => 409,
            ApiError::Invalid { .. } | ApiError::UnprocessableEntity(_) => 422,
            ApiError::BadRequest(_) => 400,
            ApiError::Unauthorized => 401,
            ApiError::Forbidden(_) | ApiError::RbacForbidden { .. } => 403,
            ApiError::MethodNotAllowed => 405,
            ApiError::NotAcceptable(_) => 406,
            ApiError::UnsupportedMediaType(_) => 415,
            ApiError::Gone(_) | ApiError::Expired(_) => 410,
            ApiError::RequestEntityTooLarge(_) => 413,
            ApiError::TooManyRequests(_) => 429,
            ApiError::Internal(_) => 500,
            ApiError::Denied { code, .. } | ApiError::PolicyDenied { code, .. } => *code,
        }
    }

    pub fn reason(&self) -> &'static str {
        match self {
            ApiError::NotFound { .. } | ApiError::PathNotFound => "NotFound",
            ApiError::AlreadyExists { .. } => "AlreadyExists",
            ApiError::Conflict { .. } | ApiError::ApplyConflict { .. } => "Conflict",
            ApiError::Invalid { .. } | ApiError::UnprocessableEntity(_) => "Invalid",
            ApiError::BadRequest(_) => "BadRequest",
            ApiError::Unauthorized => "Unauthorized",
            ApiError::Forbidden(_) | ApiError::RbacForbidden { .. } => "Forbidden",
            ApiError::MethodNotAllowed => "MethodNotAllowed",
            ApiError::NotAcceptable(_) => "NotAcceptable",
            ApiError::UnsupportedMediaType(_) => "UnsupportedMediaType",
            ApiError::Gone(_) => "Gone",
            ApiError::Expired(_) => "Expired",
            ApiError::RequestEntityTooLarge(_) => "RequestEntityTooLarge",
            ApiError::TooManyRequests(_) => "TooManyRequests",
            ApiError::Internal(_) => "InternalError",
            ApiError::Denied { .. } => "",
            ApiError::PolicyDenied { reason, .. } => reason,
        }
    }

    /// The `Status` object kube-apiserver would send.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": self.reason(),
            "code": self.code(),
        });
        let details = match self {
            ApiError::NotFound { gr, name }
            | ApiError::RbacForbidden { gr, name, .. }
            | ApiError::AlreadyExists { gr, name }
            | ApiError::Conflict { gr, name, .. } => {
                Some(json!({"name": name, "group": gr.group, "kind": gr.resource}))
            }
            ApiError::Invalid {
                gr,
                kind,
                name,
                causes,
            } => Some(json!({
                "name": name,
                "group": gr.group,
                "kind": kind,
                "causes": causes.iter().map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field})).collect::<Vec<_>>(),
            })),
            ApiError::TooManyRequests(t) => {
                Some(json!({"retryAfterSeconds": t.retry_after_seconds}))
            }
            ApiError::PolicyDenied {
                gr, name, message, ..
            } => Some(json!({
                "name": name,
                "group": gr.group,
                "kind": gr.resource,
                "causes": [{"message": message}],
            })),
            _ => None,
        };
        if let Some(d) = details {
            status["details"] = d;
        }
        // A webhook's denial carries the webhook's own reason, or none.
        if let ApiError::Denied { reason, .. } = self
            && let Some(s) = status.as_object_mut()
        {
            if reason.is_empty() {
                s.remove("reason");
            } else {
                s.insert("reason".into(), json!(reason));
            }
        }
        status
    }

    pub fn not_found(gr: &GroupResource, name: &str) -> Self {
        ApiError::NotFound {
            gr: gr.clone(),
            name: name.to_string(),
        }
    }

    pub fn conflict(gr: &GroupResource, name: &str) -> Self {
        ApiError::Conflict {
            gr: gr.clone(),
            name: name.to_string(),
            detail: "the object has been modified; please apply your changes to the latest version and try again".into(),
        }
    }

    /// Map a storage error about `name` of `gr`.
    pub fn from_storage(e: StorageError, gr: &GroupResource, name: &str) -> Self {
        match e {
            StorageError::AlreadyExists(_) => ApiError::AlreadyExists {
                gr: gr.clone(),
                name: name.into(),
            },
            StorageError::NotFound(_) => ApiError::not_found(gr, name),
            StorageError::Conflict { .. } => ApiError::conflict(gr, name),
            StorageError::Backend(m) => ApiError::Internal(m),
            StorageError::Closed => ApiError::Internal("storage is shutting down".into()),
        }
    }
}

impl From<WatchError> for ApiError {
    fn from(e: WatchError) -> Self {
        match e {
            WatchError::Expired { requested, oldest } => {
                ApiError::Expired(format!("too old resource version: {requested} ({oldest})"))
            }
            WatchError::Lagged => {
                ApiError::Expired("too old resource version: watcher fell behind".into())
            }
            WatchError::Closed => ApiError::Internal("store closed".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_match_kube() {
        let gr = GroupResource {
            group: "apps".into(),
            resource: "deployments".into(),
        };
        let e = ApiError::not_found(&gr, "x");
        assert_eq!(e.to_string(), "deployments.apps \"x\" not found");
        let s = e.to_status();
        assert_eq!(s["code"], 404);
        assert_eq!(s["reason"], "NotFound");
        assert_eq!(s["details"]["kind"], "deployments");
        let c = ApiError::conflict(
            &GroupResource {
                group: "".into(),
                resource: "configmaps".into(),
            },
            "c",
        );
        assert_eq!(
            c.to_string(),
            "Operation cannot be fulfilled on configmaps \"c\": the object has been modified; please apply your changes to the latest version and try again"
        );
        let i = ApiError::Invalid {
            gr: GroupResource::default(),
            kind: "ConfigMap".into(),
            name: "Bad".into(),
            causes: vec![Cause::invalid(
                "metadata.name",
                "Bad",
                "a lowercase RFC 1123 subdomain",
            )],
        };
        assert_eq!(i.code(), 422);
        assert_eq!(
            i.to_status()["details"]["causes"][0]["field"],
            "metadata.name"
        );
    }
}
