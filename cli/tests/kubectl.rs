#![allow(clippy::unwrap_used)]
//! The real `kubectl` against the real `sluice control` binary (issue: control, done-when 1–2).

use crate::support;

use std::process::Stdio;
use std::time::Duration;

use support::{Control, Kubectl, eventually, kubectls};

const MANIFEST: &str = r#"apiVersion: v1
kind: Namespace
metadata:
  name: shop
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: shop
  labels: {app: web}
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: sluice/echo:1
        env:
        - {name: COLOR, value: blue}
        ports:
        - containerPort: 8080
      - name: sidecar
        image: busybox:1
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: shop
  labels: {app: web}
spec:
  selector: {app: web}
  ports:
  - {name: http, port: 80, targetPort: 8080}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: shop
data:
  mode: fast
"#;

fn jsonpath(k: &Kubectl, args: &[&str], path: &str) -> String {
    let mut a = args.to_vec();
    let p = format!("jsonpath={path}");
    a.extend(["-o", &p]);
    k.ok(&a)
}

fn scenario(k: &Kubectl, dir: &std::path::Path) {
    let manifest = dir.join("app.yaml");
    std::fs::write(&manifest, MANIFEST).unwrap();
    let m = manifest.to_str().unwrap();

    let version = k.ok(&["version"]);
    assert!(version.contains("Server Version: v1.35"), "{version}");
    let resources = k.ok(&["api-resources"]);
    for r in [
        "deployments",
        "configmaps",
        "endpointslices",
        "workspaces",
        "leases",
    ] {
        assert!(
            resources.contains(r),
            "api-resources lacks {r}: {resources}"
        );
    }

    // apply: created, then unchanged, then configured.
    let out = k.ok(&["apply", "-f", m]);
    assert_eq!(out.matches(" created").count(), 4, "{out}");
    let out = k.ok(&["apply", "-f", m]);
    assert_eq!(out.matches(" unchanged").count(), 4, "{out}");
    std::fs::write(
        &manifest,
        MANIFEST
            .replace("sluice/echo:1", "sluice/echo:2")
            .replace("value: blue", "value: green"),
    )
    .unwrap();
    let out = k.ok(&["apply", "-f", m]);
    assert!(out.contains("deployment.apps/web configured"), "{out}");
    assert_eq!(out.matches(" unchanged").count(), 3, "{out}");
    let images = jsonpath(
        k,
        &["get", "deploy", "web", "-n", "shop"],
        "{.spec.template.spec.containers[*].image}",
    );
    assert_eq!(
        images, "sluice/echo:2 busybox:1",
        "strategic merge kept the sidecar"
    );
    let env = jsonpath(
        k,
        &["get", "deploy", "web", "-n", "shop"],
        "{.spec.template.spec.containers[0].env[0].value}",
    );
    assert_eq!(env, "green");
    assert_eq!(
        jsonpath(
            k,
            &["get", "deploy", "web", "-n", "shop"],
            "{.metadata.generation}"
        ),
        "2"
    );

    // get in every output form, with a label selector.
    let yaml = k.ok(&["get", "deploy", "web", "-n", "shop", "-o", "yaml"]);
    assert!(
        yaml.contains("kind: Deployment") && yaml.contains("resourceVersion:"),
        "{yaml}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "cm", "settings", "-n", "shop", "-o", "json"]))
            .unwrap();
    assert_eq!(json["data"]["mode"], "fast");
    let wide = k.ok(&["get", "deploy", "-n", "shop", "-o", "wide"]);
    assert!(wide.contains("web"), "{wide}");
    let names = k.ok(&[
        "get",
        "deploy,svc,cm",
        "-n",
        "shop",
        "-l",
        "app=web",
        "-o",
        "name",
    ]);
    let mut names: Vec<&str> = names.lines().collect();
    names.sort();
    assert_eq!(names, ["deployment.apps/web", "service/web"]);
    assert!(
        k.ok(&["get", "cm", "-n", "shop", "-l", "app=none", "-o", "name"])
            .trim()
            .is_empty()
    );

    // label, annotate, scale, patch of every type.
    k.ok(&["label", "deploy", "web", "-n", "shop", "tier=fe"]);
    k.ok(&["annotate", "deploy", "web", "-n", "shop", "note=hello"]);
    assert_eq!(
        jsonpath(
            k,
            &["get", "deploy", "web", "-n", "shop"],
            "{.metadata.labels.tier} {.metadata.annotations.note}"
        ),
        "fe hello"
    );
    k.ok(&["scale", "deploy", "web", "-n", "shop", "--replicas=5"]);
    assert_eq!(
        jsonpath(
            k,
            &["get", "deploy", "web", "-n", "shop"],
            "{.spec.replicas}"
        ),
        "5"
    );
    k.ok(&[
        "patch",
        "deploy",
        "web",
        "-n",
        "shop",
        "--type=merge",
        "-p",
        r#"{"spec":{"paused":true}}"#,
    ]);
    k.ok(&[
        "patch",
        "deploy",
        "web",
        "-n",
        "shop",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/spec/replicas","value":3}]"#,
    ]);
    k.ok(&[
        "patch",
        "deploy",
        "web",
        "-n",
        "shop",
        "--type=strategic",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"sluice/echo:3"}]}}}}"#,
    ]);
    assert_eq!(
        jsonpath(
            k,
            &["get", "deploy", "web", "-n", "shop"],
            "{.spec.paused} {.spec.replicas} {.spec.template.spec.containers[*].image}"
        ),
        "true 3 sluice/echo:3 busybox:1"
    );

    // get -w sees what a second kubectl does.
    let mut watcher = k
        .command(&["get", "cm", "-n", "shop", "-w", "--output-watch-events"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl get -w");
    std::thread::sleep(Duration::from_millis(700));
    k.ok(&[
        "create",
        "configmap",
        "extra",
        "-n",
        "shop",
        "--from-literal=a=b",
    ]);
    k.ok(&[
        "patch",
        "cm",
        "extra",
        "-n",
        "shop",
        "-p",
        r#"{"data":{"a":"c"}}"#,
    ]);
    k.ok(&["delete", "cm", "extra", "-n", "shop"]);
    std::thread::sleep(Duration::from_millis(700));
    let _ = watcher.kill();
    let out = watcher.wait_with_output().expect("watch output");
    let seen = String::from_utf8_lossy(&out.stdout);
    for event in ["ADDED", "MODIFIED", "DELETED"] {
        assert!(
            seen.lines()
                .any(|l| l.starts_with(event) && l.contains("extra")),
            "watch missed {event} of extra:\n{seen}"
        );
    }

    // delete -f removes everything it names (the namespace last, with its contents).
    k.ok(&["delete", "-f", m, "--wait=true"]);
    assert!(
        k.fails(&["get", "deploy", "web", "-n", "shop"])
            .contains("NotFound")
    );
    assert!(eventually(Duration::from_secs(10), || !k
        .run(&["get", "ns", "shop"])
        .status
        .success()));

    // create namespace (protobuf body), fill it, delete it: contents gone.
    k.ok(&["create", "namespace", "tmp"]);
    k.ok(&[
        "create",
        "configmap",
        "x",
        "-n",
        "tmp",
        "--from-literal=k=v",
    ]);
    k.ok(&[
        "create",
        "deployment",
        "d",
        "-n",
        "tmp",
        "--image=sluice/echo",
        "--replicas=0",
    ]);
    assert_eq!(
        jsonpath(k, &["get", "deploy", "d", "-n", "tmp"], "{.spec.replicas}"),
        "0"
    );
    k.ok(&["delete", "namespace", "tmp"]);
    assert!(k.fails(&["get", "ns", "tmp"]).contains("NotFound"));
    k.ok(&["create", "namespace", "tmp"]);
    assert!(
        k.ok(&["get", "cm,deploy", "-n", "tmp", "-o", "name"])
            .trim()
            .is_empty(),
        "a recreated namespace starts empty"
    );
    k.ok(&["delete", "namespace", "tmp"]);
}

#[test]
fn kubectl_drives_the_api_server() {
    for bin in kubectls() {
        let dir = tempfile::tempdir().unwrap();
        let control = Control::start(dir.path(), &[]);
        let k = Kubectl::new(&bin, &control.kubeconfig, &dir.path().join("cache"));
        scenario(&k, dir.path());
    }
}

#[test]
fn logical_clusters_are_isolated() {
    let bin = kubectls().remove(0);
    let dir = tempfile::tempdir().unwrap();
    let control = Control::start(dir.path(), &[]);
    let root = Kubectl::new(&bin, &control.kubeconfig, &dir.path().join("cache"));
    // A workspace must exist before its logical cluster serves anything.
    let missing = Kubectl::new(
        &bin,
        &control.workspace_kubeconfig("root:a"),
        &dir.path().join("cache-a"),
    );
    assert!(missing.fails(&["get", "ns"]).contains("not found"));
    root.apply_stdin("apiVersion: sluice.dev/v1alpha1\nkind: Workspace\nmetadata:\n  name: a\n---\napiVersion: sluice.dev/v1alpha1\nkind: Workspace\nmetadata:\n  name: b\n");
    assert_eq!(
        root.ok(&[
            "get",
            "workspace",
            "a",
            "-o",
            "jsonpath={.status.phase} {.status.path}"
        ]),
        "Ready root:a"
    );
    let a = missing;
    let b = Kubectl::new(
        &bin,
        &control.workspace_kubeconfig("root:b"),
        &dir.path().join("cache-b"),
    );
    for k in [&a, &b] {
        let out = k.apply_stdin(MANIFEST);
        assert_eq!(out.matches(" created").count(), 4, "{out}");
    }
    a.ok(&["scale", "deploy", "web", "-n", "shop", "--replicas=7"]);
    a.ok(&["create", "configmap", "only-in-a", "-n", "shop"]);
    assert_eq!(
        a.ok(&[
            "get",
            "deploy",
            "web",
            "-n",
            "shop",
            "-o",
            "jsonpath={.spec.replicas}"
        ]),
        "7"
    );
    assert_eq!(
        b.ok(&[
            "get",
            "deploy",
            "web",
            "-n",
            "shop",
            "-o",
            "jsonpath={.spec.replicas}"
        ]),
        "2"
    );
    assert!(
        b.fails(&["get", "cm", "only-in-a", "-n", "shop"])
            .contains("NotFound")
    );
    assert!(
        root.fails(&["get", "ns", "shop"]).contains("NotFound"),
        "root sees nothing of its children"
    );
    let uid_a = a.ok(&[
        "get",
        "deploy",
        "web",
        "-n",
        "shop",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    let uid_b = b.ok(&[
        "get",
        "deploy",
        "web",
        "-n",
        "shop",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    assert_ne!(uid_a, uid_b);

    // The wildcard sees both, each object annotated with its logical cluster.
    let wildcard = Kubectl::new(
        &bin,
        &control.workspace_kubeconfig("*"),
        &dir.path().join("cache-w"),
    );
    let all: serde_json::Value =
        serde_json::from_str(&wildcard.ok(&["get", "deployments", "-A", "-o", "json"])).unwrap();
    let mut clusters: Vec<&str> = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            d["metadata"]["annotations"]["sluice.dev/logical-cluster"]
                .as_str()
                .unwrap()
        })
        .collect();
    clusters.sort();
    assert_eq!(clusters, ["root:a", "root:b"]);

    // Deleting a workspace deletes its logical cluster's contents.
    root.ok(&["delete", "workspace", "b"]);
    assert!(eventually(Duration::from_secs(10), || !root
        .run(&["get", "workspace", "b"])
        .status
        .success()));
    let all: serde_json::Value =
        serde_json::from_str(&wildcard.ok(&["get", "configmaps", "-A", "-o", "json"])).unwrap();
    assert!(
        all["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["metadata"]["annotations"]["sluice.dev/logical-cluster"] == "root:a")
    );
}
