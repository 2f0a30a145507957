//! Types of `metrics.k8s.io/v1beta1`, the resource metrics API metrics-server serves and
//! `kubectl top` reads: what each Pod's containers use now, measured over a window.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "metrics.k8s.io";
pub const VERSION: &str = "v1beta1";

/// The resource usage of one Pod's containers.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "io.k8s.metrics.pkg.apis.metrics.v1beta1.PodMetrics")]
pub struct PodMetrics {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The end of the window the usage was measured over.
    pub timestamp: Time,
    /// The window's length, as a duration (`"1.5s"`).
    pub window: String,
    pub containers: Vec<ContainerMetrics>,
}

/// The resource usage of one container: `cpu` (cores) and `memory` (the working set).
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "io.k8s.metrics.pkg.apis.metrics.v1beta1.ContainerMetrics")]
pub struct ContainerMetrics {
    pub name: String,
    pub usage: BTreeMap<String, Quantity>,
}
