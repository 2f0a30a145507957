#![allow(clippy::unwrap_used)]
//! Debugging a running pod (issue 37, "debug anywhere"): `kubectl exec` and `kubectl cp`
//! against a local cluster of `sluice dev up`, with every kubectl under test — the
//! command's streams and exit code, stdin, copying both ways, the refusals kube gives
//! (missing pod, wrong container, a pod with no node, a user with `view`), and a client
//! that vanishes mid-session leaving nothing running.

mod support;

use std::io::Write;
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use support::{DevUp, Kubectl, eventually, kubectls};

/// `dev up` binds the clusterset's fixed loopback ranges: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const SHELL: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: shell, namespace: default}
spec:
  containers:
  - name: main
    image: busybox
    command: ["sh", "-c", "cd /tmp && exec sleep 3600"]
    env: [{name: GREETING, value: "hello from the pod"}]
---
apiVersion: v1
kind: Pod
metadata: {name: nowhere, namespace: default}
spec:
  nodeSelector: {no-such-label: "x"}
  containers:
  - {name: main, image: busybox, command: ["sleep", "3600"]}
"#;

fn exec(k: &Kubectl, args: &[&str], stdin: &[u8]) -> std::process::Output {
    let mut child = k
        .command(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn exec_and_cp_into_a_running_pod_with_kubes_errors() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // Bare: the cluster's API server keeps an audit log.
    let (dev, took) = DevUp::start_with("east", &["--bare"]);
    eprintln!("dev up ready in {:.2} s", took.as_secs_f64());
    let admin = dev.kubectl("east");
    admin.apply_stdin(SHELL);
    admin.ok(&[
        "create",
        "rolebinding",
        "viewer",
        "--clusterrole=view",
        "--user=vera",
    ]);
    assert!(
        eventually(Duration::from_secs(30), || admin.ok(&[
            "get",
            "pod",
            "shell",
            "-o",
            "jsonpath={.status.phase}"
        ]) == "Running"),
        "the shell pod never ran"
    );
    let scratch = dev.state.join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    for (i, bin) in kubectls().iter().enumerate() {
        let k = Kubectl {
            bin: bin.clone(),
            ..admin.clone()
        };
        eprintln!("kubectl {bin}");

        // The command runs in the container's environment and working directory; its
        // stdout and stderr come back apart, its exit code is kubectl's.
        let out = exec(
            &k,
            &[
                "exec",
                "shell",
                "--",
                "sh",
                "-c",
                "echo \"$GREETING\"; pwd; echo to-stderr >&2; exit 3",
            ],
            b"",
        );
        assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "hello from the pod\n/tmp\n");
        let stderr = text(&out.stderr);
        assert!(stderr.contains("to-stderr"), "{stderr}");
        assert!(
            stderr.contains("command terminated with exit code 3"),
            "{stderr}"
        );

        // stdin, to its end.
        let out = exec(
            &k,
            &["exec", "-i", "shell", "--", "sh", "-c", "cat; echo done"],
            b"line one\nline two\n",
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "line one\nline two\ndone\n");

        // A command that does not exist: 127, with the reason.
        let out = exec(&k, &["exec", "shell", "--", "no-such-command"], b"");
        assert_eq!(out.status.code(), Some(127), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("no-such-command"),
            "{}",
            text(&out.stderr)
        );

        // cp both ways (kubectl cp is tar over exec).
        let local = scratch.join(format!("to-pod-{i}.txt"));
        let content = format!("copied by {bin}\n{}\n", "x".repeat(100_000));
        std::fs::write(&local, &content).unwrap();
        let in_pod = scratch.join(format!("in-pod-{i}.txt"));
        k.ok(&[
            "cp",
            local.to_str().unwrap(),
            &format!("default/shell:{}", in_pod.display()),
        ]);
        let back = scratch.join(format!("back-{i}.txt"));
        k.ok(&[
            "cp",
            &format!("default/shell:{}", in_pod.display()),
            back.to_str().unwrap(),
        ]);
        assert_eq!(std::fs::read_to_string(&back).unwrap(), content);

        // kube's refusals.
        let err = k.fails(&["exec", "no-such-pod", "--", "true"]);
        assert!(err.contains(r#"pods "no-such-pod" not found"#), "{err}");
        let err = k.fails(&["exec", "shell", "-c", "sidecar", "--", "true"]);
        assert!(
            err.contains("container sidecar is not valid for pod shell"),
            "{err}"
        );
        let err = k.fails(&["exec", "nowhere", "--", "true"]);
        assert!(
            err.contains("pod nowhere does not have a host assigned"),
            "{err}"
        );
        let err = k.fails(&["exec", "shell", "--as=vera", "--", "true"]);
        assert!(
            err.contains(r#"User "vera" cannot create resource "pods/exec" in API group "" in the namespace "default""#),
            "{err}"
        );

        // A client that vanishes mid-session: the command's process group is ended.
        let pid_file = scratch.join(format!("session-{i}.pid"));
        let mut session = k
            .command(&[
                "exec",
                "shell",
                "--",
                "sh",
                "-c",
                &format!("echo $$ > {}; sleep 1000", pid_file.display()),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        assert!(
            eventually(Duration::from_secs(20), || std::fs::read_to_string(
                &pid_file
            )
            .is_ok_and(|s| !s.trim().is_empty())),
            "the session's command never started"
        );
        let pid = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .to_string();
        assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
        session.kill().unwrap();
        let _ = session.wait();
        assert!(
            eventually(Duration::from_secs(20), || !std::path::Path::new(&format!(
                "/proc/{pid}"
            ))
            .exists()),
            "the command of a vanished client is still running (pid {pid})"
        );
    }
    // Each session is in the audit log: who, which pod, the command, 101 once it started.
    let audit = std::fs::read_to_string(dev.state.join("clusters/east/audit.log")).unwrap();
    let sessions: Vec<serde_json::Value> = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["subresource"] == "exec" && e["name"] == "shell")
        .collect();
    assert!(
        sessions.iter().any(|e| e["verb"] == "create"
            && e["code"] == 101
            && e["command"] == serde_json::json!(["sh", "-c", "cat; echo done"])),
        "{sessions:#?}"
    );
    // vera's refused session (as the admin's impersonation of her).
    assert!(sessions.iter().any(|e| e["code"] == 403), "{sessions:#?}");
}

const APP: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: shop}
spec:
  replicas: 1
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      containers:
      - name: main
        image: busybox
        command: ["sh", "-c", "cd /tmp && exec sleep 3600"]
"#;

/// The one pod of `app`, once it runs on `cluster` and no other copy is left.
fn running_on(k: &Kubectl, cluster: &str) -> String {
    let mut found = String::new();
    let ok = eventually(Duration::from_secs(60), || {
        let out = k.ok(&[
            "-n",
            "shop",
            "get",
            "pods",
            "-l",
            "app=app",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.status.phase} {.spec.nodeName}{\"\\n\"}{end}",
        ]);
        let pods: Vec<&str> = out.lines().filter(|l| !l.is_empty()).collect();
        match pods.as_slice() {
            [one] if one.contains(" Running ") && one.ends_with(&format!(".{cluster}")) => {
                found = one.split(' ').next().unwrap_or_default().to_string();
                true
            }
            _ => false,
        }
    });
    assert!(ok, "app never ran alone on {cluster}");
    found
}

#[test]
fn exec_through_the_logical_cluster_before_and_after_a_move() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (dev, took) = DevUp::start("east,west");
    eprintln!("dev up ready in {:.2} s", took.as_secs_f64());
    let admin = dev.kubectl_control();
    admin.ok(&["create", "namespace", "shop"]);
    admin.ok(&["label", "namespace", "shop", "sluice.dev/cluster=east"]);
    admin.ok(&[
        "-n",
        "shop",
        "create",
        "rolebinding",
        "viewer",
        "--clusterrole=view",
        "--user=vera",
    ]);
    admin.apply_stdin(APP);
    let scratch = dev.state.join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    for cluster in ["east", "west"] {
        if cluster == "west" {
            admin.ok(&[
                "label",
                "namespace",
                "shop",
                "sluice.dev/cluster=west",
                "--overwrite",
            ]);
        }
        let pod = running_on(&admin, cluster);
        for (i, bin) in kubectls().iter().enumerate() {
            let k = Kubectl {
                bin: bin.clone(),
                ..admin.clone()
            };
            eprintln!("{cluster}: kubectl {bin}");
            // By pod and by Deployment; the command runs on the cluster the app is on.
            for target in [pod.as_str(), "deploy/app"] {
                let out = exec(
                    &k,
                    &[
                        "-n",
                        "shop",
                        "exec",
                        target,
                        "--",
                        "sh",
                        "-c",
                        "echo \"on $SLUICE_CLUSTER in $(pwd)\"; echo e >&2; exit 7",
                    ],
                    b"",
                );
                assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
                assert_eq!(text(&out.stdout), format!("on {cluster} in /tmp\n"));
                assert!(text(&out.stderr).contains("command terminated with exit code 7"));
            }
            let out = exec(
                &k,
                &["-n", "shop", "exec", "-i", &pod, "--", "cat"],
                b"through the logical cluster\n",
            );
            assert!(out.status.success(), "{}", text(&out.stderr));
            assert_eq!(text(&out.stdout), "through the logical cluster\n");

            let local = scratch.join(format!("{cluster}-{i}.txt"));
            std::fs::write(&local, format!("{cluster} {bin}\n")).unwrap();
            let in_pod = scratch.join(format!("{cluster}-{i}-in-pod.txt"));
            k.ok(&[
                "-n",
                "shop",
                "cp",
                local.to_str().unwrap(),
                &format!("{pod}:{}", in_pod.display()),
            ]);
            let back = scratch.join(format!("{cluster}-{i}-back.txt"));
            k.ok(&[
                "-n",
                "shop",
                "cp",
                &format!("{pod}:{}", in_pod.display()),
                back.to_str().unwrap(),
            ]);
            assert_eq!(
                std::fs::read_to_string(&back).unwrap(),
                format!("{cluster} {bin}\n")
            );

            let err = k.fails(&["-n", "shop", "exec", &pod, "-c", "sidecar", "--", "true"]);
            assert!(
                err.contains(&format!("container sidecar is not valid for pod {pod}")),
                "{err}"
            );
            let err = k.fails(&["-n", "shop", "exec", "no-such-pod", "--", "true"]);
            assert!(err.contains(r#"pods "no-such-pod" not found"#), "{err}");
            let err = k.fails(&["-n", "shop", "exec", &pod, "--as=vera", "--", "true"]);
            assert!(
                err.contains(r#"User "vera" cannot create resource "pods/exec" in API group "" in the namespace "shop""#),
                "{err}"
            );
        }
    }
}
