//! Policy rules and kube-apiserver's matching semantics: verbs, API groups, resources with
//! subresources (`pods/log`, `*/scale`), resourceNames and nonResourceURLs (`/healthz/*`).

use serde::Deserialize;

/// What a request asks to do, as the RBAC authorizer sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action<'a> {
    Resource {
        verb: &'a str,
        group: &'a str,
        resource: &'a str,
        subresource: &'a str,
        namespace: &'a str,
        name: &'a str,
    },
    NonResource {
        verb: &'a str,
        path: &'a str,
    },
}

impl Action<'_> {
    pub fn verb(&self) -> &str {
        match self {
            Action::Resource { verb, .. } | Action::NonResource { verb, .. } => verb,
        }
    }

    pub fn namespace(&self) -> &str {
        match self {
            Action::Resource { namespace, .. } => namespace,
            Action::NonResource { .. } => "",
        }
    }
}

/// One rule of a Role or ClusterRole (rbac.authorization.k8s.io/v1 `PolicyRule`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Rule {
    pub verbs: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub api_groups: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resource_names: Vec<String>,
    #[serde(rename = "nonResourceURLs", skip_serializing_if = "Vec::is_empty")]
    pub non_resource_urls: Vec<String>,
}

const ALL: &str = "*";

fn has(list: &[String], want: &str) -> bool {
    list.iter().any(|v| v == ALL || v == want)
}

impl Rule {
    /// A rule from literal lists (the bootstrap roles).
    pub fn new(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Self {
        Rule {
            verbs: verbs.iter().map(|s| s.to_string()).collect(),
            api_groups: groups.iter().map(|s| s.to_string()).collect(),
            resources: resources.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    /// A rule for non-resource URLs.
    pub fn urls(verbs: &[&str], urls: &[&str]) -> Self {
        Rule {
            verbs: verbs.iter().map(|s| s.to_string()).collect(),
            non_resource_urls: urls.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    /// Whether this rule allows `action` (kube's `RuleAllows`).
    pub fn allows(&self, action: &Action<'_>) -> bool {
        match *action {
            Action::Resource {
                verb,
                group,
                resource,
                subresource,
                name,
                ..
            } => {
                has(&self.verbs, verb)
                    && has(&self.api_groups, group)
                    && self.resource_matches(resource, subresource)
                    && (self.resource_names.is_empty()
                        || (!name.is_empty() && self.resource_names.iter().any(|n| n == name)))
            }
            Action::NonResource { verb, path } => {
                has(&self.verbs, verb)
                    && self.non_resource_urls.iter().any(|u| url_matches(u, path))
            }
        }
    }

    fn resource_matches(&self, resource: &str, subresource: &str) -> bool {
        self.resources.iter().any(|r| {
            if r == ALL {
                return true;
            }
            if subresource.is_empty() {
                return r == resource;
            }
            match r.split_once('/') {
                Some((res, sub)) => (res == resource || res == ALL) && sub == subresource,
                None => false,
            }
        })
    }
}

/// Whether `owner` grants everything `servant` grants (kube's escalation check,
/// `validation.Covers`): `servant` is broken into atomic rules (one verb, group, resource
/// and name, or one verb and URL), each of which some rule of `owner` must match literally
/// or with a `*`; a `*` in `servant` is only matched by a `*`.
pub fn covers(owner: &[Rule], servant: &Rule) -> bool {
    let names: Vec<&str> = if servant.resource_names.is_empty() {
        vec![""]
    } else {
        servant.resource_names.iter().map(String::as_str).collect()
    };
    servant.verbs.iter().all(|verb| {
        let urls_ok = servant.non_resource_urls.iter().all(|url| {
            owner.iter().any(|o| {
                has(&o.verbs, verb) && o.non_resource_urls.iter().any(|m| url_matches(m, url))
            })
        });
        urls_ok
            && servant.api_groups.iter().all(|group| {
                servant.resources.iter().all(|resource| {
                    names.iter().all(|name| {
                        owner.iter().any(|o| {
                            has(&o.verbs, verb)
                                && has(&o.api_groups, group)
                                && o.resources.iter().any(|m| {
                                    m == ALL
                                        || m == resource
                                        || match (m.split_once('/'), resource.split_once('/')) {
                                            (Some((ALL, msub)), Some((_, rsub))) => msub == rsub,
                                            _ => false,
                                        }
                                })
                                && (o.resource_names.is_empty()
                                    || o.resource_names.iter().any(|n| n == name))
                        })
                    })
                })
            })
    })
}

fn url_matches(rule: &str, path: &str) -> bool {
    rule == ALL
        || rule == path
        || rule
            .strip_suffix('*')
            .is_some_and(|prefix| path.starts_with(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res<'a>(verb: &'a str, group: &'a str, resource: &'a str, sub: &'a str) -> Action<'a> {
        Action::Resource {
            verb,
            group,
            resource,
            subresource: sub,
            namespace: "default",
            name: "x",
        }
    }

    #[test]
    fn matching_follows_kube() {
        let r = Rule::new(&["get", "list"], &["apps"], &["deployments", "*/scale"]);
        assert!(r.allows(&res("get", "apps", "deployments", "")));
        assert!(!r.allows(&res("delete", "apps", "deployments", "")));
        assert!(!r.allows(&res("get", "", "deployments", "")));
        assert!(r.allows(&res("get", "apps", "replicasets", "scale")));
        assert!(!r.allows(&res("get", "apps", "deployments", "status")));
        let logs = Rule::new(&["get"], &[""], &["pods/log"]);
        assert!(logs.allows(&res("get", "", "pods", "log")));
        assert!(!logs.allows(&res("get", "", "pods", "")));
        let named = Rule {
            resource_names: vec!["x".into()],
            ..Rule::new(&["get"], &["*"], &["*"])
        };
        assert!(named.allows(&res("get", "", "secrets", "")));
        assert!(!named.allows(&Action::Resource {
            verb: "list",
            group: "",
            resource: "secrets",
            subresource: "",
            namespace: "",
            name: ""
        }));
        let urls = Rule::urls(&["get"], &["/healthz/*", "/version"]);
        assert!(urls.allows(&Action::NonResource {
            verb: "get",
            path: "/healthz/etcd"
        }));
        assert!(urls.allows(&Action::NonResource {
            verb: "get",
            path: "/version"
        }));
        assert!(!urls.allows(&Action::NonResource {
            verb: "get",
            path: "/metrics"
        }));
        assert!(!urls.allows(&res("get", "", "pods", "")));
    }

    #[test]
    fn coverage_needs_wildcards_to_grant_wildcards() {
        let all = [Rule::new(&["*"], &["*"], &["*"])];
        let edit = Rule::new(&["get", "create"], &["apps"], &["deployments"]);
        assert!(covers(&all, &edit));
        assert!(!covers(std::slice::from_ref(&edit), &all[0]));
        let split = [
            Rule::new(&["get"], &["apps"], &["deployments"]),
            Rule::new(&["create"], &["apps"], &["deployments"]),
        ];
        assert!(covers(&split, &edit));
        assert!(!covers(
            &split,
            &Rule::new(&["delete"], &["apps"], &["deployments"])
        ));
        let any_scale = [Rule::new(&["get"], &["apps"], &["*/scale"])];
        assert!(covers(
            &any_scale,
            &Rule::new(&["get"], &["apps"], &["deployments/scale"])
        ));
        let named = Rule {
            resource_names: vec!["a".into()],
            ..edit.clone()
        };
        assert!(covers(std::slice::from_ref(&edit), &named));
        assert!(!covers(std::slice::from_ref(&named), &edit));
        let urls = [Rule::urls(&["get"], &["/healthz/*"])];
        assert!(covers(&urls, &Rule::urls(&["get"], &["/healthz/etcd"])));
        assert!(!covers(&urls, &Rule::urls(&["get"], &["/metrics"])));
    }
}
