//! Health, version and metrics endpoints.

use http::{HeaderValue, Response, StatusCode, header};
use serde_json::json;

use super::respond::{Resp, full, json_value};
use crate::state::ApiState;

/// The Kubernetes version whose API Sluice serves (its OpenAPI facts come from it).
pub const KUBE_MAJOR: &str = "1";
pub const KUBE_MINOR: &str = "35";

pub fn health(ok: bool) -> Resp {
    let mut r = Response::new(full(if ok { "ok" } else { "not ready" }));
    *r.status_mut() = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    r
}

pub fn version() -> Resp {
    json_value(
        StatusCode::OK,
        &json!({
            "major": KUBE_MAJOR,
            "minor": KUBE_MINOR,
            "gitVersion": format!("v{KUBE_MAJOR}.{KUBE_MINOR}.0-sluice.{}", env!("CARGO_PKG_VERSION")),
            "gitCommit": "",
            "gitTreeState": "clean",
            "buildDate": "",
            "goVersion": "n/a (rust)",
            "compiler": "rustc",
            "platform": format!("{}/{}", std::env::consts::OS, match std::env::consts::ARCH { "x86_64" => "amd64", "aarch64" => "arm64", a => a }),
        }),
    )
}

pub fn metrics(state: &ApiState) -> Resp {
    state
        .metrics
        .storage_revision
        .set(state.store.revision().0 as i64);
    let mut r = Response::new(full(crate::metrics::render(&state.registry)));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    r
}
