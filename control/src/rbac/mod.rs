//! RBAC per logical cluster: kube-apiserver's Role/ClusterRole/RoleBinding/
//! ClusterRoleBinding semantics, evaluated against the bindings of the logical cluster a
//! request addresses (bindings in `root:a` grant nothing in `root:b`). The same code
//! serves single-cluster mode, whose one cluster is `root`.

pub mod bootstrap;
pub mod clusterset;
pub mod policy;
pub mod rules;
pub mod syncer;

use sluice_api::LogicalClusterPath;

use crate::auth::User;
use crate::errors::{ApiError, GroupResource};
use crate::storage::Store;
pub use policy::Policies;
pub use rules::{Action, Rule};

/// The outcome of an authorization check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// No rule allows it (RBAC never denies explicitly).
    NoOpinion,
}

impl Decision {
    /// `Allow` when `yes`, else no opinion.
    pub fn allow_if(yes: bool) -> Self {
        if yes {
            Decision::Allow
        } else {
            Decision::NoOpinion
        }
    }
}

/// Decides requests against the policies of every logical cluster.
#[derive(Default)]
pub struct Authorizer {
    pub policies: Policies,
}

impl Authorizer {
    /// May `user` do `action` in `cluster`? What every authenticated user may do
    /// (discovery, OpenAPI, asking what it may do) holds only in a logical cluster the user
    /// has access to — a binding there, or a ServiceAccount's own — as in kcp: a tenant
    /// learns nothing of another's cluster, not even its kinds.
    pub fn decide(
        &self,
        store: &Store,
        cluster: &LogicalClusterPath,
        user: &User,
        action: &Action<'_>,
    ) -> Decision {
        if user.is_admin() {
            return Decision::Allow;
        }
        let policy = self.policies.of(store, cluster);
        let member = user.binding.as_ref().is_some_and(|b| b.cluster == *cluster)
            || policy.grants(&user.name, &user.groups).next().is_some();
        if member
            && bootstrap::authenticated_rules()
                .iter()
                .any(|r| r.allows(action))
        {
            return Decision::Allow;
        }
        let namespace = action.namespace();
        let allowed = policy
            .grants(&user.name, &user.groups)
            .filter(|g| match &g.namespace {
                None => true,
                Some(ns) => ns == namespace,
            })
            .any(|g| g.rules.iter().any(|r| r.allows(action)));
        if allowed {
            Decision::Allow
        } else {
            Decision::NoOpinion
        }
    }

    /// Every rule `user` holds in `namespace` of `cluster` (cluster-wide ones included), for
    /// SelfSubjectRulesReview and the escalation check.
    pub fn rules_of(
        &self,
        store: &Store,
        cluster: &LogicalClusterPath,
        user: &User,
        namespace: &str,
    ) -> Vec<Rule> {
        if user.is_admin() {
            return bootstrap::cluster_role("cluster-admin")
                .map(<[Rule]>::to_vec)
                .unwrap_or_default();
        }
        let policy = self.policies.of(store, cluster);
        let mut rules: Vec<Rule> = policy
            .grants(&user.name, &user.groups)
            .filter(|g| g.namespace.as_deref().is_none_or(|ns| ns == namespace))
            .flat_map(|g| g.rules.iter().cloned())
            .collect();
        rules.extend(bootstrap::authenticated_rules().iter().cloned());
        rules
    }
}

/// The 403 kube-apiserver sends when no authorizer allows a request, worded as its
/// `forbiddenMessage` words it.
pub fn forbidden(user: &User, action: &Action<'_>) -> ApiError {
    match *action {
        Action::NonResource { verb, path } => ApiError::RbacForbidden {
            gr: GroupResource::default(),
            name: String::new(),
            message: format!("User {:?} cannot {verb} path {path:?}", user.name),
        },
        Action::Resource {
            verb,
            group,
            resource,
            subresource,
            namespace,
            name,
        } => {
            let shown = if subresource.is_empty() {
                resource.to_string()
            } else {
                format!("{resource}/{subresource}")
            };
            let place = if namespace.is_empty() {
                "at the cluster scope".to_string()
            } else {
                format!("in the namespace {namespace:?}")
            };
            ApiError::RbacForbidden {
                gr: GroupResource {
                    group: group.to_string(),
                    resource: resource.to_string(),
                },
                name: name.to_string(),
                message: format!(
                    "User {:?} cannot {verb} resource {shown:?} in API group {group:?} {place}",
                    user.name
                ),
            }
        }
    }
}
