//! TokenRequest (`POST .../serviceaccounts/<name>/token`): a signed, expiring token for a
//! ServiceAccount, optionally bound to a Pod so that it dies with the Pod.

use http::StatusCode;
use serde_json::{Value, json};

use super::respond::{Ctx, Resp, json_value};
use super::scope::Scope;
use crate::auth::service_account::{API_AUDIENCE, Claims, ISSUER, KubeClaim, ObjectRef};
use crate::auth::unix_now;
use crate::errors::{ApiError, ApiResult, Cause, GroupResource};
use crate::state::ApiState;
use crate::storage::ResourcePrefix;

const DEFINITION: &str = "io.k8s.api.authentication.v1.TokenRequest";
const DEFAULT_SECONDS: i64 = 3600;

fn invalid(name: &str, cause: Cause) -> ApiError {
    ApiError::Invalid {
        gr: GroupResource {
            group: "authentication.k8s.io".into(),
            resource: "tokenrequests".into(),
        },
        kind: "TokenRequest".into(),
        name: name.to_string(),
        causes: vec![cause],
    }
}

/// Answer a TokenRequest for ServiceAccount `name`.
pub fn serve(
    state: &ApiState,
    ctx: &mut Ctx,
    scope: &Scope<'_>,
    name: &str,
    body: &[u8],
) -> ApiResult<Resp> {
    let cluster = scope.cluster.as_ref().ok_or(ApiError::MethodNotAllowed)?;
    let namespace = scope.namespace.as_deref().unwrap_or_default();
    let signer = state
        .auth
        .signer()
        .ok_or_else(|| ApiError::Internal("no ServiceAccount signing key".into()))?;
    let request: Value = if ctx.content_type().starts_with(crate::codec::PROTOBUF) {
        crate::codec::protobuf::decode(body, DEFINITION)
            .map_err(|e| ApiError::BadRequest(format!("TokenRequest cannot be handled: {e}")))?
    } else {
        crate::pipeline::parse_json(body)?
    };
    let object = |resource: &str, name: &str| -> Option<Value> {
        let entry = state.store.get(&ResourcePrefix::new("", resource).key(
            cluster,
            Some(namespace),
            name,
        ))?;
        serde_json::from_slice(&entry.value).ok()
    };
    let uid_of = |resource: &str, name: &str| -> Option<String> {
        object(resource, name)?["metadata"]["uid"]
            .as_str()
            .map(str::to_string)
    };
    let sa_uid = uid_of("serviceaccounts", name).ok_or_else(|| ApiError::NotFound {
        gr: scope.t.gr.clone(),
        name: name.to_string(),
    })?;
    let spec = &request["spec"];
    let mut seconds = match &spec["expirationSeconds"] {
        Value::Null => DEFAULT_SECONDS,
        v => v.as_i64().ok_or_else(|| {
            invalid(
                name,
                Cause::invalid(
                    "spec.expirationSeconds",
                    &v.to_string(),
                    "must be an integer",
                ),
            )
        })?,
    };
    if seconds < state.limits.min_token_seconds {
        return Err(invalid(
            name,
            Cause {
                reason: "FieldValueInvalid",
                field: "spec.expirationSeconds".into(),
                message: format!(
                    "Invalid value: {seconds}: may not specify a duration less than {} seconds",
                    state.limits.min_token_seconds
                ),
            },
        ));
    }
    if seconds > state.limits.max_token_seconds {
        ctx.warnings.push(format!(
            "requested expiration of {seconds} seconds shortened to {} seconds",
            state.limits.max_token_seconds
        ));
        seconds = state.limits.max_token_seconds;
    }
    let bound = &spec["boundObjectRef"];
    let pod = match bound["kind"].as_str() {
        None => None,
        Some("Pod") => {
            let pod_name = bound["name"].as_str().unwrap_or_default();
            let uid = uid_of("pods", pod_name).ok_or_else(|| ApiError::NotFound {
                gr: GroupResource {
                    group: String::new(),
                    resource: "pods".into(),
                },
                name: pod_name.to_string(),
            })?;
            if let Some(want) = bound["uid"].as_str().filter(|u| !u.is_empty())
                && want != uid
            {
                return Err(ApiError::Conflict {
                    gr: GroupResource {
                        group: String::new(),
                        resource: "pods".into(),
                    },
                    name: pod_name.to_string(),
                    detail: format!(
                        "the UID in the bound object reference ({want}) does not match the UID in record ({uid})"
                    ),
                });
            }
            // kube-apiserver: a token bound to a Pod is for the Pod's own ServiceAccount.
            let runs_as = object("pods", pod_name)
                .and_then(|p| p["spec"]["serviceAccountName"].as_str().map(str::to_string))
                .unwrap_or_else(|| "default".to_string());
            if runs_as != name {
                return Err(ApiError::BadRequest(format!(
                    "cannot bind token for serviceaccount {name:?} to pod running with different serviceaccount name ({runs_as:?})"
                )));
            }
            Some(ObjectRef {
                name: pod_name.to_string(),
                uid,
            })
        }
        Some(other) => {
            return Err(invalid(
                name,
                Cause {
                    reason: "FieldValueNotSupported",
                    field: "spec.boundObjectRef.kind".into(),
                    message: format!(
                        "Unsupported value: {}: supported values: \"Pod\"",
                        Value::String(other.into())
                    ),
                },
            ));
        }
    };
    let audiences: Vec<String> = match spec["audiences"].as_array() {
        Some(a) if !a.is_empty() => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        _ => vec![API_AUDIENCE.to_string()],
    };
    let now = unix_now();
    let claims = Claims {
        iss: ISSUER.to_string(),
        sub: crate::rbac::policy::service_account_user(namespace, name),
        aud: audiences.clone(),
        exp: now + seconds,
        iat: now,
        nbf: now,
        jti: uuid::Uuid::new_v4().to_string(),
        kube: KubeClaim {
            namespace: namespace.to_string(),
            serviceaccount: ObjectRef {
                name: name.to_string(),
                uid: sa_uid,
            },
            pod: pod.clone(),
        },
        cluster: cluster.to_string(),
    };
    let token = signer
        .issue(&claims)
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let expires = time::OffsetDateTime::from_unix_timestamp(claims.exp)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default();
    let mut spec_out = json!({"audiences": audiences, "expirationSeconds": seconds});
    if let Some(p) = &pod {
        spec_out["boundObjectRef"] =
            json!({"kind": "Pod", "apiVersion": "v1", "name": p.name, "uid": p.uid});
    }
    Ok(json_value(
        StatusCode::CREATED,
        &json!({
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "creationTimestamp": sluice_kube::time::now_rfc3339(),
            },
            "spec": spec_out,
            "status": {"token": token, "expirationTimestamp": expires},
        }),
    ))
}
