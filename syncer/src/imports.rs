//! What this cluster's MCS imports hold, reported up: for each namespace of a logical
//! cluster, how many Ready endpoints each source cluster contributes to each Service, as the
//! MCS controller's EndpointSlices here say. The placement controllers read the reports of
//! every member cluster to know that a move's new cluster is reachable everywhere before the
//! old one is touched.
//!
//! Every cluster holds a namespace for every placed namespace of the clusterset (MCS
//! namespace sameness: imports exist only where the namespace does), so a consumer in any
//! cluster reaches a Service wherever it runs; where nothing of the namespace runs, the
//! namespace holds only imports.

use std::sync::Arc;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use sluice_api::mcs::{
    ANNOTATION_DRAINING, ANNOTATION_WEIGHT, DEFAULT_WEIGHT, LABEL_SERVICE_NAME,
    LABEL_SOURCE_CLUSTER, is_managed,
};
use sluice_api::sync::{
    HEALTH_ANNOTATION, HealthReport, ImportReport, TRAFFIC_ANNOTATION, TrafficReport,
};

/// The import report of one namespace from its MCS EndpointSlices, by Service and source
/// cluster: Ready endpoints (a missing `ready` condition means ready, as in Kubernetes),
/// the source's weight and draining state, and from the dataplane's reports on the namespace
/// the live traffic to it once it drains and how it answered while a shift is under way.
pub fn report(slices: &[Arc<EndpointSlice>], dataplane: &Dataplane) -> ImportReport {
    let mut out = ImportReport::new();
    for s in slices.iter().filter(|s| is_managed(&s.metadata)) {
        let labels = s.metadata.labels.as_ref();
        let (Some(service), Some(source)) = (
            labels.and_then(|l| l.get(LABEL_SERVICE_NAME)),
            labels.and_then(|l| l.get(LABEL_SOURCE_CLUSTER)),
        ) else {
            continue;
        };
        let ready = s
            .endpoints
            .iter()
            .flatten()
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
            .count() as u32;
        let annotation = |k: &str| s.metadata.annotations.as_ref().and_then(|a| a.get(k));
        let weight = annotation(ANNOTATION_WEIGHT)
            .and_then(|w| w.trim().parse::<u32>().ok())
            .filter(|w| *w != DEFAULT_WEIGHT);
        let draining =
            annotation(ANNOTATION_DRAINING).is_some_and(|d| d.trim().eq_ignore_ascii_case("true"));
        let entry = out
            .entry(service.clone())
            .or_default()
            .entry(source.clone())
            .or_default();
        entry.ready += ready;
        entry.weight = weight;
        entry.draining = draining;
        entry.active = dataplane
            .traffic
            .as_ref()
            .and_then(|t| t.get(service))
            .and_then(|sources| sources.get(source))
            .copied();
        entry.health = dataplane
            .health
            .as_ref()
            .and_then(|t| t.get(service))
            .and_then(|sources| sources.get(source))
            .copied();
    }
    out
}

/// What the cluster's dataplane reports on a downstream namespace.
#[derive(Debug, Default)]
pub struct Dataplane {
    pub traffic: Option<TrafficReport>,
    pub health: Option<HealthReport>,
}

impl Dataplane {
    /// The reports on `ns` (garbage reads as none: a move then waits, as for a dataplane
    /// that has not reported).
    pub fn of(ns: &k8s_openapi::api::core::v1::Namespace) -> Self {
        let a = ns.metadata.annotations.as_ref();
        let parse = |k: &str| a.and_then(|a| a.get(k));
        Self {
            traffic: parse(TRAFFIC_ANNOTATION).and_then(|v| serde_json::from_str(v).ok()),
            health: parse(HEALTH_ANNOTATION).and_then(|v| serde_json::from_str(v).ok()),
        }
    }
}

/// The annotation value of `report`: `None` (no annotation) when the namespace imports
/// nothing.
pub fn annotation_value(report: &ImportReport) -> Option<String> {
    if report.is_empty() {
        return None;
    }
    serde_json::to_string(report).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(service: &str, source: &str, ready: &[Option<bool>], managed: bool) -> EndpointSlice {
        slice_with(service, source, ready, managed, serde_json::json!({}))
    }

    fn slice_with(
        service: &str,
        source: &str,
        ready: &[Option<bool>],
        managed: bool,
        annotations: serde_json::Value,
    ) -> EndpointSlice {
        let mut labels = std::collections::BTreeMap::new();
        labels.insert(LABEL_SERVICE_NAME.to_string(), service.to_string());
        labels.insert(LABEL_SOURCE_CLUSTER.to_string(), source.to_string());
        if managed {
            labels.insert(
                sluice_api::mcs::LABEL_MANAGED_BY.to_string(),
                sluice_api::mcs::MANAGED_BY.to_string(),
            );
        }
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("{service}-{source}"), "namespace": "ns", "labels": labels,
                         "annotations": annotations},
            "addressType": "IPv4",
            "endpoints": ready.iter().enumerate().map(|(i, r)| serde_json::json!({
                "addresses": [format!("10.0.0.{i}")],
                "conditions": {"ready": r},
            })).collect::<Vec<_>>(),
        }))
        .unwrap()
    }

    #[test]
    fn ready_endpoints_are_counted_by_service_and_source() {
        let slices = [
            slice("web", "east", &[Some(true), None, Some(false)], true),
            slice_with(
                "web",
                "west",
                &[Some(true)],
                true,
                serde_json::json!({"sluice.dev/weight": "0", "sluice.dev/draining": "true"}),
            ),
            slice("db", "east", &[Some(false)], true),
            // A Service's own slice, not an import.
            slice("web", "east", &[Some(true)], false),
        ]
        .map(Arc::new);
        let dataplane = Dataplane {
            traffic: serde_json::from_value(serde_json::json!({"web": {"west": 3}})).unwrap(),
            health: serde_json::from_value(
                serde_json::json!({"web": {"west": {"requests": 9, "errors": 1, "p99Micros": 700}}}),
            )
            .unwrap(),
        };
        assert_eq!(
            report(&slices, &Dataplane::default())["web"]["west"].active,
            None
        );
        let r = report(&slices, &dataplane);
        assert_eq!(r["web"]["east"].ready, 2);
        assert_eq!(
            r["web"]["east"].weight, None,
            "the default weight is not said"
        );
        assert_eq!(
            r["web"]["west"],
            sluice_api::sync::SourceImport {
                ready: 1,
                weight: Some(0),
                draining: true,
                active: Some(3),
                health: Some(sluice_api::sync::SourceHealth {
                    requests: 9,
                    errors: 1,
                    p99_micros: 700
                }),
            }
        );
        assert_eq!(r["db"]["east"].ready, 0);
        assert_eq!(r.len(), 2);
        let text = annotation_value(&r).unwrap();
        assert!(text.contains(r#""east":{"ready":2}"#), "{text}");
        let back: ImportReport = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
        assert_eq!(annotation_value(&ImportReport::new()), None);
    }
}
