//! `pods/ephemeralcontainers` (`kubectl debug`): a Pod the server runs itself (a local
//! cluster's) is written through the pipeline, which keeps every change but the ephemeral
//! containers out and checks them as kube does. A Pod of a logical cluster runs on a
//! physical cluster: the change is checked here the same way (and against the namespace's
//! Pod Security level), then made there — through that cluster's syncer, on the cluster's
//! own API — and the mirror answered with the ephemeral containers the cluster now has; the
//! syncer's next mirror brings their status.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use sluice_api::ClusterName;

use super::objects;
use super::respond::{Ctx, Resp};
use super::scope::Scope;
use crate::admission::ephemeral_containers::update_causes;
use crate::admission::pod_security::{Mode, PodSecurity};
use crate::errors::{ApiError, ApiResult};
use crate::patch::PatchType;
use crate::pipeline::Patcher;
use crate::pipeline::hooks::HookCx;
use crate::resources::Subresource;
use crate::state::ApiState;

/// How long the pod's cluster may take to answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);
/// Bytes of the cluster's answer read (a Pod).
const MAX_ANSWER: usize = 4 << 20;

pub async fn serve(
    state: &ApiState,
    ctx: &mut Ctx,
    scope: &Scope<'_>,
    name: &str,
    change: Patcher<'_>,
) -> ApiResult<Resp> {
    if let Patcher::Patch(PatchType::Apply, _) = change {
        return Err(ApiError::UnsupportedMediaType(
            "server-side apply of subresources is not supported".into(),
        ));
    }
    let (_, pod) = super::pod_container::pod(state, scope, name)?;
    if state.node_streaming.is_none()
        && let Some(cluster) = super::logs::running_on(&pod)
    {
        let cluster = ClusterName::new(cluster);
        return elsewhere(state, ctx, scope, name, pod, &cluster, change).await;
    }
    let sub = Some(Subresource::EphemeralContainers);
    match change {
        Patcher::Replace(body) => objects::update(state, ctx, scope, name, sub, body).await,
        Patcher::Patch(pt, body) => objects::patch(state, ctx, scope, name, sub, pt, body).await,
    }
}

/// The change to `pod`, which runs on `cluster`: checked here, made there.
async fn elsewhere(
    state: &ApiState,
    ctx: &mut Ctx,
    scope: &Scope<'_>,
    name: &str,
    pod: Value,
    cluster: &ClusterName,
    change: Patcher<'_>,
) -> ApiResult<Resp> {
    let t = scope.t;
    let asked = match change {
        Patcher::Replace(body) => serde_json::from_slice::<Value>(body)
            .map_err(|e| ApiError::BadRequest(format!("the request body is not a Pod: {e}")))?,
        Patcher::Patch(pt, body) => crate::pipeline::apply_patch(state, t, &pod, pt, body)?,
    };
    if let Some(rv) = asked["metadata"]["resourceVersion"].as_str()
        && Some(rv) != pod["metadata"]["resourceVersion"].as_str()
    {
        return Err(ApiError::conflict(&t.gr, name));
    }
    let mut new = crate::object::ephemeral_update(&pod, &asked);
    crate::defaults::apply(&t.kind, &mut new);
    let mut causes: Vec<_> = crate::validation::check_spec(&t.kind, &new)
        .into_iter()
        .filter(|c| c.field.starts_with("spec.ephemeralContainers"))
        .collect();
    causes.extend(update_causes(&pod, &new));
    if !causes.is_empty() {
        return Err(crate::pipeline::invalid(t, name, causes));
    }
    let logical = scope.cluster.as_ref().ok_or(ApiError::MethodNotAllowed)?;
    let cx = HookCx {
        state,
        t,
        cluster: logical,
        manager: None,
        user: Some(&ctx.user),
        warnings: Default::default(),
    };
    PodSecurity(Mode::EveryTemplate).check(&cx, &new)?;
    ctx.warnings
        .extend(cx.warnings.into_inner().unwrap_or_default());
    if crate::object::spec_changed(&new, &pod) && !ctx.dry_run() {
        let namespace = scope.namespace.as_deref().unwrap_or("default");
        let made = make_there(state, logical, namespace, name, &new, cluster).await?;
        new["spec"]["ephemeralContainers"] = made["spec"]["ephemeralContainers"].clone();
        if let Some(statuses) = made["status"].get("ephemeralContainerStatuses") {
            new["status"]["ephemeralContainerStatuses"] = statuses.clone();
        }
    }
    Ok(super::respond::json_value(StatusCode::OK, &new))
}

/// Give the downstream Pod `new`'s ephemeral containers (a strategic merge by name: the
/// ones there stay); its answer, the Pod as the cluster has it.
async fn make_there(
    state: &ApiState,
    logical: &sluice_api::LogicalClusterPath,
    namespace: &str,
    name: &str,
    new: &Value,
    cluster: &ClusterName,
) -> ApiResult<Value> {
    let base = super::remote_logs::endpoint(state, cluster)?;
    let path = format!(
        "/ephemeralcontainers/{}/{name}",
        crate::admission::downstream_names::of_namespace(state, logical, namespace),
    );
    let patch = json!({"spec": {"ephemeralContainers": new["spec"]["ephemeralContainers"]}});
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/strategic-merge-patch+json"),
    );
    let failed = |e: &dyn std::fmt::Display| {
        tracing::warn!(%cluster, error = %e, "adding an ephemeral container on a cluster failed");
        ApiError::BadRequest(format!("cluster {cluster}'s syncer was not reached: {e}"))
    };
    let ask = async {
        let resp = state
            .agents
            .send(
                &base,
                cluster,
                http::Method::PATCH,
                &path,
                &headers,
                Bytes::from(patch.to_string()),
            )
            .await
            .map_err(|e| failed(&e))?;
        let status = resp.status();
        let body = http_body_util::Limited::new(resp.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| failed(&e))?
            .to_bytes();
        Ok::<_, ApiError>((status, body))
    };
    let (status, body) = tokio::time::timeout(ANSWER_WITHIN, ask)
        .await
        .map_err(|_| failed(&format!("no answer within {ANSWER_WITHIN:?}")))??;
    let answer = serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null);
    if !status.is_success() {
        // The cluster's own refusal (a Status), told as such.
        let message = answer["message"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| String::from_utf8_lossy(&body).trim().to_string());
        return Err(ApiError::BadRequest(format!(
            "cluster {cluster}: {message}"
        )));
    }
    Ok(answer)
}
