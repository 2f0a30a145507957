//! `AdmissionReview` (admission.k8s.io/v1): the request a webhook is sent and what its
//! answer says, checked as kube checks it. Pure: unit-tested without a server.

use serde_json::{Value, json};

use super::matching::{Attributes, Operation};

/// The most a webhook's answer may hold (kube reads at most 3 MiB of it).
pub const MAX_RESPONSE_BYTES: usize = 3 * 1024 * 1024;

/// Warnings kept from one answer, and the length of each.
pub const MAX_WARNINGS: usize = 32;
pub const MAX_WARNING_CHARS: usize = 512;

/// Who made the request, as the review tells the webhook.
pub struct UserInfo<'a> {
    pub name: &'a str,
    pub groups: &'a [String],
}

/// The review for request `a` (`kind` its object's kind), with its own `uid`.
#[allow(clippy::too_many_arguments)]
pub fn request(
    uid: &str,
    a: &Attributes<'_>,
    kind: &str,
    name: &str,
    namespace: Option<&str>,
    user: &UserInfo<'_>,
    dry_run: bool,
    options: Value,
) -> Value {
    let gvk = json!({"group": a.group, "version": a.version, "kind": kind});
    let gvr = json!({"group": a.group, "version": a.version, "resource": a.resource});
    let mut req = json!({
        "uid": uid,
        "kind": gvk,
        "resource": gvr,
        "requestKind": gvk,
        "requestResource": gvr,
        "name": name,
        "operation": a.operation.as_str(),
        "userInfo": {"username": user.name, "groups": user.groups},
        "object": a.object.cloned().unwrap_or(Value::Null),
        "oldObject": a.old_object.cloned().unwrap_or(Value::Null),
        "dryRun": dry_run,
        "options": options,
    });
    if let Some(ns) = namespace {
        req["namespace"] = json!(ns);
    }
    if let Some(sub) = a.subresource {
        req["subResource"] = json!(sub);
        req["requestSubResource"] = json!(sub);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
}

/// The options object of an operation (`fieldManager` for writes).
pub fn options(op: Operation, field_manager: Option<&str>, dry_run: bool) -> Value {
    let mut o = json!({"kind": op.options_kind(), "apiVersion": "meta.k8s.io/v1"});
    if let Some(m) = field_manager.filter(|m| !m.is_empty()) {
        o["fieldManager"] = json!(m);
    }
    if dry_run {
        o["dryRun"] = json!(["All"]);
    }
    o
}

/// What a webhook answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub allowed: bool,
    /// The status a denial carries (its code, reason and message).
    pub code: Option<u16>,
    pub reason: String,
    pub message: String,
    /// A JSONPatch to apply (mutating webhooks only).
    pub patch: Option<Vec<u8>>,
    pub warnings: Vec<String>,
    pub audit_annotations: Vec<(String, String)>,
}

/// Why an answer is no answer (each handled per the webhook's `failurePolicy`).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BadResponse {
    #[error("received invalid webhook response: {0}")]
    Decode(String),
    #[error(
        "received invalid webhook response: expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {0}"
    )]
    Kind(String),
    #[error("received invalid webhook response: webhook response was absent")]
    Absent,
    #[error("received invalid webhook response: expected response.uid={want:?}, got {got:?}")]
    Uid { want: String, got: String },
    #[error("received invalid webhook response: expected response.patchType to be set")]
    PatchTypeMissing,
    #[error(
        "received invalid webhook response: expected response.patchType=\"JSONPatch\", got {0:?}"
    )]
    PatchType(String),
    #[error("received invalid webhook response: the patch is not base64: {0}")]
    PatchEncoding(String),
    #[error("validating webhook may not return a patch")]
    PatchFromValidating,
}

/// Read a webhook's answer to the review with `uid`.
pub fn response(body: &[u8], uid: &str, mutating: bool) -> Result<Verdict, BadResponse> {
    let v: Value = serde_json::from_slice(body).map_err(|e| BadResponse::Decode(e.to_string()))?;
    let (api_version, kind) = (
        v["apiVersion"].as_str().unwrap_or_default(),
        v["kind"].as_str().unwrap_or_default(),
    );
    if api_version != "admission.k8s.io/v1" || kind != "AdmissionReview" {
        return Err(BadResponse::Kind(format!("{api_version}, Kind={kind}")));
    }
    let r = &v["response"];
    if !r.is_object() {
        return Err(BadResponse::Absent);
    }
    let got = r["uid"].as_str().unwrap_or_default();
    if got != uid {
        return Err(BadResponse::Uid {
            want: uid.to_string(),
            got: got.to_string(),
        });
    }
    let patch = match (r["patch"].as_str(), r["patchType"].as_str()) {
        (None | Some(""), _) => None,
        (Some(_), _) if !mutating => return Err(BadResponse::PatchFromValidating),
        (Some(_), None) => return Err(BadResponse::PatchTypeMissing),
        (Some(_), Some(t)) if t != "JSONPatch" => {
            return Err(BadResponse::PatchType(t.to_string()));
        }
        (Some(p), Some(_)) => {
            use base64::Engine;
            Some(
                base64::engine::general_purpose::STANDARD
                    .decode(p.trim())
                    .map_err(|e| BadResponse::PatchEncoding(e.to_string()))?,
            )
        }
    };
    let status = &r["status"];
    let warnings = r["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .take(MAX_WARNINGS)
        .map(|w| w.chars().take(MAX_WARNING_CHARS).collect())
        .collect();
    let audit_annotations = r["auditAnnotations"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect();
    Ok(Verdict {
        allowed: r["allowed"].as_bool().unwrap_or(false),
        code: status["code"].as_u64().and_then(|c| u16::try_from(c).ok()),
        reason: status["reason"].as_str().unwrap_or_default().to_string(),
        message: status["message"].as_str().unwrap_or_default().to_string(),
        patch,
        warnings,
        audit_annotations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(r: Value) -> Vec<u8> {
        serde_json::to_vec(
            &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": r}),
        )
        .unwrap()
    }

    #[test]
    fn a_request_carries_what_kube_sends() {
        let obj = json!({"metadata": {"name": "a"}});
        let a = Attributes {
            operation: Operation::Create,
            group: "",
            version: "v1",
            resource: "configmaps",
            subresource: None,
            namespaced: true,
            object: Some(&obj),
            old_object: None,
            namespace_labels: None,
        };
        let groups = vec!["g".to_string()];
        let user = UserInfo {
            name: "alice",
            groups: &groups,
        };
        let r = request(
            "u1",
            &a,
            "ConfigMap",
            "a",
            Some("ns"),
            &user,
            true,
            options(Operation::Create, Some("kubectl"), true),
        );
        assert_eq!(r["request"]["uid"], "u1");
        assert_eq!(r["request"]["kind"]["kind"], "ConfigMap");
        assert_eq!(r["request"]["resource"]["resource"], "configmaps");
        assert_eq!(r["request"]["namespace"], "ns");
        assert_eq!(r["request"]["operation"], "CREATE");
        assert_eq!(r["request"]["dryRun"], true);
        assert_eq!(r["request"]["oldObject"], Value::Null);
        assert_eq!(r["request"]["options"]["fieldManager"], "kubectl");
        assert_eq!(r["request"]["userInfo"]["username"], "alice");
    }

    #[test]
    fn answers_are_checked_as_kube_checks_them() {
        let ok = response(
            &answer(
                json!({"uid": "u", "allowed": true, "patchType": "JSONPatch",
                "patch": "W10=", "warnings": ["w"]}),
            ),
            "u",
            true,
        )
        .unwrap();
        assert!(ok.allowed);
        assert_eq!(ok.patch.as_deref(), Some(b"[]".as_slice()));
        assert_eq!(ok.warnings, vec!["w".to_string()]);
        let denied = response(
            &answer(
                json!({"uid": "u", "allowed": false, "status": {"code": 403, "message": "no"}}),
            ),
            "u",
            false,
        )
        .unwrap();
        assert_eq!((denied.allowed, denied.code), (false, Some(403)));
        assert_eq!(
            response(&answer(json!({"uid": "x", "allowed": true})), "u", false),
            Err(BadResponse::Uid {
                want: "u".into(),
                got: "x".into()
            })
        );
        assert!(matches!(
            response(b"garbage", "u", false),
            Err(BadResponse::Decode(_))
        ));
        assert_eq!(
            response(
                &answer(json!({"uid": "u", "allowed": true, "patch": "W10="})),
                "u",
                true
            ),
            Err(BadResponse::PatchTypeMissing)
        );
        assert_eq!(
            response(
                &answer(
                    json!({"uid": "u", "allowed": true, "patch": "W10=", "patchType": "JSONPatch"})
                ),
                "u",
                false
            ),
            Err(BadResponse::PatchFromValidating)
        );
        assert!(matches!(
            response(br#"{"apiVersion":"v1","kind":"Status"}"#, "u", false),
            Err(BadResponse::Kind(_))
        ));
    }
}
