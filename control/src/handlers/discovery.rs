//! API discovery: the legacy documents (`APIVersions`, `APIGroupList`, `APIResourceList`)
//! and the aggregated `apidiscovery.k8s.io` v2 (and v2beta1) format.

use http::{HeaderValue, StatusCode, header};
use serde_json::{Value, json};

use super::respond::{Ctx, Resp, json_value};
use crate::catalog::Catalog;
use crate::errors::{ApiError, ApiResult};
use crate::resources::{ResourceType, Subresource};

/// The aggregated-discovery version the client accepts, if any.
fn aggregated_version(accept: &str) -> Option<&'static str> {
    accept.split(',').find_map(|t| {
        if !t.contains("as=APIGroupDiscoveryList") || !t.contains("g=apidiscovery.k8s.io") {
            return None;
        }
        if t.contains("v=v2beta1") {
            Some("v2beta1")
        } else if t.contains("v=v2") {
            Some("v2")
        } else {
            None
        }
    })
}

fn subresource_entry(t: &ResourceType, s: Subresource) -> Value {
    let (group, version, kind) = s.response_kind().unwrap_or((&t.group, &t.version, &t.kind));
    json!({
        "subresource": s.name(),
        "responseKind": {"group": group, "version": version, "kind": kind},
        "verbs": s.verbs(),
    })
}

fn aggregated_group(catalog: &Catalog, group: &str, versions: &[String]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| {
            let resources: Vec<Value> = catalog
                .in_group_version(group, v)
                .map(|t| {
                    let mut r = json!({
                        "resource": t.resource,
                        "responseKind": {"group": t.group, "version": t.version, "kind": t.kind},
                        "scope": if t.namespaced { "Namespaced" } else { "Cluster" },
                        "singularResource": t.singular,
                        "verbs": t.verbs,
                    });
                    if !t.short_names.is_empty() {
                        r["shortNames"] = json!(t.short_names);
                    }
                    if !t.categories.is_empty() {
                        r["categories"] = json!(t.categories);
                    }
                    if !t.subresources.is_empty() {
                        r["subresources"] = t
                            .subresources
                            .iter()
                            .map(|s| subresource_entry(t, *s))
                            .collect();
                    }
                    r
                })
                .collect();
            json!({"version": v, "resources": resources, "freshness": "Current"})
        })
        .collect();
    json!({"metadata": {"name": group, "creationTimestamp": null}, "versions": versions})
}

fn aggregated(catalog: &Catalog, version: &str, core: bool) -> Resp {
    let items: Vec<Value> = catalog
        .groups()
        .into_iter()
        .filter(|(g, _)| g.is_empty() == core)
        .map(|(g, vs)| aggregated_group(catalog, &g, &vs))
        .collect();
    let body = json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{version}"),
        "metadata": {},
        "items": items,
    });
    let mut r = json_value(StatusCode::OK, &body);
    let ct = format!("application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList");
    if let Ok(v) = HeaderValue::from_str(&ct) {
        r.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    r.headers_mut()
        .insert(header::VARY, HeaderValue::from_static("Accept"));
    r
}

/// `GET /api`
pub fn core_versions(catalog: &Catalog, ctx: &Ctx) -> Resp {
    if let Some(v) = aggregated_version(ctx.accept()) {
        return aggregated(catalog, v, true);
    }
    json_value(
        StatusCode::OK,
        &json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}]}),
    )
}

fn group_doc(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({"name": group, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)})
}

/// `GET /apis`
pub fn groups(catalog: &Catalog, ctx: &Ctx) -> Resp {
    if let Some(v) = aggregated_version(ctx.accept()) {
        return aggregated(catalog, v, false);
    }
    let groups: Vec<Value> = catalog
        .groups()
        .into_iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, vs)| group_doc(&g, &vs))
        .collect();
    json_value(
        StatusCode::OK,
        &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}),
    )
}

/// `GET /apis/<group>`
pub fn group(catalog: &Catalog, group: &str) -> ApiResult<Resp> {
    let (g, vs) = catalog
        .groups()
        .into_iter()
        .find(|(g, _)| *g == group)
        .ok_or(ApiError::PathNotFound)?;
    let mut doc = group_doc(&g, &vs);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Ok(json_value(StatusCode::OK, &doc))
}

/// `GET /api/v1`, `GET /apis/<group>/<version>`
pub fn resources(catalog: &Catalog, group: &str, version: &str) -> ApiResult<Resp> {
    let mut resources = Vec::new();
    for t in catalog.in_group_version(group, version) {
        let mut r = json!({
            "name": t.resource,
            "singularName": t.singular,
            "namespaced": t.namespaced,
            "kind": t.kind,
            "verbs": t.verbs,
        });
        if !t.short_names.is_empty() {
            r["shortNames"] = json!(t.short_names);
        }
        if !t.categories.is_empty() {
            r["categories"] = json!(t.categories);
        }
        resources.push(r);
        for s in &t.subresources {
            let mut sub = json!({
                "name": format!("{}/{}", t.resource, s.name()),
                "singularName": "",
                "namespaced": t.namespaced,
                "kind": t.kind,
                "verbs": s.verbs(),
            });
            if let Some((group, version, kind)) = s.response_kind() {
                sub["group"] = json!(group);
                sub["version"] = json!(version);
                sub["kind"] = json!(kind);
            }
            resources.push(sub);
        }
    }
    if resources.is_empty() {
        return Err(ApiError::PathNotFound);
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Ok(json_value(
        StatusCode::OK,
        &json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_negotiation() {
        assert_eq!(
            aggregated_version(
                "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
            ),
            Some("v2")
        );
        assert_eq!(
            aggregated_version(
                "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
            ),
            Some("v2beta1")
        );
        assert_eq!(aggregated_version("application/json"), None);
    }
}
