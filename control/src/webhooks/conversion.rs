//! Calling a CRD's conversion webhook: objects sent in one `ConversionReview` (in pages of
//! [`MAX_OBJECTS`]) through the same transport as admission webhooks — a `url` directly,
//! a `service` wherever it runs in the CRD's logical cluster — and the answer taken as kube
//! takes it ([`crate::crd::conversion::converted`]). A failure is kube's 500.

use std::time::Instant;

use bytes::Bytes;
use serde_json::Value;
use sluice_api::LogicalClusterPath;

use super::transport::{self, Endpoint};
use crate::crd::conversion::{ConversionWebhook, MAX_OBJECTS, TIMEOUT, converted, review};
use crate::errors::{ApiError, ApiResult};
use crate::state::ApiState;

/// `objects` (of `kind`, in `cluster`) in apiVersion `desired`; those already in it are
/// not sent.
pub async fn convert(
    state: &ApiState,
    cluster: &LogicalClusterPath,
    hook: &ConversionWebhook,
    kind: &str,
    desired: &str,
    mut objects: Vec<Value>,
) -> ApiResult<Vec<Value>> {
    let pending: Vec<usize> = (0..objects.len())
        .filter(|i| objects[*i]["apiVersion"] != desired)
        .collect();
    for page in pending.chunks(MAX_OBJECTS) {
        let originals: Vec<Value> = page.iter().map(|i| objects[*i].take()).collect();
        let out = call(state, cluster, hook, kind, desired, &originals).await?;
        for (i, o) in page.iter().zip(out) {
            objects[*i] = o;
        }
    }
    Ok(objects)
}

async fn call(
    state: &ApiState,
    cluster: &LogicalClusterPath,
    hook: &ConversionWebhook,
    kind: &str,
    desired: &str,
    originals: &[Value],
) -> ApiResult<Vec<Value>> {
    let failed = |why: String| {
        ApiError::Internal(format!(
            "conversion webhook for {desired}, Kind={kind} failed: {why}"
        ))
    };
    let uid = uuid::Uuid::new_v4().to_string();
    let body = serde_json::to_vec(&review(&uid, desired, originals))
        .map(Bytes::from)
        .map_err(|e| failed(e.to_string()))?;
    let endpoint = Endpoint {
        client: &hook.client,
        ca_bundle: &hook.ca_bundle,
        timeout: TIMEOUT,
    };
    let started = Instant::now();
    let span = tracing::info_span!("conversion webhook", kind, desired, objects = originals.len(),
        webhook = %hook.client.describe(), cluster = %cluster);
    let answer = tracing::Instrument::instrument(
        transport::call(state, cluster, endpoint, body),
        span.clone(),
    )
    .await;
    let result = match answer {
        Err(e) => Err(failed(format!(
            "Post \"{}?timeout={}s\": {e}",
            hook.client.describe(),
            TIMEOUT.as_secs()
        ))),
        Ok(bytes) => converted(&bytes, &uid, desired, originals).map_err(|e| failed(e.to_string())),
    };
    let name = format!("{kind}.{desired}");
    state.metrics.record_webhook(
        &name,
        "conversion",
        if result.is_ok() { "converted" } else { "error" },
        started.elapsed(),
    );
    if let Err(e) = &result {
        tracing::warn!(parent: &span, error = %e, "conversion webhook failed");
    }
    result
}
