//! Fixtures: member snapshots built from short JSON, and a stand-in for the controller that
//! writes the desired state back, so tests can run reconcile after reconcile.

#![allow(dead_code)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};
use sluice_api::mcs::{ServiceExport, ServiceImport};
use sluice_mcs::{
    ClusterDesired, ClusterId, ClusterName, Desired, LABEL_LOGICAL_CLUSTER, MemberSnapshot,
    ServiceKey, VipAllocator, reconcile_at,
};

pub const NS: &str = "shop";
pub const T0: &str = "2026-01-01T00:00:00Z";
pub const T1: &str = "2026-01-02T00:00:00Z";
pub const T2: &str = "2026-01-03T00:00:00Z";

pub fn time(s: &str) -> Time {
    Time(s.parse::<Timestamp>().unwrap())
}

pub fn id(s: &str) -> ClusterId {
    ClusterId::new(s).unwrap()
}

pub fn name(s: &str) -> ClusterName {
    ClusterName::new(s)
}

pub fn key(svc: &str) -> ServiceKey {
    ServiceKey::new(NS, svc)
}

/// An alive member named and identified `cluster`, with namespace [`NS`].
pub fn member(cluster: &str, index: u8) -> MemberSnapshot {
    let mut m = MemberSnapshot::new(name(cluster), id(cluster), index);
    m.namespaces.insert(NS.into(), namespace(NS, false));
    m
}

pub fn namespace(ns: &str, placed: bool) -> Namespace {
    let mut v = json!({"metadata": {"name": ns}});
    if placed {
        v["metadata"]["labels"] = json!({ LABEL_LOGICAL_CLUSTER: "root.shop" });
    }
    serde_json::from_value(v).unwrap()
}

/// A ClusterIP Service with ports `(name, port, targetPort)`.
pub fn service(svc: &str, created: &str, ports: &[(&str, i32, i32)]) -> Service {
    let ports: Vec<Value> = ports
        .iter()
        .map(|(n, p, t)| json!({"name": n, "port": p, "targetPort": t, "protocol": "TCP"}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": svc, "namespace": NS, "creationTimestamp": created},
        "spec": {
            "type": "ClusterIP",
            "clusterIP": "10.0.0.10",
            "ipFamilies": ["IPv4"],
            "sessionAffinity": "None",
            "internalTrafficPolicy": "Cluster",
            "ports": ports,
        }
    }))
    .unwrap()
}

pub fn with_spec(mut svc: Service, patch: Value) -> Service {
    let mut v = serde_json::to_value(&svc).unwrap();
    for (k, val) in patch.as_object().unwrap() {
        v["spec"][k] = val.clone();
    }
    svc = serde_json::from_value(v).unwrap();
    svc
}

pub fn annotate(mut svc: Service, k: &str, v: &str) -> Service {
    svc.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(k.into(), v.into());
    svc
}

pub fn export(svc: &str, created: &str) -> ServiceExport {
    serde_json::from_value(json!({
        "metadata": {"name": svc, "namespace": NS, "creationTimestamp": created, "generation": 1},
    }))
    .unwrap()
}

pub fn export_with(svc: &str, created: &str, spec: Value) -> ServiceExport {
    let mut e = export(svc, created);
    e.spec = Some(serde_json::from_value(spec).unwrap());
    e
}

/// The Service's own EndpointSlice: ports `(name, endpoint port)`, endpoints `(ip, ready)`.
pub fn own_slice(
    svc: &str,
    family: &str,
    ports: &[(&str, i32)],
    endpoints: &[(&str, bool)],
) -> EndpointSlice {
    let ports: Vec<Value> = ports
        .iter()
        .map(|(n, p)| json!({"name": n, "port": p, "protocol": "TCP"}))
        .collect();
    let endpoints: Vec<Value> = endpoints
        .iter()
        .map(|(ip, ready)| {
            json!({
                "addresses": [ip],
                "conditions": {"ready": ready, "serving": ready, "terminating": !ready},
                "hostname": format!("pod-{}", ip.replace(['.', ':'], "-")),
                "nodeName": "node-1",
                "zone": "zone-a",
                "targetRef": {"kind": "Pod", "name": "p", "namespace": NS},
            })
        })
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": format!("{svc}-abcde"), "namespace": NS,
                     "labels": {"kubernetes.io/service-name": svc}},
        "addressType": family,
        "ports": ports,
        "endpoints": endpoints,
    }))
    .unwrap()
}

/// Adds `svc` (ports `(name, port, targetPort)`) with one endpoint `ip` to `m`.
pub fn serve(m: &mut MemberSnapshot, svc: Service, ip: &str) {
    let svc_name = svc.metadata.name.clone().unwrap();
    let ports: Vec<(String, i32)> = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.clone())
        .unwrap_or_default()
        .iter()
        .map(|p| {
            let target = match &p.target_port {
                Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n)) => *n,
                _ => p.port,
            };
            (p.name.clone().unwrap_or_default(), target)
        })
        .collect();
    let ports: Vec<(&str, i32)> = ports.iter().map(|(n, p)| (n.as_str(), *p)).collect();
    m.slices.insert(
        key(&svc_name),
        vec![own_slice(&svc_name, "IPv4", &ports, &[(ip, true)])],
    );
    m.services.insert(key(&svc_name), svc);
}

pub fn run(members: &[MemberSnapshot], vips: &mut VipAllocator, now: &str) -> Desired {
    reconcile_at(members, vips, &time(now))
}

/// What the controller does with `desired`: imports and export statuses written, so the
/// next snapshot observes them.
pub fn write_back(members: &mut [MemberSnapshot], desired: &Desired) {
    for m in members.iter_mut() {
        let Some(c) = desired.cluster(&m.name) else {
            continue;
        };
        m.imports = c.imports.clone();
        for (k, status) in &c.export_statuses {
            if let Some(e) = m.exports.get_mut(k) {
                e.status = Some(status.clone());
            }
        }
    }
}

pub fn of<'a>(desired: &'a Desired, cluster: &str) -> &'a ClusterDesired {
    desired
        .cluster(&name(cluster))
        .unwrap_or_else(|| panic!("no desired state for {cluster}"))
}

pub fn import<'a>(desired: &'a Desired, cluster: &str, svc: &str) -> &'a ServiceImport {
    of(desired, cluster)
        .imports
        .get(&key(svc))
        .unwrap_or_else(|| panic!("no import of {svc} in {cluster}"))
}

pub fn condition<'a>(desired: &'a Desired, cluster: &str, svc: &str, type_: &str) -> &'a Condition {
    of(desired, cluster)
        .export_statuses
        .get(&key(svc))
        .unwrap_or_else(|| panic!("no export status for {svc} in {cluster}"))
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} condition on {svc} in {cluster}"))
}

/// The MCS slices of `svc` from `source` in `cluster`.
pub fn slices_from<'a>(
    desired: &'a Desired,
    cluster: &str,
    svc: &str,
    source: &str,
) -> Vec<&'a EndpointSlice> {
    of(desired, cluster)
        .slices
        .values()
        .filter(|s| {
            let l = s.metadata.labels.as_ref().unwrap();
            l[sluice_api::mcs::LABEL_SERVICE_NAME] == svc
                && l[sluice_api::mcs::LABEL_SOURCE_CLUSTER] == source
        })
        .collect()
}

/// Slice ports as `(name, port)`.
pub fn slice_ports(s: &EndpointSlice) -> Vec<(String, i32)> {
    s.ports
        .iter()
        .flatten()
        .map(|p| (p.name.clone().unwrap_or_default(), p.port.unwrap()))
        .collect()
}

/// Everything desired, as JSON, to compare whole results.
pub fn snapshot(desired: &Desired) -> Value {
    let clusters: BTreeMap<String, Value> = desired
        .clusters
        .iter()
        .map(|(n, c)| {
            (
                n.to_string(),
                json!({
                    "id": c.cluster.to_string(),
                    "imports": c.imports.values().collect::<Vec<_>>(),
                    "slices": c.slices.values().collect::<Vec<_>>(),
                    "exports": c.export_statuses.iter()
                        .map(|(k, s)| (k.to_string(), s)).collect::<BTreeMap<_, _>>(),
                }),
            )
        })
        .collect();
    serde_json::to_value(clusters).unwrap()
}
