//! EndpointSlices: for every Service with a selector, one IPv4 slice of the matching Pods
//! with their readiness (`ready`, `serving`, `terminating`), hostnames and ports.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use super::shared::{Caches, selects, value};

pub const MANAGED_BY: &str = "endpointslice-controller.sluice.dev";

fn target_port(port: &Value, pods: &[Value]) -> Option<i64> {
    let target = if port["targetPort"].is_null() {
        &port["port"]
    } else {
        &port["targetPort"]
    };
    match target {
        Value::Number(n) => n.as_i64(),
        Value::String(name) => pods.iter().find_map(|p| {
            p["spec"]["containers"]
                .as_array()?
                .iter()
                .flat_map(|c| c["ports"].as_array().cloned().unwrap_or_default())
                .find(|cp| cp["name"] == *name)?["containerPort"]
                .as_i64()
        }),
        _ => None,
    }
}

/// The slice a Service should have.
pub fn desired(svc: &Value, pods: &[Value]) -> Value {
    let name = svc["metadata"]["name"].as_str().unwrap_or("");
    let ns = svc["metadata"]["namespace"].as_str().unwrap_or("");
    let ports: Vec<Value> = svc["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let mut out = json!({"port": target_port(p, pods)?, "protocol": p["protocol"].as_str().unwrap_or("TCP")});
            if let Some(n) = p["name"].as_str() {
                out["name"] = json!(n);
            }
            if let Some(a) = p["appProtocol"].as_str() {
                out["appProtocol"] = json!(a);
            }
            Some(out)
        })
        .collect();
    let endpoints: Vec<Value> = pods
        .iter()
        .filter_map(|p| {
            let ip = p["status"]["podIP"].as_str()?;
            let terminating = p["metadata"].get("deletionTimestamp").is_some_and(|v| !v.is_null());
            let ready = p["status"]["conditions"].as_array().is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
            let mut e = json!({
                "addresses": [ip],
                "conditions": {"ready": ready && !terminating, "serving": ready, "terminating": terminating},
                "nodeName": p["spec"]["nodeName"],
                "targetRef": {"kind": "Pod", "name": p["metadata"]["name"], "namespace": ns, "uid": p["metadata"]["uid"]},
            });
            if let (Some(h), Some(sub)) = (p["spec"]["hostname"].as_str(), p["spec"]["subdomain"].as_str())
                && sub == name {
                    e["hostname"] = json!(h);
                }
            Some(e)
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {
            "name": format!("{name}-ipv4"), "namespace": ns,
            "labels": {"kubernetes.io/service-name": name, "endpointslice.kubernetes.io/managed-by": MANAGED_BY},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": name, "uid": svc["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}],
        },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": ports,
    })
}

/// Keep the EndpointSlice of Service `svc` in line with the Pods it selects.
pub async fn reconcile(client: &kube::Client, caches: &Caches, svc: &Service) -> kube::Result<()> {
    // Most Services of a big cluster have no selector (their slices are someone else's):
    // decide that before turning the Service into JSON.
    let spec = svc.spec.as_ref();
    if spec.is_none_or(|s| s.selector.as_ref().is_none_or(|sel| sel.is_empty()))
        || spec.and_then(|s| s.type_.as_deref()) == Some("ExternalName")
        || svc.metadata.deletion_timestamp.is_some()
    {
        return Ok(());
    }
    let v = value(svc);
    let ns = svc.metadata.namespace.clone().unwrap_or_default();
    let selector = json!({"matchLabels": v["spec"]["selector"]});
    let mut matching: Vec<Value> = caches
        .pods
        .in_namespace("", &ns)
        .iter()
        .filter(|p| {
            p.metadata.namespace.as_deref() == Some(ns.as_str())
                && selects(&selector, p.metadata.labels.as_ref())
        })
        .filter(|p| {
            !matches!(
                p.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            )
        })
        .map(|p| value(&**p))
        .collect();
    matching.sort_by_key(|p| p["metadata"]["name"].as_str().map(str::to_string));
    let want = desired(&v, &matching);
    let name = want["metadata"]["name"].as_str().unwrap_or("").to_string();
    let current = caches.slices.get(&ns, &name);
    if let Some(cur) = current {
        let cur = value(&*cur);
        if cur["endpoints"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
            == want["endpoints"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or(&[])
            && cur["ports"] == want["ports"]
        {
            return Ok(());
        }
    }
    Api::<EndpointSlice>::namespaced(client.clone(), &ns)
        .patch(
            &name,
            &PatchParams::apply("endpointslice-controller").force(),
            &Patch::Apply(&want),
        )
        .await
        .map(|_| ())
}
