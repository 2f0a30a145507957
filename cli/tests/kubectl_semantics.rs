#![allow(clippy::unwrap_used)]
//! Full API semantics through the real kubectl (issue: control semantics, done-when 1):
//! CRDs, server-side apply, diff, cascading deletion, tables.

use crate::support;

use std::process::Stdio;
use std::time::Duration;

use support::{Control, Kubectl, eventually, kubectls};

fn crd(size_type: &str) -> String {
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {{plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {{status: {{}}}}
    additionalPrinterColumns:
    - {{name: Size, type: string, jsonPath: .spec.size}}
    - {{name: Ready, type: string, jsonPath: '.status.conditions[?(@.type=="Ready")].status'}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {{type: {size_type}}}
              color: {{type: string, default: blue}}
          status:
            type: object
            properties:
              conditions:
                type: array
                items: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
"#
    )
}

const DEPLOYMENT: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: demo}
spec:
  replicas: 2
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers: [{name: api, image: "sluice/echo:1"}]
"#;

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

fn crd_lifecycle(k: &Kubectl, dir: &std::path::Path) {
    k.ok(&["apply", "-f", &write(dir, "crd.yaml", &crd("integer"))]);
    assert!(
        k.ok(&[
            "get",
            "crd",
            "widgets.example.com",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Established\")].status}"
        ])
        .contains("True")
    );
    k.ok(&["create", "namespace", "demo"]);
    k.apply_stdin("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1, namespace: demo}\nspec: {size: 3}\n");
    // Defaulting from the schema.
    assert_eq!(
        k.ok(&[
            "get",
            "widget",
            "w1",
            "-n",
            "demo",
            "-o",
            "jsonpath={.spec.color}"
        ]),
        "blue"
    );
    // An instance with an invalid field is rejected with the schema error.
    let out = k
        .command(&["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = feed(
        out,
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w2, namespace: demo}\nspec: {size: big}\n",
    );
    assert!(
        err.contains("spec.size in body must be of type integer"),
        "{err}"
    );
    // Printer columns (and the short name) in get.
    let table = k.ok(&["get", "wd", "-n", "demo"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "SIZE", "READY"], "{table}");
    // wait for a condition another client sets through the status subresource.
    let mut waiter = k
        .command(&[
            "wait",
            "--for=condition=Ready",
            "widget/w1",
            "-n",
            "demo",
            "--timeout=20s",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    k.ok(&[
        "patch",
        "widget",
        "w1",
        "-n",
        "demo",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"conditions":[{"type":"Ready","status":"True"}]}}"#,
    ]);
    let status = waiter.wait().unwrap();
    assert!(status.success(), "kubectl wait did not see the condition");
    assert!(
        k.ok(&["get", "wd", "w1", "-n", "demo"])
            .lines()
            .nth(1)
            .unwrap()
            .contains("True")
    );
    // The main resource ignores status; status ignores spec.
    k.ok(&[
        "patch",
        "widget",
        "w1",
        "-n",
        "demo",
        "--type=merge",
        "-p",
        r#"{"status":{"conditions":[]},"spec":{"size":4}}"#,
    ]);
    assert_eq!(
        k.ok(&[
            "get",
            "wd",
            "w1",
            "-n",
            "demo",
            "-o",
            "jsonpath={.spec.size} {.status.conditions[0].status}"
        ]),
        "4 True"
    );
    // Deleting the CRD removes its instances.
    k.ok(&["delete", "crd", "widgets.example.com"]);
    assert!(eventually(Duration::from_secs(10), || !k
        .run(&["get", "crd", "widgets.example.com"])
        .status
        .success()));
    let raw = k.run(&[
        "get",
        "--raw",
        "/clusters/root/apis/example.com/v1/namespaces/demo/widgets",
    ]);
    assert!(
        !raw.status.success(),
        "instances still served after CRD deletion"
    );
}

fn feed(mut child: std::process::Child, input: &str) -> String {
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        !out.status.success(),
        "expected failure: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn server_side_apply_and_diff(k: &Kubectl, dir: &std::path::Path) {
    let d = write(dir, "d.yaml", DEPLOYMENT);
    let out = k.ok(&["apply", "--server-side", "--field-manager=alice", "-f", &d]);
    assert!(out.contains("serverside-applied"), "{out}");
    let d3 = write(
        dir,
        "d3.yaml",
        &DEPLOYMENT.replace("replicas: 2", "replicas: 3"),
    );
    let err = k.fails(&["apply", "--server-side", "--field-manager=bob", "-f", &d3]);
    assert!(
        err.contains(
            r#"Apply failed with 1 conflict: conflict with "alice" using apps/v1: .spec.replicas"#
        ),
        "{err}"
    );
    assert_eq!(
        k.ok(&[
            "get",
            "deploy",
            "api",
            "-n",
            "demo",
            "-o",
            "jsonpath={.spec.replicas}"
        ]),
        "2"
    );
    k.ok(&[
        "apply",
        "--server-side",
        "--field-manager=bob",
        "--force-conflicts",
        "-f",
        &d3,
    ]);
    assert_eq!(
        k.ok(&[
            "get",
            "deploy",
            "api",
            "-n",
            "demo",
            "-o",
            "jsonpath={.spec.replicas}"
        ]),
        "3"
    );
    let managers = k.ok(&[
        "get",
        "deploy",
        "api",
        "-n",
        "demo",
        "--show-managed-fields",
        "-o",
        "jsonpath={.metadata.managedFields[*].manager}",
    ]);
    assert!(
        managers.contains("alice") && managers.contains("bob"),
        "{managers}"
    );
    // Client-side apply on top of server-side apply still works.
    let out = k.ok(&[
        "apply",
        "-f",
        &write(
            dir,
            "d5.yaml",
            &DEPLOYMENT
                .replace("replicas: 2", "replicas: 3")
                .replace("echo:1", "echo:5"),
        ),
    ]);
    assert!(out.contains("configured"), "{out}");
    // diff shows a pending change without storing it.
    let d4 = write(
        dir,
        "d4.yaml",
        &DEPLOYMENT
            .replace("replicas: 2", "replicas: 3")
            .replace("echo:1", "echo:9"),
    );
    let diff = k.run(&["diff", "-f", &d4]);
    assert_eq!(
        diff.status.code(),
        Some(1),
        "kubectl diff exits 1 when there are differences"
    );
    let text = String::from_utf8_lossy(&diff.stdout);
    assert!(
        text.contains("+      - image: sluice/echo:9")
            || text.contains("+  - image: sluice/echo:9")
            || text.contains("sluice/echo:9"),
        "{text}"
    );
    assert_eq!(
        k.ok(&[
            "get",
            "deploy",
            "api",
            "-n",
            "demo",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}"
        ]),
        "sluice/echo:5"
    );
}

fn cascading_deletion(k: &Kubectl) {
    let uid = k.ok(&[
        "get",
        "deploy",
        "api",
        "-n",
        "demo",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    for name in ["dep1", "dep2"] {
        k.apply_stdin(&format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: demo\n  ownerReferences: [{{apiVersion: apps/v1, kind: Deployment, name: api, uid: {uid}, blockOwnerDeletion: true}}]\n"
        ));
    }
    // A dependent that holds a finalizer keeps a foreground deletion of its owner waiting.
    k.ok(&[
        "patch",
        "cm",
        "dep2",
        "-n",
        "demo",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":["example.com/hold"]}}"#,
    ]);
    let mut deleter = k
        .command(&[
            "delete",
            "deploy",
            "api",
            "-n",
            "demo",
            "--cascade=foreground",
            "--timeout=30s",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        deleter.try_wait().unwrap().is_none(),
        "foreground deletion returned while a dependent remained"
    );
    let owner = k.ok(&[
        "get",
        "deploy",
        "api",
        "-n",
        "demo",
        "-o",
        "jsonpath={.metadata.finalizers}",
    ]);
    assert!(owner.contains("foregroundDeletion"), "{owner}");
    assert!(
        !k.run(&["get", "cm", "dep1", "-n", "demo"]).status.success(),
        "dep1 should be gone"
    );
    k.ok(&[
        "patch",
        "cm",
        "dep2",
        "-n",
        "demo",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ]);
    assert!(deleter.wait().unwrap().success());
    assert!(
        !k.run(&["get", "deploy", "api", "-n", "demo"])
            .status
            .success()
    );
    // Orphan: the dependent stays and loses its owner reference.
    k.ok(&["create", "configmap", "owner", "-n", "demo"]);
    let owner_uid = k.ok(&[
        "get",
        "cm",
        "owner",
        "-n",
        "demo",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    k.apply_stdin(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: orphan\n  namespace: demo\n  ownerReferences: [{{apiVersion: v1, kind: ConfigMap, name: owner, uid: {owner_uid}}}]\n"
    ));
    k.ok(&["delete", "cm", "owner", "-n", "demo", "--cascade=orphan"]);
    assert!(eventually(Duration::from_secs(5), || k
        .ok(&[
            "get",
            "cm",
            "orphan",
            "-n",
            "demo",
            "-o",
            "jsonpath={.metadata.ownerReferences}"
        ])
        .is_empty()));
}

fn tables(k: &Kubectl) {
    k.apply_stdin(&DEPLOYMENT.replace("name: api", "name: tbl"));
    let out = k.ok(&["get", "deploy", "tbl", "-n", "demo", "-o", "wide"]);
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "READY",
            "UP-TO-DATE",
            "AVAILABLE",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR"
        ],
        "{out}"
    );
    assert!(out.lines().nth(1).unwrap().contains("0/2"), "{out}");
    let svc = k.ok(&[
        "create",
        "service",
        "clusterip",
        "web",
        "-n",
        "demo",
        "--tcp=80:8080",
    ]);
    assert!(svc.contains("created"));
    let out = k.ok(&["get", "svc", "web", "-n", "demo"]);
    assert!(
        out.starts_with("NAME") && out.contains("ClusterIP") && out.contains("80/TCP"),
        "{out}"
    );
    // --watch-only prints changes only.
    let mut watcher = k
        .command(&["get", "cm", "-n", "demo", "--watch-only", "-o", "name"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    k.ok(&["create", "configmap", "fresh", "-n", "demo"]);
    std::thread::sleep(Duration::from_millis(700));
    let _ = watcher.kill();
    let seen = String::from_utf8_lossy(&watcher.wait_with_output().unwrap().stdout).into_owned();
    assert_eq!(seen.trim(), "configmap/fresh", "{seen}");
}

#[test]
fn crds_apply_diff_cascade_tables() {
    for bin in kubectls() {
        let dir = tempfile::tempdir().unwrap();
        let control = Control::start(dir.path(), &[]);
        let k = Kubectl::new(&bin, &control.kubeconfig, &dir.path().join("cache"));
        crd_lifecycle(&k, dir.path());
        server_side_apply_and_diff(&k, dir.path());
        cascading_deletion(&k);
        tables(&k);
    }
}

#[test]
fn same_crd_group_differs_per_logical_cluster() {
    let bin = kubectls().remove(0);
    let dir = tempfile::tempdir().unwrap();
    let control = Control::start(dir.path(), &[]);
    let root = Kubectl::new(&bin, &control.kubeconfig, &dir.path().join("cache"));
    root.apply_stdin("apiVersion: sluice.dev/v1alpha1\nkind: Workspace\nmetadata: {name: a}\n---\napiVersion: sluice.dev/v1alpha1\nkind: Workspace\nmetadata: {name: b}\n");
    let a = Kubectl::new(
        &bin,
        &control.workspace_kubeconfig("root:a"),
        &dir.path().join("cache-a"),
    );
    let b = Kubectl::new(
        &bin,
        &control.workspace_kubeconfig("root:b"),
        &dir.path().join("cache-b"),
    );
    a.apply_stdin(&crd("integer"));
    b.apply_stdin(&crd("string"));
    for k in [&a, &b] {
        k.ok(&["create", "namespace", "demo"]);
    }
    a.apply_stdin("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: demo}\nspec: {size: 3}\n");
    b.apply_stdin("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: demo}\nspec: {size: large}\n");
    let child = a
        .command(&["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(feed(child, "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: x, namespace: demo}\nspec: {size: large}\n").contains("must be of type integer"));
    assert!(
        !root.run(&["get", "widgets", "-A"]).status.success(),
        "root has no such type"
    );
    assert_eq!(
        a.ok(&[
            "get",
            "wd",
            "w",
            "-n",
            "demo",
            "-o",
            "jsonpath={.spec.size}"
        ]),
        "3"
    );
    assert_eq!(
        b.ok(&[
            "get",
            "wd",
            "w",
            "-n",
            "demo",
            "-o",
            "jsonpath={.spec.size}"
        ]),
        "large"
    );
}
