//! Parsing a request path into a logical cluster and a route, the way kube-apiserver's
//! `RequestInfoFactory` (and kcp's cluster filter) do.

use std::collections::HashMap;

use sluice_api::LogicalClusterPath;

use crate::errors::{ApiError, ApiResult};

/// Which logical cluster(s) a request addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterScope {
    One(LogicalClusterPath),
    /// `/clusters/*/`: every logical cluster (list and watch only, admin only).
    Wildcard,
}

/// A resource request, after the cluster prefix and `/api(s)/<group>/<version>`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ResourcePath {
    pub group: String,
    pub version: String,
    pub resource: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
    /// Legacy `/watch/` path prefix.
    pub legacy_watch: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    Livez,
    Readyz,
    Healthz,
    Version,
    Metrics,
    OpenApiV2,
    OpenApiV3Root,
    OpenApiV3 {
        group: String,
        version: String,
    },
    /// `/api`
    CoreVersions,
    /// `/apis`
    Groups,
    /// `/apis/<group>`
    Group {
        group: String,
    },
    /// `/api/v1`, `/apis/<group>/<version>`
    Resources {
        group: String,
        version: String,
    },
    Resource(ResourcePath),
}

/// A parsed request target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub cluster: ClusterScope,
    /// `/clusters/<path>` when the request came with one, else empty: used to build URLs
    /// the client follows (OpenAPI v3 `serverRelativeURL`).
    pub prefix: String,
    pub route: Route,
}

const NAMESPACE_SUBRESOURCES: &[&str] = &["status", "finalize"];

fn decode(s: &str) -> String {
    form_urlencoded::parse(format!("x={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

/// Parse a URL path (without query).
pub fn parse_path(path: &str) -> ApiResult<Target> {
    let mut parts: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(decode)
        .collect();
    let mut cluster = ClusterScope::One(LogicalClusterPath::root());
    let mut prefix = String::new();
    if parts.first().map(String::as_str) == Some("clusters") {
        let Some(name) = parts.get(1).cloned() else {
            return Err(ApiError::PathNotFound);
        };
        cluster = if name == "*" {
            ClusterScope::Wildcard
        } else {
            ClusterScope::One(
                name.parse()
                    .map_err(|e: sluice_api::PathError| ApiError::BadRequest(e.to_string()))?,
            )
        };
        prefix = format!("/clusters/{name}");
        parts.drain(..2);
    }
    let p: Vec<&str> = parts.iter().map(String::as_str).collect();
    let route = match p.as_slice() {
        ["livez", ..] => Route::Livez,
        ["readyz", ..] => Route::Readyz,
        ["healthz", ..] => Route::Healthz,
        ["version"] => Route::Version,
        ["metrics"] => Route::Metrics,
        ["openapi", "v2"] | ["swagger.json"] => Route::OpenApiV2,
        ["openapi", "v3"] => Route::OpenApiV3Root,
        ["openapi", "v3", "api", version] => Route::OpenApiV3 {
            group: String::new(),
            version: version.to_string(),
        },
        ["openapi", "v3", "apis", group, version] => Route::OpenApiV3 {
            group: group.to_string(),
            version: version.to_string(),
        },
        ["api"] => Route::CoreVersions,
        ["apis"] => Route::Groups,
        ["api", version] => Route::Resources {
            group: String::new(),
            version: version.to_string(),
        },
        ["apis", group] => Route::Group {
            group: group.to_string(),
        },
        ["apis", group, version] => Route::Resources {
            group: group.to_string(),
            version: version.to_string(),
        },
        ["api", version, rest @ ..] => Route::Resource(resource_path("", version, rest)?),
        ["apis", group, version, rest @ ..] => {
            Route::Resource(resource_path(group, version, rest)?)
        }
        _ => return Err(ApiError::PathNotFound),
    };
    Ok(Target {
        cluster,
        prefix,
        route,
    })
}

fn resource_path(group: &str, version: &str, rest: &[&str]) -> ApiResult<ResourcePath> {
    let mut rest = rest;
    let mut out = ResourcePath {
        group: group.to_string(),
        version: version.to_string(),
        ..Default::default()
    };
    if rest.first() == Some(&"watch") {
        out.legacy_watch = true;
        rest = &rest[1..];
    }
    if rest.first() == Some(&"namespaces") && rest.len() > 1 {
        out.namespace = Some(rest[1].to_string());
        if rest.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&rest[2]) {
            rest = &rest[2..];
        }
    }
    match rest {
        [resource] => out.resource = resource.to_string(),
        [resource, name] => {
            out.resource = resource.to_string();
            out.name = Some(name.to_string());
        }
        [resource, name, sub] => {
            out.resource = resource.to_string();
            out.name = Some(name.to_string());
            out.subresource = Some(sub.to_string());
        }
        _ => return Err(ApiError::PathNotFound),
    }
    // `/api/v1/namespaces/<name>[/status]` is the Namespace object itself.
    if out.resource == "namespaces" {
        if out.name.is_none() {
            out.name = out.namespace.take();
        } else if out.namespace.as_deref() == out.name.as_deref() {
            out.namespace = None;
        }
    }
    Ok(out)
}

/// Query parameters, last value wins.
#[derive(Clone, Debug, Default)]
pub struct Query(HashMap<String, String>);

impl Query {
    pub fn parse(raw: Option<&str>) -> Self {
        Self(
            raw.map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
                .unwrap_or_default(),
        )
    }

    pub fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str).filter(|v| !v.is_empty())
    }

    pub fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("true" | "1"))
    }

    pub fn number<T: std::str::FromStr>(&self, k: &str) -> ApiResult<Option<T>> {
        match self.get(k) {
            None => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| {
                ApiError::BadRequest(format!("invalid value {v:?} for query parameter {k}"))
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(path: &str) -> ResourcePath {
        match parse_path(path).unwrap().route {
            Route::Resource(r) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn paths() {
        let r = res("/apis/apps/v1/namespaces/default/deployments/web/scale");
        assert_eq!(
            (r.group.as_str(), r.resource.as_str()),
            ("apps", "deployments")
        );
        assert_eq!(r.namespace.as_deref(), Some("default"));
        assert_eq!(r.name.as_deref(), Some("web"));
        assert_eq!(r.subresource.as_deref(), Some("scale"));
        let n = res("/api/v1/namespaces/shop");
        assert_eq!(
            (
                n.resource.as_str(),
                n.name.as_deref(),
                n.namespace.as_deref()
            ),
            ("namespaces", Some("shop"), None)
        );
        let ns = res("/api/v1/namespaces/shop/status");
        assert_eq!(
            (ns.name.as_deref(), ns.subresource.as_deref()),
            (Some("shop"), Some("status"))
        );
        let l = res("/api/v1/namespaces");
        assert_eq!(
            (l.resource.as_str(), l.name.as_deref()),
            ("namespaces", None)
        );
        let w = res("/api/v1/watch/namespaces/x/pods");
        assert!(w.legacy_watch);
        assert_eq!(w.namespace.as_deref(), Some("x"));
        let t = parse_path("/clusters/root:a/api/v1/pods").unwrap();
        assert_eq!(t.cluster, ClusterScope::One("root:a".parse().unwrap()));
        assert_eq!(t.prefix, "/clusters/root:a");
        assert_eq!(
            parse_path("/clusters/*/api/v1/pods").unwrap().cluster,
            ClusterScope::Wildcard
        );
        assert!(parse_path("/clusters/Bad/api").is_err());
        assert_eq!(
            parse_path("/openapi/v3/apis/apps/v1").unwrap().route,
            Route::OpenApiV3 {
                group: "apps".into(),
                version: "v1".into()
            }
        );
        assert!(parse_path("/nope").is_err());
    }
}
