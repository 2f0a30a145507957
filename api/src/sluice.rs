//! Types of the `sluice.dev/v1alpha1` group.
//!
//! Only the spec/status payloads are typed here; object metadata is the usual
//! `ObjectMeta`. The API server uses these for OpenAPI schemas and validation.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, ObjectMeta, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "sluice.dev";
pub const VERSION: &str = "v1alpha1";

/// A child logical cluster `<parent>:<name>` of the logical cluster it is created in.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "dev.sluice.v1alpha1.Workspace")]
pub struct Workspace {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<WorkspaceSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<WorkspaceStatus>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "dev.sluice.v1alpha1.WorkspaceSpec")]
pub struct WorkspaceSpec {
    /// Free-form type name, for tooling; Sluice does not interpret it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#type: Option<String>,
    /// What the workspace's tenants may do on the shared clusters. Set or changed only by
    /// identities that may `update` `workspaces/policy` here (the platform admin); a
    /// workspace is never looser than its parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<crate::tenancy::WorkspacePolicy>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "dev.sluice.v1alpha1.WorkspaceStatus")]
pub struct WorkspaceStatus {
    /// `Ready` or `Terminating`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The logical cluster path of the workspace, e.g. `root:shop`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The URL path prefix that serves it, e.g. `/clusters/root:shop`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// A physical cluster that Sluice can place workloads on.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "dev.sluice.v1alpha1.Cluster")]
pub struct Cluster {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<ClusterSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ClusterStatus>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "dev.sluice.v1alpha1.ClusterSpec")]
pub struct ClusterSpec {
    /// API server URL of the physical cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<String>,
    /// MCS cluster id (`cluster.clusterset.k8s.io`); defaults to the object name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    /// What may be placed here, counted against the requests of the placed workloads;
    /// unset (or an unset field) means unbounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<ClusterCapacity>,
    /// East-west gateway addresses (`host:port`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gateways: Vec<String>,
    /// Where the cluster's ingress takes external traffic (`host:port`, the host an IP
    /// address): the clusterset DNS answers Ingress hosts with these, of every Ready cluster
    /// that is not being drained.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ingresses: Vec<String>,
    /// Where the cluster's dataplanes serve their Prometheus counts (`http://host:port/metrics`):
    /// `sluice console` reads each Service's traffic share and p99 from them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<String>,
    /// PEM roots that gateway peers of this cluster are verified against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_bundle: Option<String>,
    /// No new placements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unschedulable: Option<bool>,
    /// Move every placed namespace away.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<bool>,
    /// Where the cluster's ServiceImport VIPs come from. Unset: `Sluice` for a local
    /// cluster (label `sluice.dev/index`, its dataplane serves the VIPs), `DerivedService`
    /// for any other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub import_vips: Option<ImportVips>,
}

/// Bounds on what is placed on a cluster: pods, and the CPU and memory their containers
/// request.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "dev.sluice.v1alpha1.ClusterCapacity")]
pub struct ClusterCapacity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Quantity>,
}

/// How a member cluster gets the VIP of a ClusterSetIP ServiceImport.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ImportVips {
    /// Allocated by the MCS controller from the cluster's clusterset range
    /// (`127.(60+i).0.0/16`); Sluice's dataplane serves it.
    Sluice,
    /// A selector-less "derived" Service per import, whose ClusterIP the cluster's API
    /// server allocates and its kube-proxy serves (the MCS EndpointSlices are labelled
    /// with the derived Service's name): what a real cluster needs.
    DerivedService,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "dev.sluice.v1alpha1.ClusterStatus")]
pub struct ClusterStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Last heartbeat of the cluster's syncer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_time: Option<Time>,
    /// Namespaces currently placed on the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placed_namespaces: Option<i64>,
    /// What the placed workloads request (pods, cpu, memory), against `spec.capacity`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocated: Option<ClusterCapacity>,
}

/// Where the namespaces of a logical cluster run.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "dev.sluice.v1alpha1.Placement")]
pub struct Placement {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PlacementSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PlacementStatus>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "dev.sluice.v1alpha1.PlacementSpec")]
pub struct PlacementSpec {
    /// Selects `Cluster` objects by their labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location_selector: Option<LabelSelector>,
    /// Selects the namespaces this placement applies to; all when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// `Single` (one cluster) or `Spread` (every selected cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// How traffic leaves a cluster the namespaces move off; defaults when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_shift: Option<TrafficShift>,
}

/// How traffic leaves a cluster when a namespace moves off it (or it is drained): once the
/// new clusters are available and imported everywhere, the old cluster's traffic weight
/// goes from 100 to 0 in `steps` equal steps over `durationSeconds`; then its endpoints
/// are marked draining, and it is removed once no dataplane of the clusterset holds a
/// live connection or request to them — or `maxDrainSeconds` later, cutting what is left.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "dev.sluice.v1alpha1.TrafficShift")]
pub struct TrafficShift {
    /// Seconds from the first step to weight 0 (default 5; 0 to 3600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_seconds: Option<u32>,
    /// Steps of the shift (default 5; 1 to 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<u32>,
    /// Seconds a drained cluster's live connections may take to finish before they are
    /// cut (default 30; 0 to 3600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_drain_seconds: Option<u32>,
    /// When a move is rolled back by itself (defaults when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<Rollback>,
}

/// While traffic shifts off the old clusters, the dataplanes measure how the old and the
/// new clusters answer; a move whose new clusters answer worse beyond these bounds is
/// rolled back: traffic shifts back, the old clusters stay, the new ones go, and the
/// namespace says `MoveFailed` with the figures until its target changes again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "dev.sluice.v1alpha1.Rollback")]
pub struct Rollback {
    /// Roll back at all (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Percentage points by which the new clusters' error rate may exceed the old ones'
    /// (default 2; 0 to 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_error_rate_increase_percent: Option<u32>,
    /// How many times the old clusters' p99 latency the new clusters' may reach, and at
    /// least 50 ms more (default 10; 1 to 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_p99_factor: Option<u32>,
    /// Requests the new clusters must have answered before they are judged (default 50;
    /// 1 to 1000000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_requests: Option<u32>,
}

impl Rollback {
    pub fn enabled(&self) -> bool {
        self.enabled.unwrap_or(true)
    }

    pub fn max_error_rate_increase_percent(&self) -> u32 {
        self.max_error_rate_increase_percent.unwrap_or(2).min(100)
    }

    pub fn max_p99_factor(&self) -> u32 {
        self.max_p99_factor.unwrap_or(10).clamp(1, 1000)
    }

    pub fn min_requests(&self) -> u32 {
        self.min_requests.unwrap_or(50).clamp(1, 1_000_000)
    }
}

impl TrafficShift {
    pub const DEFAULT_DURATION_SECONDS: u32 = 5;
    pub const MAX_DURATION_SECONDS: u32 = 3600;
    pub const DEFAULT_STEPS: u32 = 5;
    pub const MAX_STEPS: u32 = 100;
    pub const DEFAULT_MAX_DRAIN_SECONDS: u32 = 30;
    pub const MAX_MAX_DRAIN_SECONDS: u32 = 3600;

    pub fn duration(&self) -> std::time::Duration {
        std::time::Duration::from_secs(u64::from(
            self.duration_seconds
                .unwrap_or(Self::DEFAULT_DURATION_SECONDS)
                .min(Self::MAX_DURATION_SECONDS),
        ))
    }

    /// How long live connections to a drained cluster may stay, after the weight reached 0.
    pub fn max_drain(&self) -> std::time::Duration {
        std::time::Duration::from_secs(u64::from(
            self.max_drain_seconds
                .unwrap_or(Self::DEFAULT_MAX_DRAIN_SECONDS)
                .min(Self::MAX_MAX_DRAIN_SECONDS),
        ))
    }

    pub fn steps(&self) -> u32 {
        self.steps
            .unwrap_or(Self::DEFAULT_STEPS)
            .clamp(1, Self::MAX_STEPS)
    }

    /// The leaving cluster's weight `elapsed` after the shift began: 100, then down by
    /// `100 / steps` every `duration / steps`, 0 from `duration` on.
    pub fn weight_at(&self, elapsed: std::time::Duration) -> u32 {
        let total = self.duration();
        if elapsed >= total {
            return 0;
        }
        let steps = self.steps();
        let taken = (elapsed.as_secs_f64() / total.as_secs_f64() * f64::from(steps)) as u32;
        100 - 100 * taken.min(steps) / steps
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "dev.sluice.v1alpha1.PlacementStatus")]
pub struct PlacementStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub selected_clusters: Vec<String>,
}

resource!(
    Cluster,
    "sluice.dev",
    "v1alpha1",
    "Cluster",
    "clusters",
    k8s_openapi::ClusterResourceScope
);

#[cfg(test)]
mod traffic_shift_tests {
    use super::TrafficShift;
    use std::time::Duration;

    #[test]
    fn the_weight_steps_down_to_zero_over_the_window() {
        let d = TrafficShift::default();
        let at = |ms: u64| d.weight_at(Duration::from_millis(ms));
        assert_eq!(
            [
                at(0),
                at(999),
                at(1000),
                at(2500),
                at(4999),
                at(5000),
                at(60_000)
            ],
            [100, 100, 80, 60, 20, 0, 0]
        );
        let instant = TrafficShift {
            duration_seconds: Some(0),
            ..Default::default()
        };
        assert_eq!(instant.weight_at(Duration::ZERO), 0);
        let three = TrafficShift {
            duration_seconds: Some(3),
            steps: Some(3),
            ..Default::default()
        };
        assert_eq!(three.weight_at(Duration::from_millis(1500)), 67);
    }
}
