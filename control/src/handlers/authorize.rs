//! Authorization of a request before it is served: a ServiceAccount token's bindings, then
//! impersonation, then the request's RBAC attributes (what kube-apiserver's `RequestInfo`
//! makes of a URL), each checked against the addressed logical cluster's policy.

use http::HeaderMap;
use sluice_api::LogicalClusterPath;

use crate::auth::User;
use crate::auth::impersonation::Impersonation;
use crate::errors::{ApiError, ApiResult};
use crate::rbac::{self, Action, Decision};
use crate::request::{ClusterScope, Query, Route, Target};
use crate::state::ApiState;

/// The user a request from `user` is served as, or why it is not served: 401 for a
/// ServiceAccount token outside its logical cluster or whose ServiceAccount (or Pod) is
/// gone; 403 for an impersonation or a request RBAC does not allow.
pub fn admit(
    state: &ApiState,
    user: User,
    target: &Target,
    verb: &str,
    path: &str,
    query: &Query,
    headers: &HeaderMap,
) -> ApiResult<User> {
    if let Some(b) = &user.binding {
        let home = matches!(&target.cluster, ClusterScope::One(c) if *c == b.cluster);
        if !home || !b.holds(&state.store) {
            return Err(ApiError::Unauthorized);
        }
    }
    let user = match Impersonation::from_headers(headers)? {
        None => user,
        Some(imp) => {
            // Global identities (system:masters, syncers) are impersonated by
            // system:masters only: an administrator of one logical cluster could otherwise
            // act as the administrator of all.
            if !user.is_admin() && imp.is_privileged() {
                return Err(ApiError::Forbidden(format!(
                    "User {:?} cannot impersonate {:?} with groups {:?}: only system:masters may impersonate global identities",
                    user.name, imp.user, imp.groups
                )));
            }
            for n in imp.needed() {
                let action = Action::Resource {
                    verb: "impersonate",
                    group: "",
                    resource: &n.resource,
                    subresource: "",
                    namespace: &n.namespace,
                    name: &n.name,
                };
                let allowed = match &target.cluster {
                    ClusterScope::One(c) => {
                        state.rbac.decide(&state.store, c, &user, &action) == Decision::Allow
                    }
                    ClusterScope::Wildcard => user.is_admin(),
                };
                if !allowed {
                    return Err(rbac::forbidden(&user, &action));
                }
            }
            imp.into_user()
        }
    };
    check(state, &user, target, verb, path, query)?;
    Ok(user)
}

/// Allow the request or refuse it with kube-apiserver's 403. `verb` is the request's
/// Kubernetes verb; `path` its URL path.
pub fn check(
    state: &ApiState,
    user: &User,
    target: &Target,
    verb: &str,
    path: &str,
    query: &Query,
) -> ApiResult<()> {
    let syncer = rbac::syncer::cluster_of(user);
    let component = rbac::clusterset::component_of(user);
    let cluster = match (&target.cluster, &syncer, &component) {
        (ClusterScope::One(c), _, _) => Some(c),
        (ClusterScope::Wildcard, _, _) if user.is_admin() => return Ok(()),
        (ClusterScope::Wildcard, Some(_), _) | (ClusterScope::Wildcard, _, Some(_)) => None,
        (ClusterScope::Wildcard, None, None) => {
            return Err(ApiError::Forbidden(format!(
                "User \"{}\" cannot list or watch across logical clusters",
                user.name
            )));
        }
    };
    let verb = match verb {
        "apply" => "patch",
        v => v,
    };
    let action = match &target.route {
        Route::Resource(r) => {
            let name = r.name.as_deref().unwrap_or_default();
            // kube-apiserver: a namespace is its own namespace, so a RoleBinding in it can
            // grant reading it.
            let namespace = match (
                r.namespace.as_deref(),
                r.group.as_str(),
                r.resource.as_str(),
            ) {
                (Some(ns), _, _) => ns,
                (None, "", "namespaces") => name,
                (None, _, _) => "",
            };
            Action::Resource {
                verb,
                group: &r.group,
                resource: &r.resource,
                subresource: r.subresource.as_deref().unwrap_or_default(),
                namespace,
                name,
            }
        }
        _ => Action::NonResource {
            verb,
            path: path
                .strip_prefix(target.prefix.as_str())
                .filter(|p| !p.is_empty())
                .unwrap_or(path),
        },
    };
    // The server's own metrics are the whole server's: decided in the root logical
    // cluster, so an administrator of a workspace does not read every tenant's request
    // counts through `/clusters/<workspace>/metrics`.
    let root = LogicalClusterPath::root();
    let cluster = if matches!(target.route, Route::Metrics) && cluster.is_some() {
        Some(&root)
    } else {
        cluster
    };
    let decision = match (&syncer, component, cluster) {
        (Some(synced), _, _) => rbac::syncer::decide(
            &state.store,
            synced,
            &action,
            &rbac::syncer::Request {
                cluster,
                label_selector: query.get("labelSelector"),
            },
        ),
        (None, Some(part), cluster) => rbac::clusterset::decide(part, cluster, &action),
        (None, None, Some(c)) => state.rbac.decide(&state.store, c, user, &action),
        (None, None, None) => Decision::NoOpinion,
    };
    match decision {
        Decision::Allow => Ok(()),
        Decision::NoOpinion => Err(rbac::forbidden(user, &action)),
    }
}
