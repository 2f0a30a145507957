//! Whether a cluster a namespace moves to is reachable from everywhere: every Service of the
//! namespace has, in the MCS imports of every member cluster, the Ready endpoints the new
//! cluster's workloads give it. Until then the old cluster is not touched, so a consumer in
//! any cluster always has somewhere to go.
//!
//! Each cluster's syncer reports what its imports hold on the upstream namespace
//! (`imports.sluice.dev/<cluster>`, see `sluice_api::sync::ImportReport`); what the new
//! cluster should contribute is known upstream, from the Services' selectors and the
//! workloads' pod templates and shares.

use std::collections::BTreeMap;

use serde_json::Value;
use sluice_api::ClusterName;
use sluice_api::sync::{ImportReport, imports_annotation};

use crate::shift::DrainReport;
use crate::status;

/// A member of the MCS clusterset that imports: a cluster whose syncer is alive and which
/// the MCS controller admitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub name: ClusterName,
    /// Its MCS cluster id: the `source-cluster` of the EndpointSlices of its endpoints.
    pub id: String,
}

/// The labels of the pods an object of `kind` runs, if it runs pods a Service can select.
fn pod_labels<'a>(kind: &str, obj: &'a Value) -> Option<&'a serde_json::Map<String, Value>> {
    match kind {
        "Deployment" | "StatefulSet" | "ReplicaSet" | "ReplicationController" | "DaemonSet" => {
            obj["spec"]["template"]["metadata"]["labels"].as_object()
        }
        "Pod" => obj["metadata"]["labels"].as_object(),
        _ => None,
    }
}

/// How many serving pods `obj` (of `kind`) runs on `cluster` once available there.
fn serving_pods(kind: &str, obj: &Value, cluster: &ClusterName) -> i64 {
    match kind {
        "Deployment" | "StatefulSet" | "ReplicaSet" | "ReplicationController" => {
            status::desired_on(obj, cluster)
        }
        "DaemonSet" => status::report(obj, cluster)
            .and_then(|r| r.status["desiredNumberScheduled"].as_i64())
            .unwrap_or(0),
        // A Pod run to completion serves nothing.
        "Pod" => i64::from(status::pod_serving_on(obj, cluster)),
        _ => 0,
    }
}

/// The Ready endpoints each selector Service of a namespace (its `objects`, by kind) gets
/// from `cluster` once the namespace's workloads are available there.
pub fn expected<'a>(
    objects: impl Iterator<Item = (&'a str, &'a Value)> + Clone,
    cluster: &ClusterName,
) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for (_, svc) in objects.clone().filter(|(k, _)| *k == "Service") {
        let Some(selector) = svc["spec"]["selector"]
            .as_object()
            .filter(|s| !s.is_empty())
        else {
            continue;
        };
        if svc["spec"]["type"] == "ExternalName" {
            continue;
        }
        let Some(name) = svc["metadata"]["name"].as_str() else {
            continue;
        };
        let n: i64 = objects
            .clone()
            .filter(|(kind, obj)| {
                pod_labels(kind, obj)
                    .is_some_and(|labels| selector.iter().all(|(k, v)| labels.get(k) == Some(v)))
            })
            .map(|(kind, obj)| serving_pods(kind, obj, cluster))
            .sum();
        out.insert(name.to_string(), n);
    }
    out
}

/// The MCS cluster id of `cluster`, if it is a member.
pub(crate) fn id_of<'a>(cluster: &ClusterName, members: &'a [Member]) -> Option<&'a str> {
    members
        .iter()
        .find(|m| &m.name == cluster)
        .map(|m| m.id.as_str())
}

/// What member `m` reported its imports hold, by the namespace's `annotations` (nothing
/// when it has not reported).
pub(crate) fn report_of(m: &Member, annotations: &BTreeMap<String, String>) -> ImportReport {
    annotations
        .get(&imports_annotation(&m.name))
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default()
}

/// The member clusters whose imports do not yet hold `expected` Ready endpoints from
/// `source` for every Service, by the reports in the namespace's `annotations`. Nothing is
/// waited for when `source` is no member (the MCS controller does not serve it).
pub fn unseen_in(
    expected: &BTreeMap<String, i64>,
    source: &ClusterName,
    members: &[Member],
    annotations: &BTreeMap<String, String>,
) -> Vec<ClusterName> {
    let Some(id) = id_of(source, members) else {
        return Vec::new();
    };
    if expected.values().all(|n| *n <= 0) {
        return Vec::new();
    }
    members
        .iter()
        .filter(|m| {
            let report = report_of(m, annotations);
            expected.iter().any(|(svc, want)| {
                let have = report
                    .get(svc)
                    .and_then(|sources| sources.get(id))
                    .map_or(0, |s| s.ready);
                i64::from(have) < *want
            })
        })
        .map(|m| m.name.clone())
        .collect()
}

/// What the members report about `source`'s traffic, by the reports in the namespace's
/// `annotations`: who does not yet show its endpoints at weight 0 and draining, and, from
/// those that do, the live traffic their dataplanes hold to it. A member that imports
/// nothing from `source` has nothing to drain; nothing is waited for when `source` is no
/// member (the MCS controller does not serve it).
pub fn drain_of(
    source: &ClusterName,
    members: &[Member],
    annotations: &BTreeMap<String, String>,
) -> DrainReport {
    let mut out = DrainReport::default();
    let Some(id) = id_of(source, members) else {
        return out;
    };
    for m in members {
        let report = report_of(m, annotations);
        let parts: Vec<_> = report.values().filter_map(|s| s.get(id)).collect();
        if parts.is_empty() {
            tracing::debug!(member = %m.name, source = %source, report = ?report,
                "imports nothing from the source: nothing to drain");
            continue;
        }
        if parts
            .iter()
            .any(|s| !s.draining || s.weight.unwrap_or(1) > 0)
        {
            out.unconfirmed.push(m.name.clone());
        } else if parts.iter().any(|s| s.active.is_none()) {
            out.unreported.push(m.name.clone());
            out.active += parts.iter().filter_map(|s| s.active).sum::<u64>();
        } else {
            out.active += parts.iter().filter_map(|s| s.active).sum::<u64>();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn name(n: &str) -> ClusterName {
        ClusterName::new(n)
    }

    #[test]
    fn a_service_expects_the_serving_pods_it_selects() {
        let svc = json!({"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}}});
        let other = json!({"metadata": {"name": "db"}, "spec": {"selector": {"app": "db"}}});
        let external = json!({"metadata": {"name": "ext"},
            "spec": {"type": "ExternalName", "selector": {"app": "web"}}});
        let headless_manual = json!({"metadata": {"name": "manual"}, "spec": {}});
        let web = json!({"metadata": {"name": "web", "annotations": {"replicas.sluice.dev/b": "2"}},
            "spec": {"replicas": 3, "template": {"metadata": {"labels": {"app": "web", "tier": "x"}}}}});
        let job = json!({"metadata": {"name": "once"},
            "spec": {"template": {"metadata": {"labels": {"app": "web"}}}}});
        let objects = [
            ("Service", &svc),
            ("Service", &other),
            ("Service", &external),
            ("Service", &headless_manual),
            ("Deployment", &web),
            ("Job", &job),
        ];
        let e = expected(objects.iter().map(|(k, v)| (*k, *v)), &name("b"));
        assert_eq!(e, BTreeMap::from([("db".into(), 0), ("web".into(), 2)]));
        let e = expected(objects.iter().map(|(k, v)| (*k, *v)), &name("a"));
        assert_eq!(e["web"], 3, "unsplit: all replicas");
    }

    #[test]
    fn every_member_must_see_the_new_clusters_endpoints() {
        let members = vec![
            Member {
                name: name("a"),
                id: "a".into(),
            },
            Member {
                name: name("b"),
                id: "id-b".into(),
            },
        ];
        let want = BTreeMap::from([("web".to_string(), 2)]);
        let mut annotations = BTreeMap::new();
        assert_eq!(
            unseen_in(&want, &name("b"), &members, &annotations),
            vec![name("a"), name("b")]
        );
        annotations.insert(
            "imports.sluice.dev/b".to_string(),
            json!({"web": {"id-b": {"ready": 2}, "a": {"ready": 2}}}).to_string(),
        );
        annotations.insert(
            "imports.sluice.dev/a".to_string(),
            json!({"web": {"id-b": {"ready": 1}, "a": {"ready": 2}}}).to_string(),
        );
        assert_eq!(
            unseen_in(&want, &name("b"), &members, &annotations),
            vec![name("a")]
        );
        annotations.insert(
            "imports.sluice.dev/a".to_string(),
            json!({"web": {"id-b": {"ready": 2}}}).to_string(),
        );
        assert!(unseen_in(&want, &name("b"), &members, &annotations).is_empty());
        // Nothing to serve, or a cluster the MCS controller does not serve: nothing to wait for.
        let none = BTreeMap::from([("web".to_string(), 0)]);
        assert!(unseen_in(&none, &name("b"), &members, &BTreeMap::new()).is_empty());
        assert!(unseen_in(&want, &name("c"), &members, &BTreeMap::new()).is_empty());
    }

    #[test]
    fn a_source_drains_when_every_member_shows_it_draining_and_holds_no_traffic_to_it() {
        let members = vec![
            Member {
                name: name("a"),
                id: "a".into(),
            },
            Member {
                name: name("b"),
                id: "b".into(),
            },
        ];
        let mut annotations = BTreeMap::from([
            (
                "imports.sluice.dev/a".to_string(),
                json!({"web": {"a": {"ready": 2, "weight": 0, "draining": true, "active": 0}}})
                    .to_string(),
            ),
            (
                "imports.sluice.dev/b".to_string(),
                json!({"web": {"a": {"ready": 2, "weight": 20}, "b": {"ready": 2}}}).to_string(),
            ),
        ]);
        assert_eq!(
            drain_of(&name("a"), &members, &annotations).unconfirmed,
            vec![name("b")]
        );
        annotations.insert(
            "imports.sluice.dev/b".to_string(),
            json!({"web": {"a": {"ready": 0, "weight": 0, "draining": true}}}).to_string(),
        );
        assert_eq!(
            drain_of(&name("a"), &members, &annotations),
            DrainReport {
                unreported: vec![name("b")],
                ..Default::default()
            },
            "b's dataplane has not said what it holds"
        );
        annotations.insert(
            "imports.sluice.dev/b".to_string(),
            json!({"web": {"a": {"ready": 0, "weight": 0, "draining": true, "active": 2}},
                   "db": {"a": {"ready": 0, "weight": 0, "draining": true, "active": 1}}})
            .to_string(),
        );
        assert_eq!(
            drain_of(&name("a"), &members, &annotations),
            DrainReport {
                active: 3,
                ..Default::default()
            }
        );
        assert_eq!(
            drain_of(&name("z"), &members, &annotations),
            DrainReport::default()
        );
    }
}
