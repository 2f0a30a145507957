//! Authorization of a request before it is served: the request's RBAC attributes (what
//! kube-apiserver's `RequestInfo` makes of a URL) checked against the addressed logical
//! cluster's policy.

use crate::auth::User;
use crate::errors::ApiResult;
use crate::rbac::{self, Action, Decision};
use crate::request::{ClusterScope, Route, Target};
use crate::state::ApiState;

/// Allow the request or refuse it with kube-apiserver's 403. `verb` is the request's
/// Kubernetes verb; `path` its URL path.
pub fn check(
    state: &ApiState,
    user: &User,
    target: &Target,
    verb: &str,
    path: &str,
) -> ApiResult<()> {
    let ClusterScope::One(cluster) = &target.cluster else {
        // Wildcard requests are for system:masters only (checked where they are served).
        return Ok(());
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
    match state.rbac.decide(&state.store, cluster, user, &action) {
        Decision::Allow => Ok(()),
        Decision::NoOpinion => Err(rbac::forbidden(user, &action)),
    }
}
