//! The roles every logical cluster has without storing them: `cluster-admin`, `admin`,
//! `edit` and `view` as kube-apiserver's bootstrap policy defines them (after
//! aggregation), and the rules every authenticated user holds (`system:discovery`,
//! `system:basic-user`, `system:public-info-viewer`). Like kcp's bootstrap policy they live
//! outside any one logical cluster, so a new logical cluster costs no extra objects; a
//! ClusterRole stored under one of these names in a logical cluster replaces the default
//! there.

use std::collections::HashMap;
use std::sync::OnceLock;

use super::rules::Rule;

/// The group kube-apiserver gives every authenticated user.
pub const AUTHENTICATED: &str = "system:authenticated";

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];

fn view() -> Vec<Rule> {
    vec![
        Rule::new(
            READ,
            &[""],
            &[
                "bindings",
                "configmaps",
                "endpoints",
                "events",
                "limitranges",
                "namespaces",
                "namespaces/status",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "pods",
                "pods/log",
                "pods/status",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "replicationcontrollers/status",
                "resourcequotas",
                "resourcequotas/status",
                "serviceaccounts",
                "services",
                "services/status",
            ],
        ),
        // What the Pods use, as `kubectl top pod` reads it.
        Rule::new(READ, &[sluice_api::metrics::GROUP], &["pods"]),
        Rule::new(
            READ,
            &["apps"],
            &[
                "controllerrevisions",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "statefulsets",
                "statefulsets/scale",
                "statefulsets/status",
            ],
        ),
        Rule::new(
            READ,
            &["autoscaling"],
            &[
                "horizontalpodautoscalers",
                "horizontalpodautoscalers/status",
            ],
        ),
        Rule::new(
            READ,
            &["batch"],
            &["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
        ),
        Rule::new(
            READ,
            &["policy"],
            &["poddisruptionbudgets", "poddisruptionbudgets/status"],
        ),
        Rule::new(
            READ,
            &["networking.k8s.io"],
            &["ingresses", "ingresses/status", "networkpolicies"],
        ),
        Rule::new(READ, &["discovery.k8s.io"], &["endpointslices"]),
        // Sluice: where a team's workloads were placed.
        Rule::new(
            READ,
            &[sluice_api::sluice::GROUP],
            &["placements", "placements/status"],
        ),
    ]
}

fn edit() -> Vec<Rule> {
    let mut rules = view();
    rules.extend([
        Rule::new(
            READ,
            &[""],
            &[
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
                "secrets",
                "services/proxy",
            ],
        ),
        Rule::new(&["impersonate"], &[""], &["serviceaccounts"]),
        Rule::new(
            WRITE,
            &[""],
            &[
                "pods",
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
            ],
        ),
        Rule::new(&["create"], &[""], &["pods/eviction"]),
        Rule::new(
            WRITE,
            &[""],
            &[
                "configmaps",
                "events",
                "persistentvolumeclaims",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "secrets",
                "serviceaccounts",
                "services",
                "services/proxy",
            ],
        ),
        Rule::new(&["create"], &[""], &["serviceaccounts/token"]),
        Rule::new(
            WRITE,
            &["apps"],
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "replicasets",
                "replicasets/scale",
                "statefulsets",
                "statefulsets/scale",
            ],
        ),
        Rule::new(WRITE, &["autoscaling"], &["horizontalpodautoscalers"]),
        Rule::new(WRITE, &["batch"], &["cronjobs", "jobs"]),
        Rule::new(WRITE, &["policy"], &["poddisruptionbudgets"]),
        Rule::new(
            WRITE,
            &["networking.k8s.io"],
            &["ingresses", "networkpolicies"],
        ),
        Rule::new(
            &[
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch",
            ],
            &["coordination.k8s.io"],
            &["leases"],
        ),
        Rule::new(WRITE, &[sluice_api::sluice::GROUP], &["placements"]),
    ]);
    rules
}

fn admin() -> Vec<Rule> {
    let mut rules = edit();
    rules.extend([
        Rule::new(
            &["create"],
            &["authorization.k8s.io"],
            &["localsubjectaccessreviews"],
        ),
        Rule::new(
            &[
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch",
            ],
            &["rbac.authorization.k8s.io"],
            &["rolebindings", "roles"],
        ),
    ]);
    rules
}

fn cluster_admin() -> Vec<Rule> {
    vec![
        Rule::new(&["*"], &["*"], &["*"]),
        Rule::urls(&["*"], &["*"]),
    ]
}

/// What every authenticated user with access to a logical cluster may do there: discovery,
/// health, and asking what it may do.
fn authenticated() -> Vec<Rule> {
    vec![
        Rule::urls(
            &["get"],
            &[
                "/api",
                "/api/*",
                "/apis",
                "/apis/*",
                "/healthz",
                "/livez",
                "/openapi",
                "/openapi/*",
                "/readyz",
                "/version",
                "/version/",
            ],
        ),
        Rule::new(
            &["create"],
            &["authorization.k8s.io"],
            &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
        ),
        Rule::new(
            &["create"],
            &["authentication.k8s.io"],
            &["selfsubjectreviews"],
        ),
    ]
}

/// kube's `system:monitoring`: reading the server's metrics and health, for a scraper's
/// identity (anonymous clients get health only).
fn monitoring() -> Vec<Rule> {
    vec![Rule::urls(
        &["get"],
        &[
            "/metrics",
            "/metrics/slis",
            "/healthz",
            "/healthz/*",
            "/livez",
            "/livez/*",
            "/readyz",
            "/readyz/*",
        ],
    )]
}

struct Defaults {
    cluster_roles: HashMap<&'static str, Vec<Rule>>,
    authenticated: Vec<Rule>,
}

fn defaults() -> &'static Defaults {
    static D: OnceLock<Defaults> = OnceLock::new();
    D.get_or_init(|| Defaults {
        cluster_roles: HashMap::from([
            ("cluster-admin", cluster_admin()),
            ("admin", admin()),
            ("edit", edit()),
            ("view", view()),
            ("system:monitoring", monitoring()),
        ]),
        authenticated: authenticated(),
    })
}

/// The default ClusterRole of this name, if there is one.
pub fn cluster_role(name: &str) -> Option<&'static [Rule]> {
    defaults().cluster_roles.get(name).map(Vec::as_slice)
}

/// The names of the default ClusterRoles.
pub fn cluster_role_names() -> impl Iterator<Item = &'static str> {
    defaults().cluster_roles.keys().copied()
}

/// The rules of every member of `system:authenticated`.
pub fn authenticated_rules() -> &'static [Rule] {
    &defaults().authenticated
}

#[cfg(test)]
mod tests {
    use super::super::rules::covers;
    use super::*;

    #[test]
    fn each_default_role_contains_the_smaller_one() {
        let all = |name| cluster_role(name).unwrap();
        for r in all("view") {
            assert!(covers(all("edit"), r));
        }
        for r in all("edit") {
            assert!(covers(all("admin"), r));
        }
        for r in all("admin") {
            assert!(covers(all("cluster-admin"), r));
        }
        assert!(!covers(
            all("view"),
            &Rule::new(&["get"], &[""], &["secrets"])
        ));
    }
}
