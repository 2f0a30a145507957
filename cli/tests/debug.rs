#![allow(clippy::unwrap_used)]
//! Debugging a running pod (issue 37, "debug anywhere"): `kubectl exec` and `kubectl cp`
//! against a local cluster of `sluice dev up`, with every kubectl under test — the
//! command's streams and exit code, stdin, copying both ways, the refusals kube gives
//! (missing pod, wrong container, a pod with no node, a user with `view`), and a client
//! that vanishes mid-session leaving nothing running.

mod support;

use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use support::{DevUp, Kubectl, eventually, kubectls};

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
    let (dev, took) = DevUp::start("east");
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
}
