#![allow(clippy::unwrap_used)]
//! RBAC per logical cluster, ServiceAccount tokens and impersonation with the real kubectl
//! (1.32 and a current one): bindings in `root:a` grant nothing in `root:b`, refusals are
//! kube-apiserver's 403s, `kubectl auth can-i` answers, a token from TokenRequest works
//! until it expires, and a Pod in a local cluster reaches its API server with its mounted
//! token through kube-rs's in-cluster configuration.

use crate::support;

use std::path::Path;
use std::time::Duration;

use support::{Control, DevUp, Kubectl, eventually, kubectls};

const WORKSPACES: &str = "apiVersion: sluice.dev/v1alpha1\nkind: Workspace\nmetadata:\n  name: a\n---\napiVersion: sluice.dev/v1alpha1\nkind: Workspace\nmetadata:\n  name: b\n";

/// kubectl against one logical cluster, as the admin or (with `token`) someone else.
fn kubectl_in(bin: &str, control: &Control, cluster: &str, token: Option<&str>) -> Kubectl {
    let dir = control.dir.join(format!("kc-{}", bin.replace('/', "_")));
    std::fs::create_dir_all(&dir).unwrap();
    let label = token.map_or("admin".to_string(), |t| {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        t.hash(&mut h);
        format!("{:x}", h.finish())
    });
    let path = dir.join(format!("{cluster}-{label}.kubeconfig"));
    let token = match token {
        Some(t) => t.to_string(),
        None => std::fs::read_to_string(control.dir.join("admin.token")).unwrap(),
    };
    let ca = std::fs::read_to_string(control.dir.join("ca.crt")).unwrap();
    let server = format!("{}/clusters/{cluster}", control.url);
    std::fs::write(
        &path,
        sluice_control::pki::kubeconfig(&server, &ca, cluster, "user", token.trim()),
    )
    .unwrap();
    Kubectl::new(bin, &path, &dir.join(format!("cache-{cluster}-{label}")))
}

fn start(dir: &Path, extra: &[&str]) -> Control {
    let tokens = dir.join("tokens.csv");
    std::fs::write(
        &tokens,
        "alice-token,alice,1001\nbob-token,bob,1002,\"ops\"\ncarol-token,carol,1003\n",
    )
    .unwrap();
    let mut args = vec!["--token-auth-file", tokens.to_str().unwrap()];
    args.extend_from_slice(extra);
    Control::start(&dir.join("control"), &args)
}

#[test]
fn edit_in_one_logical_cluster_view_in_another() {
    for bin in kubectls() {
        let dir = tempfile::tempdir().unwrap();
        let control = start(dir.path(), &[]);
        let root = kubectl_in(&bin, &control, "root", None);
        root.apply_stdin(WORKSPACES);
        let admin_a = kubectl_in(&bin, &control, "root:a", None);
        let admin_b = kubectl_in(&bin, &control, "root:b", None);
        admin_a.ok(&[
            "create",
            "clusterrolebinding",
            "alice-edit",
            "--clusterrole=edit",
            "--user=alice",
        ]);
        admin_b.ok(&[
            "create",
            "clusterrolebinding",
            "alice-view",
            "--clusterrole=view",
            "--user=alice",
        ]);
        let alice_a = kubectl_in(&bin, &control, "root:a", Some("alice-token"));
        let alice_b = kubectl_in(&bin, &control, "root:b", Some("alice-token"));

        // edit in root:a: a Deployment (and a Secret) can be created there.
        alice_a.ok(&["create", "deployment", "web", "--image=sluice/echo"]);
        alice_a.ok(&["create", "secret", "generic", "s", "--from-literal=k=v"]);
        // view in root:b: reading works; writing and Secrets are refused with kube's 403.
        assert!(alice_b.ok(&["get", "deployments"]).is_empty());
        let err = alice_b.fails(&["create", "deployment", "web", "--image=sluice/echo"]);
        assert!(
            err.contains("deployments.apps is forbidden: User \"alice\" cannot create resource \"deployments\" in API group \"apps\" in the namespace \"default\""),
            "{err}"
        );
        let err = alice_b.fails(&["get", "secrets"]);
        assert!(
            err.contains("Error from server (Forbidden): secrets is forbidden: User \"alice\" cannot list resource \"secrets\" in API group \"\" in the namespace \"default\""),
            "{err}"
        );
        assert_eq!(
            alice_b
                .ok(&["get", "namespace", "default", "-o", "name"])
                .trim(),
            "namespace/default"
        );
        // Nothing at all where nothing is bound (root).
        let alice_root = kubectl_in(&bin, &control, "root", Some("alice-token"));
        // (Not even discovery: kubectl reports its 403 as "Error from server (Forbidden)".)
        let err = alice_root.fails(&["get", "configmaps"]);
        assert!(err.to_lowercase().contains("forbidden"), "{err}");

        // kubectl auth can-i, one question and the list.
        assert_eq!(
            alice_a
                .ok(&["auth", "can-i", "create", "deployments"])
                .trim(),
            "yes"
        );
        let no = alice_b.run(&["auth", "can-i", "create", "deployments"]);
        assert_eq!(String::from_utf8_lossy(&no.stdout).trim(), "no");
        assert!(!no.status.success());
        assert_eq!(
            alice_b.ok(&["auth", "can-i", "list", "deployments"]).trim(),
            "yes"
        );
        let list = alice_a.ok(&["auth", "can-i", "--list"]);
        let deployments = list
            .lines()
            .find(|l| l.starts_with("deployments.apps "))
            .unwrap_or_else(|| panic!("{list}"));
        assert!(deployments.contains("create"), "{deployments}");
        assert!(
            list.contains("selfsubjectaccessreviews.authorization.k8s.io"),
            "{list}"
        );
        let whoami = alice_a.ok(&[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ]);
        assert_eq!(whoami, "alice");
        // The admin asks about alice (SubjectAccessReview through `--as`).
        assert_eq!(
            admin_a
                .ok(&["auth", "can-i", "delete", "secrets", "--as=alice"])
                .trim(),
            "yes"
        );
        let no = admin_b.run(&["auth", "can-i", "delete", "secrets", "--as=alice"]);
        assert_eq!(String::from_utf8_lossy(&no.stdout).trim(), "no");

        // Impersonation: the admin may, alice may not.
        let err = admin_b.fails(&["create", "configmap", "c", "--as=alice"]);
        assert!(
            err.contains("User \"alice\" cannot create resource \"configmaps\""),
            "{err}"
        );
        let err = alice_a.fails(&["get", "pods", "--as=bob"]);
        assert!(
            err.contains("users \"bob\" is forbidden: User \"alice\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"),
            "{err}"
        );

        // No escalation: admin of root:a (through group ops) may bind what it holds (edit),
        // not cluster-admin, and may not write a Role with more than it holds.
        admin_a.ok(&[
            "create",
            "clusterrolebinding",
            "ops-admin",
            "--clusterrole=admin",
            "--group=ops",
        ]);
        let bob_a = kubectl_in(&bin, &control, "root:a", Some("bob-token"));
        bob_a.ok(&[
            "create",
            "rolebinding",
            "carol-edit",
            "--clusterrole=edit",
            "--user=carol",
        ]);
        let err = bob_a.fails(&[
            "create",
            "rolebinding",
            "carol-root",
            "--clusterrole=cluster-admin",
            "--user=carol",
        ]);
        assert!(
            err.contains("attempting to grant RBAC permissions not currently held"),
            "{err}"
        );
        let err = bob_a.fails(&["create", "role", "nodes", "--verb=get", "--resource=nodes"]);
        assert!(
            err.contains("attempting to grant RBAC permissions not currently held"),
            "{err}"
        );
        let carol_a = kubectl_in(&bin, &control, "root:a", Some("carol-token"));
        eventually(Duration::from_secs(20), || {
            carol_a.run(&["get", "deployments"]).status.success()
        });
        carol_a.ok(&["get", "deployment", "web"]);

        // A workspace's creator administers it, and nothing else.
        admin_a.ok(&["get", "clusterrolebindings"]);
        root.ok(&[
            "create",
            "clusterrole",
            "workspace-maker",
            "--verb=create,get,list,watch",
            "--resource=workspaces.sluice.dev",
        ]);
        root.ok(&[
            "create",
            "clusterrolebinding",
            "carol-workspaces",
            "--clusterrole=workspace-maker",
            "--user=carol",
        ]);
        let carol_root = kubectl_in(&bin, &control, "root", Some("carol-token"));
        carol_root.apply_stdin(
            "apiVersion: sluice.dev/v1alpha1\nkind: Workspace\nmetadata:\n  name: c\n",
        );
        let carol_c = kubectl_in(&bin, &control, "root:c", Some("carol-token"));
        carol_c.ok(&["create", "namespace", "team"]);
        carol_c.ok(&[
            "create",
            "clusterrolebinding",
            "x",
            "--clusterrole=view",
            "--user=alice",
        ]);
        assert!(
            carol_root
                .fails(&["get", "configmaps"])
                .contains("forbidden")
        );
        let alice_c = kubectl_in(&bin, &control, "root:c", Some("alice-token"));
        eventually(Duration::from_secs(20), || {
            alice_c.run(&["get", "ns", "team"]).status.success()
        });
        alice_c.ok(&["get", "namespace", "team"]);
    }
}

#[test]
fn service_account_tokens_work_until_they_expire() {
    let bin = kubectls().remove(0);
    let dir = tempfile::tempdir().unwrap();
    let control = start(dir.path(), &["--service-account-min-token-seconds", "2"]);
    kubectl_in(&bin, &control, "root", None).apply_stdin(WORKSPACES);
    let admin_a = kubectl_in(&bin, &control, "root:a", None);
    admin_a.ok(&["create", "serviceaccount", "bot"]);
    admin_a.ok(&[
        "create",
        "rolebinding",
        "bot-view",
        "--clusterrole=view",
        "--serviceaccount=default:bot",
    ]);
    admin_a.ok(&["create", "configmap", "cfg"]);
    admin_a.ok(&["create", "deployment", "web", "--image=sluice/echo"]);

    // A token of an hour works in its logical cluster, with the rights bound to it.
    let token = admin_a.ok(&["create", "token", "bot"]).trim().to_string();
    let bot_a = kubectl_in(&bin, &control, "root:a", Some(&token));
    assert!(
        bot_a
            .ok(&["get", "deployments", "-o", "name"])
            .contains("deployment.apps/web")
    );
    let err = bot_a.fails(&["get", "secrets"]);
    assert!(
        err.contains("User \"system:serviceaccount:default:bot\" cannot list resource \"secrets\""),
        "{err}"
    );
    // Not in another logical cluster, not for another audience.
    let bot_b = kubectl_in(&bin, &control, "root:b", Some(&token));
    // A 401: kubectl words it "Unauthorized" or, when discovery already fails, "the server
    // has asked for the client to provide credentials".
    let err = bot_b.fails(&["get", "deployments"]);
    assert!(
        err.contains("Unauthorized") || err.contains("provide credentials"),
        "{err}"
    );
    let vault = admin_a
        .ok(&["create", "token", "bot", "--audience=vault"])
        .trim()
        .to_string();
    assert!(
        !kubectl_in(&bin, &control, "root:a", Some(&vault))
            .run(&["get", "deployments"])
            .status
            .success()
    );
    // Below the minimum is refused with kube's wording; a tampered token is not accepted.
    let err = admin_a.fails(&["create", "token", "bot", "--duration=1s"]);
    assert!(
        err.contains("may not specify a duration less than 2 seconds"),
        "{err}"
    );
    let mut forged = token.clone();
    forged.pop();
    forged.push(if token.ends_with('A') { 'B' } else { 'A' });
    assert!(
        !kubectl_in(&bin, &control, "root:a", Some(&forged))
            .run(&["get", "deployments"])
            .status
            .success()
    );

    // A short token works, then stops working when it expires.
    let short = admin_a
        .ok(&["create", "token", "bot", "--duration=3s"])
        .trim()
        .to_string();
    let bot_short = kubectl_in(&bin, &control, "root:a", Some(&short));
    bot_short.ok(&["get", "configmap", "cfg"]);
    assert!(
        eventually(Duration::from_secs(30), || {
            let out = bot_short.run(&["get", "configmap", "cfg"]);
            !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("Unauthorized")
        }),
        "the expired token still works"
    );
    // Deleting the ServiceAccount ends its tokens at once.
    bot_a.ok(&["get", "configmap", "cfg"]);
    admin_a.ok(&["delete", "serviceaccount", "bot"]);
    let out = bot_a.run(&["get", "configmap", "cfg"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Unauthorized"));
}

#[test]
fn a_pod_reaches_its_api_server_with_its_mounted_token() {
    let (dev, _) = DevUp::start("east");
    let east = dev.kubectl("east");
    east.ok(&["create", "namespace", "team"]);
    east.ok(&["create", "serviceaccount", "reader", "-n", "team"]);
    east.apply_stdin(
        r#"apiVersion: v1
kind: Pod
metadata: {name: who, namespace: team}
spec:
  serviceAccountName: reader
  restartPolicy: Never
  containers:
  - name: main
    image: ghcr.io/sluice/sluice:0.1.0
    args: ["whoami", "--in-cluster"]
---
apiVersion: v1
kind: Pod
metadata: {name: none, namespace: team}
spec:
  automountServiceAccountToken: false
  restartPolicy: Never
  containers:
  - name: main
    image: sluice
    args: ["whoami", "--in-cluster"]
"#,
    );
    let phase = |pod: &str| {
        east.ok(&[
            "get",
            "pod",
            pod,
            "-n",
            "team",
            "-o",
            "jsonpath={.status.phase}",
        ])
    };
    assert!(
        eventually(Duration::from_secs(60), || phase("who") == "Succeeded"),
        "who: {}",
        east.ok(&["get", "pod", "who", "-n", "team", "-o", "yaml"])
    );
    let log = east.ok(&["logs", "who", "-n", "team"]);
    assert_eq!(
        log.trim(),
        "system:serviceaccount:team:reader system:serviceaccounts,system:serviceaccounts:team,system:authenticated"
    );
    // Without a token the in-cluster configuration has nothing to offer.
    assert!(eventually(Duration::from_secs(60), || phase("none") == "Failed"));
}

#[test]
fn a_syncer_identity_reads_nothing_of_another_clusters_placements() {
    let (dev, _) = DevUp::start("east,west");
    let control = dev.kubectl_control();
    control.apply_stdin(
        r#"apiVersion: v1
kind: Namespace
metadata: {name: shop-east, labels: {sluice.dev/cluster: east}}
---
apiVersion: v1
kind: Namespace
metadata: {name: shop-west, labels: {sluice.dev/cluster: west}}
---
apiVersion: v1
kind: Secret
metadata: {name: e, namespace: shop-east}
stringData: {k: east-secret}
---
apiVersion: v1
kind: Secret
metadata: {name: w, namespace: shop-west}
stringData: {k: west-secret}
"#,
    );
    // The syncers work with their own identities: each Secret reaches its cluster.
    let ns_of = |ns: &str| dev.kubectl_control().downstream("root", ns);
    for (cluster, ns, secret) in [("east", "shop-east", "e"), ("west", "shop-west", "w")] {
        let k = dev.kubectl(cluster);
        assert!(
            eventually(Duration::from_secs(60), || {
                k.run(&["get", "secret", secret, "-n", &ns_of(ns)])
                    .status
                    .success()
            }),
            "secret {secret} did not reach {cluster}"
        );
    }
    let url = std::fs::read_to_string(dev.state.join("control").join("server.url")).unwrap();
    let east = Kubectl::new(
        &kubectls().remove(0),
        &dev.state.join("syncers").join("east.kubeconfig"),
        &dev.state.join("cache-syncer-east"),
    );
    let everywhere = format!("--server={}/clusters/*", url.trim());
    // Across logical clusters, with its own cluster's selector: its placements only.
    let listed = east.ok(&[
        &everywhere,
        "get",
        "secrets",
        "-A",
        "-l",
        "state.sluice.dev/east",
        "-o",
        "name",
    ]);
    assert_eq!(listed.trim(), "secret/e");
    // Without the selector, or with another cluster's: refused.
    for args in [
        vec![everywhere.as_str(), "get", "secrets", "-A"],
        vec![
            everywhere.as_str(),
            "get",
            "secrets",
            "-A",
            "-l",
            "state.sluice.dev/west",
        ],
        vec!["get", "secrets", "-n", "shop-west"],
        vec!["get", "secret", "w", "-n", "shop-west"],
        vec!["get", "configmaps", "-A"],
    ] {
        let err = east.fails(&args);
        assert!(
            err.contains("User \"system:sluice:syncer:east\" cannot"),
            "{args:?}: {err}"
        );
    }
    // One object: its own placement yes, the other's no; and no writes there.
    assert!(
        east.ok(&["get", "secret", "e", "-n", "shop-east", "-o", "name"])
            .contains("secret/e")
    );
    let err = east.fails(&["annotate", "secret", "w", "-n", "shop-west", "x=y"]);
    assert!(err.contains("forbidden"), "{err}");
    let err = east.fails(&["create", "secret", "generic", "new", "-n", "shop-east"]);
    assert!(err.contains("forbidden"), "{err}");
    // On what is placed on its cluster: its own reports only; no deletes, no tokens.
    let err = east.fails(&["annotate", "secret", "e", "-n", "shop-east", "x=y"]);
    assert!(
        err.contains("may change only its own status report"),
        "{err}"
    );
    let err = east.fails(&[
        "label",
        "namespace",
        "shop-west",
        "sluice.dev/cluster=east",
        "--overwrite",
    ]);
    assert!(err.contains("may change only its own"), "{err}");
    let err = east.fails(&["delete", "secret", "e", "-n", "shop-east"]);
    assert!(err.contains("forbidden"), "{err}");
    control.ok(&["create", "serviceaccount", "app", "-n", "shop-east"]);
    let err = east.fails(&["create", "token", "app", "-n", "shop-east"]);
    assert!(err.contains("forbidden"), "{err}");
    assert_eq!(
        control.ok(&[
            "get",
            "secret",
            "e",
            "-n",
            "shop-east",
            "-o",
            "jsonpath={.data.k}"
        ]),
        "ZWFzdC1zZWNyZXQ="
    );
}
