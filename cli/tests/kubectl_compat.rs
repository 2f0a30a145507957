#![allow(clippy::unwrap_used)]
//! What a new user's first kubectl commands expect of an API server, as kube-apiserver
//! does it: the system namespaces in every logical cluster, Secret `stringData`, Service IP
//! families, and a physical cluster's objects carrying nothing kube-apiserver does not add.

mod support;

use support::{Control, Kubectl, kubectls};

fn jsonpath(k: &Kubectl, args: &[&str], path: &str) -> String {
    let mut a = args.to_vec();
    let expr = format!("jsonpath={path}");
    a.extend(["-o", &expr]);
    k.ok(&a)
}

/// A user's first commands in the root cluster and in a new workspace's cluster.
fn first_commands(k: &Kubectl) {
    let namespaces = jsonpath(k, &["get", "namespaces"], "{.items[*].metadata.name}");
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(namespaces.split(' ').any(|n| n == ns), "{ns} in {namespaces}");
    }
    assert_eq!(
        jsonpath(
            k,
            &["get", "namespace", "kube-public"],
            "{.metadata.labels.kubernetes\\.io/metadata\\.name}"
        ),
        "kube-public"
    );
    // No -n: the default namespace.
    k.ok(&["create", "deployment", "web", "--image=sluice/echo"]);
    k.ok(&["create", "configmap", "settings", "--from-literal=mode=fast"]);
    assert_eq!(
        jsonpath(k, &["get", "deployment", "web"], "{.metadata.namespace}"),
        "default"
    );

    // stringData is merged into data (base64) and not stored.
    k.apply_stdin(
        "apiVersion: v1\nkind: Secret\nmetadata: {name: creds}\ndata: {user: b2xk}\nstringData: {user: admin, password: s3cr3t}\n",
    );
    assert_eq!(
        jsonpath(k, &["get", "secret", "creds"], "{.data.user} {.data.password} {.type}"),
        "YWRtaW4= czNjcjN0 Opaque"
    );
    let secret = k.ok(&["get", "secret", "creds", "-o", "json"]);
    assert!(!secret.contains("stringData"), "{secret}");

    // A headless Service gets its IP families like any other.
    k.apply_stdin(
        "apiVersion: v1\nkind: Service\nmetadata: {name: db}\nspec: {clusterIP: None, selector: {app: db}, ports: [{port: 5432}]}\n",
    );
    assert_eq!(
        jsonpath(
            k,
            &["get", "service", "db"],
            "{.spec.ipFamilies} {.spec.ipFamilyPolicy}"
        ),
        "[\"IPv4\"] SingleStack"
    );
}

#[test]
fn every_logical_cluster_has_the_system_namespaces_and_kube_defaults() {
    for bin in kubectls() {
        let dir = tempfile::tempdir().unwrap();
        let control = Control::start(dir.path(), &[]);
        let root = Kubectl::new(&bin, &control.kubeconfig, &dir.path().join("cache"));
        first_commands(&root);
        root.apply_stdin("apiVersion: sluice.dev/v1alpha1\nkind: Workspace\nmetadata: {name: shop}\n");
        let shop = Kubectl::new(
            &bin,
            &control.workspace_kubeconfig("root:shop"),
            &dir.path().join("cache-shop"),
        );
        first_commands(&shop);
        // A nested workspace too.
        shop.apply_stdin("apiVersion: sluice.dev/v1alpha1\nkind: Workspace\nmetadata: {name: team}\n");
        let team = Kubectl::new(
            &bin,
            &control.workspace_kubeconfig("root:shop:team"),
            &dir.path().join("cache-team"),
        );
        team.ok(&["create", "configmap", "c", "--from-literal=a=b"]);
    }
}

#[test]
fn a_physical_clusters_objects_carry_no_logical_cluster_annotation() {
    let bin = kubectls().remove(0);
    let dir = tempfile::tempdir().unwrap();
    let control = Control::start(
        dir.path(),
        &["--single-cluster", "--service-cidr", "127.41.0.0/16"],
    );
    let k = Kubectl::new(&bin, &control.kubeconfig, &dir.path().join("cache"));
    k.ok(&["create", "configmap", "settings", "--from-literal=mode=fast"]);
    k.ok(&["label", "configmap", "settings", "tier=web"]);
    for what in [
        &["configmap", "settings"][..],
        &["namespace", "default"],
        &["service", "kubernetes"],
    ] {
        let mut args = vec!["get"];
        args.extend_from_slice(what);
        args.extend(["-o", "json"]);
        let out = k.ok(&args);
        assert!(!out.contains("sluice.dev/logical-cluster"), "{what:?}: {out}");
    }
    // The system namespaces a physical cluster has, and the ones it keeps.
    let namespaces = jsonpath(&k, &["get", "namespaces"], "{.items[*].metadata.name}");
    assert_eq!(namespaces, "default kube-node-lease kube-public kube-system");
    let refused = k.fails(&["delete", "namespace", "kube-public"]);
    assert!(refused.contains("may not be deleted"), "{refused}");
}
