//! The `scale` subresource: a workload's replicas read and written through its Scale.

use serde_json::{Value, json};

use super::commit::{self, Writer};
use super::params::parse_json;
use super::steps::*;

use crate::errors::{ApiError, ApiResult, Cause};
use crate::object;
use crate::patch::{self, PatchType};
use crate::resources::ResourceType;
use crate::state::ApiState;
use crate::storage::{Expect, Op, StorageError};

/// `autoscaling/v1` Scale view of a workload (custom resources: the CRD's scale paths).
pub fn scale_of(t: &ResourceType, obj: &Value) -> Value {
    let scale = t.custom().and_then(|c| c.scale.as_ref());
    let first_int =
        |p: &crate::jsonpath::JsonPath| p.eval(obj).first().and_then(|v| v.as_i64()).unwrap_or(0);
    let (spec_replicas, status_replicas, selector) = match scale {
        Some(s) => (
            first_int(&s.spec_replicas),
            first_int(&s.status_replicas),
            s.label_selector
                .as_ref()
                .and_then(|p| {
                    p.eval(obj)
                        .first()
                        .and_then(|v| v.as_str())
                        .map(str::to_string)
                })
                .unwrap_or_default(),
        ),
        None => (
            obj["spec"]["replicas"].as_i64().unwrap_or(0),
            obj["status"]["replicas"].as_i64().unwrap_or(0),
            obj["spec"]["selector"]["matchLabels"]
                .as_object()
                // A ReplicationController's selector is a plain map.
                .or_else(|| {
                    (t.kind == "ReplicationController")
                        .then(|| obj["spec"]["selector"].as_object())
                        .flatten()
                })
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default(),
        ),
    };
    let m = &obj["metadata"];
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": m["name"], "namespace": m["namespace"], "uid": m["uid"],
            "resourceVersion": m["resourceVersion"], "creationTimestamp": m["creationTimestamp"],
        },
        "spec": {"replicas": spec_replicas},
        "status": {"replicas": status_replicas, "selector": selector},
    })
}

/// Set the desired replicas of a workload (custom resources: at the CRD's spec path).
fn set_replicas(t: &ResourceType, obj: &mut Value, replicas: i64) {
    let path: Vec<String> = match t.custom().and_then(|c| c.scale.as_ref()) {
        Some(s) => s.spec_replicas_field.clone(),
        None => vec!["spec".into(), "replicas".into()],
    };
    let mut cur = obj;
    for (i, seg) in path.iter().enumerate() {
        if i + 1 == path.len() {
            cur[seg.as_str()] = json!(replicas);
        } else {
            if !cur[seg.as_str()].is_object() {
                cur[seg.as_str()] = json!({});
            }
            cur = &mut cur[seg.as_str()];
        }
    }
}

/// How a scale write gives the wanted Scale.
pub enum Patcher<'a> {
    Replace(&'a [u8]),
    Patch(PatchType, &'a [u8]),
}

/// Write a workload's replicas through its Scale; returns the Scale written.
pub async fn update_scale(
    state: &ApiState,
    target: &Target,
    name: &str,
    how: Patcher<'_>,
    dry_run: bool,
) -> ApiResult<Value> {
    let t = &*target.t;
    let key = target.key(name);
    for _ in 0..WRITE_RETRIES {
        let (entry, old) = current(state, t, &key, name)?;
        let current = scale_of(t, &old);
        let wanted = match &how {
            Patcher::Replace(body) => parse_json(body)?,
            Patcher::Patch(PatchType::Json, body) => patch::json_patch(&current, body)
                .map_err(|e| ApiError::BadRequest(e.to_string()))?,
            Patcher::Patch(PatchType::Apply, _) => {
                return Err(ApiError::UnsupportedMediaType(
                    "server-side apply is not supported yet".into(),
                ));
            }
            Patcher::Patch(_, body) => patch::merge_patch(&current, body)
                .map_err(|e| ApiError::BadRequest(e.to_string()))?,
        };
        let pinned = wanted["metadata"]["resourceVersion"]
            .as_str()
            .map(str::to_string);
        if pinned
            .as_ref()
            .is_some_and(|rv| *rv != entry.revision.to_string())
        {
            return Err(ApiError::conflict(&t.gr, name));
        }
        let replicas = wanted["spec"]["replicas"].as_i64().unwrap_or(0);
        if replicas < 0 {
            return Err(invalid(
                t,
                name,
                vec![Cause::invalid(
                    "spec.replicas",
                    &replicas.to_string(),
                    "must be greater than or equal to 0",
                )],
            ));
        }
        let mut new = old.clone();
        set_replicas(t, &mut new, replicas);
        object::prepare_update(
            &mut new,
            &old,
            t,
            state.annotation_for(&target.cluster),
            false,
        );
        let bytes = encode(state, &new)?;
        if dry_run {
            return Ok(scale_of(t, &new));
        }
        match commit::commit(
            &state.store,
            Writer::Request,
            Op::Put {
                key: key.clone(),
                value: bytes,
                expect: Expect::At(entry.revision),
            },
        )
        .await
        {
            Ok(c) => {
                object::set_resource_version(&mut new, c.revision.0);
                return Ok(scale_of(t, &new));
            }
            Err(StorageError::Conflict { .. }) if pinned.is_none() => continue,
            Err(e) => return Err(ApiError::from_storage(e, &t.gr, name)),
        }
    }
    Err(ApiError::conflict(&t.gr, name))
}
