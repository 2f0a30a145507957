#![allow(clippy::unwrap_used)]
//! The cost of an RBAC check per request, in process: `Authorizer::decide` for a request
//! of a user bound in a logical cluster with 1 and with 1,000 bindings (RoleBindings and
//! ClusterRoleBindings for users, groups and ServiceAccounts), allowed and refused; and the
//! time to index a cluster's policy again after one of its bindings changed. Target: under
//! 5 µs per check at 1,000 bindings.
//!
//!     cargo bench -p sluice-control --bench rbac

use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::json;
use sluice_api::LogicalClusterPath;
use sluice_control::auth::User;
use sluice_control::rbac::{Action, Authorizer, Decision};
use sluice_control::storage::{Expect, Op, RedbBackend, ResourcePrefix, Store};

const GROUP: &str = "rbac.authorization.k8s.io";

async fn put(
    store: &Store,
    resource: &str,
    cluster: &LogicalClusterPath,
    ns: Option<&str>,
    obj: serde_json::Value,
) {
    let name = obj["metadata"]["name"].as_str().unwrap().to_string();
    store
        .write(Op::Put {
            key: ResourcePrefix::new(GROUP, resource).key(cluster, ns, &name),
            value: Bytes::from(serde_json::to_vec(&obj).unwrap()),
            expect: Expect::Absent,
        })
        .await
        .unwrap();
}

/// `bindings` bindings in `cluster`: per user `u<i>` a RoleBinding to `edit` in `ns-<i>`,
/// every tenth a ClusterRoleBinding to `view` for group `g<i>`, every seventh a RoleBinding
/// of ServiceAccount `sa-<i>` to a Role of its own.
async fn fill(store: &Store, cluster: &LogicalClusterPath, bindings: usize) {
    let mut made = 0;
    let mut i = 0;
    while made < bindings {
        let ns = format!("ns-{i}");
        put(
            store,
            "rolebindings",
            cluster,
            Some(&ns),
            json!({
                "metadata": {"name": format!("u{i}-edit"), "namespace": ns},
                "subjects": [{"kind": "User", "name": format!("u{i}")}],
                "roleRef": {"kind": "ClusterRole", "name": "edit", "apiGroup": GROUP},
            }),
        )
        .await;
        made += 1;
        if i % 10 == 0 && made < bindings {
            put(
                store,
                "clusterrolebindings",
                cluster,
                None,
                json!({
                    "metadata": {"name": format!("g{i}-view")},
                    "subjects": [{"kind": "Group", "name": format!("g{i}")}],
                    "roleRef": {"kind": "ClusterRole", "name": "view", "apiGroup": GROUP},
                }),
            )
            .await;
            made += 1;
        }
        if i % 7 == 0 && made < bindings {
            put(store, "roles", cluster, Some(&ns), json!({
                "metadata": {"name": "reader", "namespace": ns},
                "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["configmaps", "secrets"]}],
            })).await;
            put(store, "rolebindings", cluster, Some(&ns), json!({
                "metadata": {"name": format!("sa-{i}-reader"), "namespace": ns},
                "subjects": [{"kind": "ServiceAccount", "name": format!("sa-{i}"), "namespace": ns}],
                "roleRef": {"kind": "Role", "name": "reader", "apiGroup": GROUP},
            })).await;
            made += 1;
        }
        i += 1;
    }
}

/// Nanoseconds per check, the median of 15 rounds of 20,000 checks.
fn per_check(
    authz: &Authorizer,
    store: &Store,
    cluster: &LogicalClusterPath,
    user: &User,
    action: &Action<'_>,
    expect: Decision,
) -> f64 {
    assert_eq!(authz.decide(store, cluster, user, action), expect);
    let mut rounds: Vec<Duration> = (0..15)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..20_000 {
                std::hint::black_box(authz.decide(
                    store,
                    cluster,
                    user,
                    std::hint::black_box(action),
                ));
            }
            t.elapsed()
        })
        .collect();
    rounds.sort();
    rounds[7].as_nanos() as f64 / 20_000.0
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        RedbBackend::open(&dir.path().join("db.redb")).unwrap(),
        1000,
    )
    .unwrap();
    let small: LogicalClusterPath = "root:small".parse().unwrap();
    let large: LogicalClusterPath = "root:large".parse().unwrap();
    rt.block_on(async {
        fill(&store, &small, 1).await;
        fill(&store, &large, 1000).await;
    });
    let count = |c: &LogicalClusterPath| {
        ["rolebindings", "clusterrolebindings"]
            .iter()
            .map(|r| store.count(&ResourcePrefix::new(GROUP, r).scope(Some(c), None)))
            .sum::<usize>()
    };
    println!(
        "bindings: {} in {small}, {} in {large}",
        count(&small),
        count(&large)
    );
    let authz = Authorizer::default();
    let user = |name: &str, groups: &[&str]| User {
        name: name.into(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
        binding: None,
    };
    let create = |ns: &'static str| Action::Resource {
        verb: "create",
        group: "apps",
        resource: "deployments",
        subresource: "",
        namespace: ns,
        name: "",
    };
    let cases: Vec<(&str, User, Action<'static>, Decision)> = vec![
        (
            "user bound by a RoleBinding, allowed",
            user("u0", &[]),
            create("ns-0"),
            Decision::Allow,
        ),
        (
            "same user, another namespace: refused",
            user("u0", &[]),
            create("ns-1"),
            Decision::NoOpinion,
        ),
        (
            "unbound user with 3 groups: refused",
            user("nobody", &["a", "b", "c"]),
            create("ns-0"),
            Decision::NoOpinion,
        ),
        (
            "group bound to view, list allowed",
            user("x", &["g0"]),
            Action::Resource {
                verb: "list",
                group: "",
                resource: "pods",
                subresource: "",
                namespace: "ns-5",
                name: "",
            },
            Decision::Allow,
        ),
        (
            "ServiceAccount bound to a Role, get allowed",
            user(
                "system:serviceaccount:ns-0:sa-0",
                &["system:serviceaccounts", "system:serviceaccounts:ns-0"],
            ),
            Action::Resource {
                verb: "get",
                group: "",
                resource: "secrets",
                subresource: "",
                namespace: "ns-0",
                name: "s",
            },
            Decision::Allow,
        ),
    ];
    println!(
        "{:<48} {:>12} {:>14}",
        "check", "1 binding", "1,000 bindings"
    );
    let mut worst = 0.0f64;
    for (what, u, action, expect) in &cases {
        let in_small = if what.starts_with("group") || what.starts_with("ServiceAccount") {
            None
        } else {
            Some(per_check(&authz, &store, &small, u, action, *expect))
        };
        let in_large = per_check(&authz, &store, &large, u, action, *expect);
        worst = worst.max(in_large);
        println!(
            "{what:<48} {:>12} {:>11.0} ns",
            in_small.map_or("-".to_string(), |n| format!("{n:.0} ns")),
            in_large
        );
    }
    // Re-indexing after a change (what the first request after a binding write pays).
    let mut rebuild: Vec<Duration> = (0..20)
        .map(|_| {
            authz.policies.invalidate(&large);
            let t = Instant::now();
            authz.policies.of(&store, &large);
            t.elapsed()
        })
        .collect();
    rebuild.sort();
    println!(
        "{:<48} {:>12} {:>11.2} ms",
        "index the policy again after a change",
        "",
        rebuild[10].as_secs_f64() * 1e3
    );
    println!(
        "TARGET check at 1,000 bindings: worst case {:.0} ns vs < 5 µs: {:.0}x under",
        worst,
        5000.0 / worst
    );
}
