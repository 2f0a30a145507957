#![allow(clippy::unwrap_used)]
//! `sluice control --single-cluster --service-cidr CIDR`: the API server of one local
//! physical cluster; plus `kubectl rollout status` and `kubectl events`
//! (issue: control semantics).

use crate::support;

use support::{Control, Kubectl, kubectls};

#[test]
fn single_cluster_mode_allocates_service_ips() {
    let bin = kubectls().remove(0);
    let dir = tempfile::tempdir().unwrap();
    let control = Control::start(
        dir.path(),
        &["--single-cluster", "--service-cidr", "127.40.0.0/16"],
    );
    let k = Kubectl::new(&bin, &control.kubeconfig, &dir.path().join("cache"));

    let ns = k.ok(&["get", "ns", "-o", "name"]);
    assert!(
        ns.contains("namespace/default") && ns.contains("namespace/kube-system"),
        "{ns}"
    );
    assert_eq!(
        k.ok(&[
            "get",
            "svc",
            "kubernetes",
            "-n",
            "default",
            "-o",
            "jsonpath={.spec.clusterIP}"
        ]),
        "127.40.0.1"
    );
    assert!(
        k.fails(&["delete", "ns", "default"])
            .contains("may not be deleted")
    );

    k.ok(&["create", "service", "clusterip", "a", "--tcp=80:8080"]);
    k.ok(&["create", "service", "clusterip", "b", "--tcp=80:8080"]);
    let a = k.ok(&["get", "svc", "a", "-o", "jsonpath={.spec.clusterIP}"]);
    let b = k.ok(&["get", "svc", "b", "-o", "jsonpath={.spec.clusterIP}"]);
    assert!(
        a.starts_with("127.40.") && b.starts_with("127.40.") && a != b,
        "{a} {b}"
    );
    assert_eq!(
        k.ok(&["get", "svc", "a", "-o", "jsonpath={.spec.clusterIPs[0]}"]),
        a
    );
    // Headless and ExternalName get no address.
    k.ok(&[
        "create",
        "service",
        "clusterip",
        "h",
        "--clusterip=None",
        "--tcp=80:80",
    ]);
    assert_eq!(
        k.ok(&["get", "svc", "h", "-o", "jsonpath={.spec.clusterIP}"]),
        "None"
    );
    k.ok(&[
        "create",
        "service",
        "externalname",
        "ext",
        "--external-name=example.com",
    ]);
    assert_eq!(
        k.ok(&["get", "svc", "ext", "-o", "jsonpath={.spec.clusterIP}"]),
        ""
    );
    // A taken address, one outside the range, and a change of address are refused.
    let err = k.fails(&[
        "create",
        "service",
        "clusterip",
        "c",
        &format!("--clusterip={a}"),
        "--tcp=80:80",
    ]);
    assert!(err.contains("already allocated"), "{err}");
    let err = k.fails(&[
        "create",
        "service",
        "clusterip",
        "d",
        "--clusterip=10.0.0.1",
        "--tcp=80:80",
    ]);
    assert!(err.contains("not in the valid range"), "{err}");
    let err = k.fails(&[
        "patch",
        "svc",
        "a",
        "--type=merge",
        "-p",
        r#"{"spec":{"clusterIP":"127.40.9.9","clusterIPs":["127.40.9.9"]}}"#,
    ]);
    assert!(err.contains("field is immutable"), "{err}");
    // An unknown Service type is invalid.
    let err = k.fails(&[
        "patch",
        "svc",
        "b",
        "--type=merge",
        "-p",
        r#"{"spec":{"type":"Magic"}}"#,
    ]);
    assert!(err.contains("Unsupported value"), "{err}");
    // Deleting a Service releases its address for the next one that asks for it.
    k.ok(&["delete", "svc", "a"]);
    assert!(support::eventually(
        std::time::Duration::from_secs(5),
        || {
            k.run(&[
                "create",
                "service",
                "clusterip",
                "again",
                &format!("--clusterip={a}"),
                "--tcp=80:80",
            ])
            .status
            .success()
        }
    ));
    // The allocation survives a restart: b's address stays taken.
    drop(control);
    let control = Control::start(
        dir.path(),
        &["--single-cluster", "--service-cidr", "127.40.0.0/16"],
    );
    let k = Kubectl::new(&bin, &control.kubeconfig, &dir.path().join("cache2"));
    assert!(
        k.fails(&[
            "create",
            "service",
            "clusterip",
            "e",
            &format!("--clusterip={b}"),
            "--tcp=80:80"
        ])
        .contains("already allocated")
    );
}

#[test]
fn rollout_status_and_events() {
    let bin = kubectls().remove(0);
    let dir = tempfile::tempdir().unwrap();
    let control = Control::start(dir.path(), &[]);
    let k = Kubectl::new(&bin, &control.kubeconfig, &dir.path().join("cache"));
    k.ok(&["create", "namespace", "demo"]);
    k.ok(&[
        "create",
        "deployment",
        "web",
        "-n",
        "demo",
        "--image=sluice/echo",
        "--replicas=2",
    ]);
    // What a Deployment controller reports once the rollout is done.
    k.ok(&[
        "patch", "deploy", "web", "-n", "demo", "--subresource=status", "--type=merge", "-p",
        r#"{"status":{"observedGeneration":1,"replicas":2,"updatedReplicas":2,"readyReplicas":2,"availableReplicas":2,"conditions":[{"type":"Available","status":"True"},{"type":"Progressing","status":"True","reason":"NewReplicaSetAvailable"}]}}"#,
    ]);
    let out = k.ok(&[
        "rollout",
        "status",
        "deploy/web",
        "-n",
        "demo",
        "--timeout=10s",
    ]);
    assert!(out.contains("successfully rolled out"), "{out}");
    assert!(
        k.ok(&["get", "deploy", "web", "-n", "demo"])
            .contains("2/2")
    );

    k.apply_stdin(
        "apiVersion: v1\nkind: Event\nmetadata: {name: web.1, namespace: demo}\ninvolvedObject: {kind: Deployment, name: web, namespace: demo}\nreason: ScalingReplicaSet\nmessage: Scaled up replica set web-1 to 2\ntype: Normal\nfirstTimestamp: \"2026-01-01T00:00:00Z\"\nlastTimestamp: \"2026-01-01T00:00:00Z\"\n",
    );
    let events = k.ok(&["events", "-n", "demo"]);
    assert!(
        events.contains("ScalingReplicaSet") && events.contains("Scaled up replica set web-1 to 2"),
        "{events}"
    );
}
