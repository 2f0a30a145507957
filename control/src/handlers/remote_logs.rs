//! `kubectl logs` for a pod mirrored from a physical cluster (label `sluice.dev/cluster`):
//! forwarded to the log endpoint of that cluster's syncer, whose URL its heartbeat Lease
//! carries, with the query kubectl sent (`container`, `follow`, `previous`, `tailLines`,
//! ...), and streamed back as the cluster sends it. Both ends prove a per-cluster identity
//! ([`crate::agent_client`]).

use bytes::Bytes;
use http_body_util::BodyExt;
use serde_json::Value;
use sluice_api::{ClusterName, LogicalClusterPath};

use super::respond::{Ctx, Resp};
use crate::errors::{ApiError, ApiResult};
use crate::state::ApiState;

/// The query parameters of `pods/log` that travel.
const LOG_PARAMETERS: [&str; 8] = [
    "container",
    "follow",
    "previous",
    "tailLines",
    "limitBytes",
    "sinceSeconds",
    "sinceTime",
    "timestamps",
];

/// The log endpoint of `cluster`'s syncer.
pub(super) fn endpoint(state: &ApiState, cluster: &ClusterName) -> ApiResult<String> {
    crate::agent_client::syncer_url(&state.store, cluster).ok_or_else(|| {
        ApiError::BadRequest(format!(
            "the logs of pods on cluster {cluster} are not reachable: its syncer has not published a log endpoint"
        ))
    })
}

pub async fn serve(
    state: &ApiState,
    ctx: &Ctx,
    logical_cluster: &LogicalClusterPath,
    namespace: &str,
    pod: &str,
    cluster: &ClusterName,
) -> ApiResult<Resp> {
    let base = endpoint(state, cluster)?;
    let query = {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for p in LOG_PARAMETERS {
            if let Some(v) = ctx.query.get(p) {
                q.append_pair(p, v);
            }
        }
        q.finish()
    };
    let path = format!(
        "/logs/{}/{pod}?{query}",
        crate::admission::downstream_names::of_namespace(state, logical_cluster, namespace),
    );
    let resp = state.agents.get(&base, cluster, &path).await.map_err(|e| {
        tracing::warn!(%cluster, error = %e, "reaching a cluster's syncer for logs failed");
        ApiError::BadRequest(format!("cluster {cluster}'s syncer was not reached: {e}"))
    })?;
    let unreachable = |e: &dyn std::fmt::Display| {
        ApiError::BadRequest(format!("cluster {cluster}'s syncer did not answer: {e}"))
    };
    let status = resp.status();
    if !status.is_success() {
        // The cluster's own error (a Status), told as such.
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| unreachable(&e))?
            .to_bytes();
        let message = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|s| s["message"].as_str().map(str::to_string))
            .unwrap_or_else(|| String::from_utf8_lossy(&body).trim().to_string());
        return Err(ApiError::BadRequest(format!(
            "cluster {cluster}: {message}"
        )));
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    let mut body = resp.into_body();
    tokio::spawn(async move {
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data()
                && tx.send(data).await.is_err()
            {
                return;
            }
        }
    });
    Ok(super::respond::streamed(rx))
}
