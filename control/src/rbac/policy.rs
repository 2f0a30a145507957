//! One logical cluster's RBAC policy, indexed by subject: built from the stored Roles,
//! ClusterRoles, RoleBindings and ClusterRoleBindings on first use and dropped when any of
//! them changes, so a check is a few hash lookups however many bindings the cluster has.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use serde::Deserialize;
use sluice_api::LogicalClusterPath;

use super::bootstrap;
use super::rules::Rule;
use crate::storage::{ResourcePrefix, Store};

/// The API group of the RBAC types.
pub const GROUP: &str = "rbac.authorization.k8s.io";

/// The prefixes of the four RBAC types, in the order [`ClusterPolicy::build`] reads them.
pub fn prefixes() -> &'static [ResourcePrefix; 4] {
    static P: std::sync::OnceLock<[ResourcePrefix; 4]> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        [
            "roles",
            "clusterroles",
            "rolebindings",
            "clusterrolebindings",
        ]
        .map(|r| ResourcePrefix::new(GROUP, r))
    })
}

/// What a binding grants: rules, in one namespace or cluster-wide.
#[derive(Debug)]
pub struct Grant {
    /// `None`: every namespace and the cluster scope (a ClusterRoleBinding).
    pub namespace: Option<String>,
    pub rules: Arc<[Rule]>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Meta {
    name: String,
    namespace: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RoleObj {
    metadata: Meta,
    rules: Vec<Rule>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Subject {
    kind: String,
    name: String,
    namespace: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RoleRef {
    kind: String,
    name: String,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct BindingObj {
    metadata: Meta,
    subjects: Vec<Subject>,
    role_ref: RoleRef,
}

/// The user name of a ServiceAccount, as its tokens authenticate.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// A logical cluster's bindings, by the user or group they name.
#[derive(Debug, Default)]
pub struct ClusterPolicy {
    users: HashMap<String, Vec<Grant>>,
    groups: HashMap<String, Vec<Grant>>,
}

impl ClusterPolicy {
    /// Read the cluster's RBAC objects from the store.
    pub fn build(store: &Store, cluster: &LogicalClusterPath) -> Self {
        let [roles_p, cluster_roles_p, bindings_p, cluster_bindings_p] = prefixes();
        let mut roles: HashMap<(String, String), Arc<[Rule]>> = HashMap::new();
        let mut cluster_roles: HashMap<String, Arc<[Rule]>> = HashMap::new();
        let read = |prefix: &ResourcePrefix, visit: &mut dyn FnMut(&[u8])| {
            store.scan(&prefix.scope(Some(cluster), None), None, |_, e| {
                visit(&e.value);
                true
            });
        };
        read(roles_p, &mut |v| {
            if let Ok(r) = serde_json::from_slice::<RoleObj>(v) {
                roles.insert((r.metadata.namespace, r.metadata.name), r.rules.into());
            }
        });
        read(cluster_roles_p, &mut |v| {
            if let Ok(r) = serde_json::from_slice::<RoleObj>(v) {
                cluster_roles.insert(r.metadata.name, r.rules.into());
            }
        });
        let cluster_role = |name: &str| {
            cluster_roles
                .get(name)
                .cloned()
                .or_else(|| bootstrap::cluster_role(name).map(Arc::from))
        };
        let mut policy = ClusterPolicy::default();
        read(bindings_p, &mut |v| {
            let Ok(b) = serde_json::from_slice::<BindingObj>(v) else {
                return;
            };
            let rules = match b.role_ref.kind.as_str() {
                "Role" => roles
                    .get(&(b.metadata.namespace.clone(), b.role_ref.name.clone()))
                    .cloned(),
                "ClusterRole" => cluster_role(&b.role_ref.name),
                _ => None,
            };
            if let Some(rules) = rules {
                policy.add(&b.subjects, Some(&b.metadata.namespace), rules);
            }
        });
        read(cluster_bindings_p, &mut |v| {
            let Ok(b) = serde_json::from_slice::<BindingObj>(v) else {
                return;
            };
            if b.role_ref.kind == "ClusterRole"
                && let Some(rules) = cluster_role(&b.role_ref.name)
            {
                policy.add(&b.subjects, None, rules);
            }
        });
        policy
    }

    fn add(&mut self, subjects: &[Subject], namespace: Option<&str>, rules: Arc<[Rule]>) {
        for s in subjects {
            let (map, key) = match s.kind.as_str() {
                "User" => (&mut self.users, s.name.clone()),
                "Group" => (&mut self.groups, s.name.clone()),
                "ServiceAccount" => {
                    // A ServiceAccount subject without a namespace means the binding's own.
                    let ns = if s.namespace.is_empty() {
                        namespace.unwrap_or_default()
                    } else {
                        &s.namespace
                    };
                    (&mut self.users, service_account_user(ns, &s.name))
                }
                _ => continue,
            };
            map.entry(key).or_default().push(Grant {
                namespace: namespace.map(str::to_string),
                rules: rules.clone(),
            });
        }
    }

    /// Whether it grants nothing to anyone.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty() && self.groups.is_empty()
    }

    /// Every grant that applies to `user` in `groups` (and every authenticated user).
    pub fn grants<'a>(
        &'a self,
        user: &str,
        groups: &'a [String],
    ) -> impl Iterator<Item = &'a Grant> + 'a {
        let by_user = self.users.get(user).into_iter().flatten();
        let by_group = groups
            .iter()
            .map(String::as_str)
            .chain(std::iter::once(bootstrap::AUTHENTICATED))
            .filter_map(|g| self.groups.get(g))
            .flatten();
        by_user.chain(by_group)
    }
}

/// Every logical cluster's policy, built on demand.
#[derive(Default)]
pub struct Policies {
    clusters: RwLock<HashMap<LogicalClusterPath, Arc<ClusterPolicy>>>,
    /// Bumped by every invalidation, so that a policy built while one happened is used
    /// once but not kept.
    generation: AtomicU64,
}

impl Policies {
    /// The current policy of `cluster`.
    pub fn of(&self, store: &Store, cluster: &LogicalClusterPath) -> Arc<ClusterPolicy> {
        if let Some(p) = self
            .clusters
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(cluster)
        {
            return p.clone();
        }
        let generation = self.generation.load(Ordering::Acquire);
        let built = Arc::new(ClusterPolicy::build(store, cluster));
        // An empty policy is cheap to build and not kept: requests naming logical clusters
        // that do not exist must not grow the cache.
        if built.is_empty() {
            return built;
        }
        let mut clusters = self.clusters.write().unwrap_or_else(|p| p.into_inner());
        if self.generation.load(Ordering::Acquire) == generation {
            clusters.insert(cluster.clone(), built.clone());
        }
        built
    }

    /// Forget `cluster`'s policy: one of its RBAC objects changed.
    pub fn invalidate(&self, cluster: &LogicalClusterPath) {
        let mut clusters = self.clusters.write().unwrap_or_else(|p| p.into_inner());
        self.generation.fetch_add(1, Ordering::AcqRel);
        clusters.remove(cluster);
    }

    /// Forget every cluster's policy (the watch feeding invalidations restarted).
    pub fn clear(&self) {
        let mut clusters = self.clusters.write().unwrap_or_else(|p| p.into_inner());
        self.generation.fetch_add(1, Ordering::AcqRel);
        clusters.clear();
    }
}

/// The rules of the role a binding in `namespace` (empty for a ClusterRoleBinding) refers
/// to: a Role in that namespace, or a stored or default ClusterRole. `None` when it does
/// not exist.
pub fn role_rules(
    store: &Store,
    cluster: &LogicalClusterPath,
    kind: &str,
    namespace: &str,
    name: &str,
) -> Option<Vec<Rule>> {
    let [roles_p, cluster_roles_p, ..] = prefixes();
    let stored = |prefix: &ResourcePrefix, ns: Option<&str>| {
        store
            .get(&prefix.key(cluster, ns, name))
            .and_then(|e| serde_json::from_slice::<RoleObj>(&e.value).ok())
            .map(|r| r.rules)
    };
    match kind {
        "Role" if !namespace.is_empty() => stored(roles_p, Some(namespace)),
        "ClusterRole" => stored(cluster_roles_p, None)
            .or_else(|| bootstrap::cluster_role(name).map(<[Rule]>::to_vec)),
        _ => None,
    }
}
