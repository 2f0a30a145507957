//! What the clusterset's own parts may do upstream, decided in code like the syncer's
//! ([`super::syncer`]): each part has an identity of its own (user
//! `system:sluice:component:<part>` in group `system:sluice:components`, from a client
//! certificate the control plane's CA signed: `sluice kubeconfig --component`), allowed
//! exactly what it calls and nothing of any tenant's objects but Ingresses.
//!
//! - every part: get, list and watch the `Cluster`s of `root` (the registry);
//! - the MCS controller: also get, patch and update their status (its `MCSMember`
//!   condition);
//! - the dataplane and the DNS server: list and watch Ingresses across logical clusters
//!   (`/clusters/*`), which they serve and answer for.
//!
//! Discovery and health are open to them as to every authenticated user.

use sluice_api::LogicalClusterPath;

use super::{Action, Decision, bootstrap};
use crate::auth::User;

/// The user name prefix of the parts' identities.
pub const USER_PREFIX: &str = "system:sluice:component:";
/// The group every part's identity is in.
pub const GROUP: &str = "system:sluice:components";

/// A part of the clusterset that reads the control plane with its own identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    Dataplane,
    Dns,
    Mcs,
}

impl Component {
    pub const ALL: [Component; 3] = [Component::Dataplane, Component::Dns, Component::Mcs];

    pub fn name(self) -> &'static str {
        match self {
            Component::Dataplane => "dataplane",
            Component::Dns => "dns",
            Component::Mcs => "mcs",
        }
    }

    /// The user name its certificate carries.
    pub fn user(self) -> String {
        format!("{USER_PREFIX}{}", self.name())
    }
}

impl std::str::FromStr for Component {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Component::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| format!("{s:?} is not a component (dataplane, dns or mcs)"))
    }
}

/// The part `user` is, if it is one.
pub fn component_of(user: &User) -> Option<Component> {
    let name = user.name.strip_prefix(USER_PREFIX)?;
    if !user.groups.iter().any(|g| g == GROUP) {
        return None;
    }
    name.parse().ok()
}

/// Decide `action` for `component`, in logical cluster `cluster` (`None`: across them).
pub fn decide(
    component: Component,
    cluster: Option<&LogicalClusterPath>,
    action: &Action<'_>,
) -> Decision {
    let allow = Decision::allow_if;
    let Action::Resource {
        verb,
        group,
        resource,
        subresource,
        ..
    } = *action
    else {
        return allow(
            cluster.is_some()
                && bootstrap::authenticated_rules()
                    .iter()
                    .any(|r| r.allows(action)),
        );
    };
    let read = matches!(verb, "get" | "list" | "watch");
    match cluster {
        Some(c) if c.is_root() => allow(match (group, resource, subresource) {
            ("sluice.dev", "clusters", "") => read,
            ("sluice.dev", "clusters", "status") => {
                component == Component::Mcs && matches!(verb, "get" | "patch" | "update")
            }
            _ => false,
        }),
        Some(_) => Decision::NoOpinion,
        None => allow(
            matches!(component, Component::Dataplane | Component::Dns)
                && group == "networking.k8s.io"
                && resource == "ingresses"
                && subresource.is_empty()
                && matches!(verb, "list" | "watch"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, groups: &[&str]) -> User {
        User {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            binding: None,
        }
    }

    fn res<'a>(verb: &'a str, group: &'a str, resource: &'a str, sub: &'a str) -> Action<'a> {
        Action::Resource {
            verb,
            group,
            resource,
            subresource: sub,
            namespace: "",
            name: "",
        }
    }

    #[test]
    fn an_identity_is_a_part_only_with_the_group() {
        assert_eq!(
            component_of(&user("system:sluice:component:dns", &[GROUP])),
            Some(Component::Dns)
        );
        assert_eq!(
            component_of(&user("system:sluice:component:dns", &[])),
            None
        );
        assert_eq!(
            component_of(&user("system:sluice:component:admin", &[GROUP])),
            None
        );
    }

    #[test]
    fn each_part_gets_what_it_calls_and_no_more() {
        let root = LogicalClusterPath::root();
        let shop: LogicalClusterPath = "root:shop".parse().unwrap();
        for c in Component::ALL {
            for verb in ["get", "list", "watch"] {
                assert_eq!(
                    decide(c, Some(&root), &res(verb, "sluice.dev", "clusters", "")),
                    Decision::Allow
                );
            }
            for verb in ["create", "update", "patch", "delete"] {
                assert_eq!(
                    decide(c, Some(&root), &res(verb, "sluice.dev", "clusters", "")),
                    Decision::NoOpinion,
                    "{c:?} {verb}"
                );
            }
            // No tenant's objects, in root or in another logical cluster.
            for (cluster, group, resource) in [
                (&root, "", "secrets"),
                (&root, "", "configmaps"),
                (&shop, "sluice.dev", "clusters"),
                (&shop, "networking.k8s.io", "ingresses"),
            ] {
                assert_eq!(
                    decide(c, Some(cluster), &res("list", group, resource, "")),
                    Decision::NoOpinion,
                    "{c:?} {cluster} {resource}"
                );
            }
            assert_eq!(
                decide(c, None, &res("list", "", "secrets", "")),
                Decision::NoOpinion
            );
        }
        let status = res("patch", "sluice.dev", "clusters", "status");
        assert_eq!(
            decide(Component::Mcs, Some(&root), &status),
            Decision::Allow
        );
        assert_eq!(
            decide(Component::Dns, Some(&root), &status),
            Decision::NoOpinion
        );
        let ingresses = res("watch", "networking.k8s.io", "ingresses", "");
        assert_eq!(
            decide(Component::Dataplane, None, &ingresses),
            Decision::Allow
        );
        assert_eq!(decide(Component::Dns, None, &ingresses), Decision::Allow);
        assert_eq!(
            decide(Component::Mcs, None, &ingresses),
            Decision::NoOpinion
        );
        assert_eq!(
            decide(
                Component::Dns,
                None,
                &res("create", "networking.k8s.io", "ingresses", "")
            ),
            Decision::NoOpinion
        );
    }
}
