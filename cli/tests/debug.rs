#![allow(clippy::unwrap_used)]
//! Debugging a running pod (issue 37, "debug anywhere"): `kubectl exec`, `kubectl cp` and
//! `kubectl port-forward`, `kubectl attach`, `kubectl debug` and `kubectl top pod` against a local cluster of
//! `sluice dev up` and through a logical cluster before and after a move, with every kubectl under test (and the Python client's
//! port-forward) — the command's streams and exit code, stdin, copying both ways, HTTP and
//! a long TCP stream forwarded to a pod, a Service and a Deployment over SPDY and its
//! WebSocket tunnel, the refusals kube gives (missing pod, wrong container, a pod with no
//! node, a port nobody listens on, a user with `view`), and a client that vanishes
//! mid-session leaving nothing running.

use crate::support;

use std::io::Write;
use std::process::Stdio;
use std::sync::Mutex;
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

/// A shell line that waits (a few seconds at most) for the client's first resize to reach
/// the terminal, then prints its size: the size travels beside stdin, not before it.
const SIZED: &str =
    r#"for i in $(seq 50); do [ "$(stty size)" != "0 0" ] && break; sleep 0.1; done; stty size"#;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn exec_and_cp_into_a_running_pod_with_kubes_errors() {
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

/// `dev up` (east, west) and its logical cluster's admin, with namespace `shop` on east,
/// `vera` a viewer in it, and `manifest` applied.
fn shop_on_east(manifest: &str) -> (DevUp, Kubectl) {
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
    admin.apply_stdin(manifest);
    (dev, admin)
}

/// East, then west once the namespace moved there: each cluster, with the one pod labelled
/// `selector` once it runs there alone.
fn before_and_after_a_move<'a>(
    admin: &'a Kubectl,
    selector: &'a str,
) -> impl Iterator<Item = (&'static str, String)> + 'a {
    ["east", "west"].into_iter().map(move |cluster| {
        if cluster != "east" {
            let label = format!("sluice.dev/cluster={cluster}");
            admin.ok(&["label", "namespace", "shop", &label, "--overwrite"]);
        }
        (cluster, running_on_labelled(admin, selector, cluster))
    })
}

/// Every kubectl under test (with its place in the list), as `admin`.
fn each_kubectl<'a>(
    admin: &'a Kubectl,
    cluster: &'a str,
) -> impl Iterator<Item = (usize, Kubectl)> + 'a {
    kubectls().into_iter().enumerate().map(move |(i, bin)| {
        eprintln!("{cluster}: kubectl {bin}");
        (
            i,
            Kubectl {
                bin,
                ..admin.clone()
            },
        )
    })
}

/// The one pod labelled `selector`, once it runs on `cluster` and no other copy is left.
fn running_on_labelled(k: &Kubectl, selector: &str, cluster: &str) -> String {
    let mut found = String::new();
    let ok = eventually(Duration::from_secs(60), || {
        let out = k.ok(&[
            "-n",
            "shop",
            "get",
            "pods",
            "-l",
            selector,
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
    assert!(ok, "{selector} never ran alone on {cluster}");
    found
}

#[test]
fn exec_through_the_logical_cluster_before_and_after_a_move() {
    let (dev, admin) = shop_on_east(APP);
    let scratch = dev.state.join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    for (cluster, pod) in before_and_after_a_move(&admin, "app=app") {
        for (i, k) in each_kubectl(&admin, cluster) {
            let bin = &k.bin;
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
            // `-it` on a terminal (`script` gives kubectl one, sized): the command runs on
            // a terminal of that size.
            let it = format!(
                "stty cols 123 rows 45; {bin} --kubeconfig {} --cache-dir {} -n shop exec -it {pod} -- sh -c '{SIZED}; [ -t 0 ] && echo on-a-tty; echo \"TERM=$TERM\"; exit 4'",
                k.kubeconfig.display(),
                k.cache.display()
            );
            let out = std::process::Command::new("script")
                .args(["-qec", &it, "/dev/null"])
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let shown = text(&out.stdout);
            assert_eq!(out.status.code(), Some(4), "{shown}");
            assert!(shown.contains("45 123\r\n"), "{shown:?}");
            assert!(shown.contains("on-a-tty"), "{shown:?}");
            assert!(shown.contains("TERM=xterm"), "{shown:?}");

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

const TALKER: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: talker, namespace: shop}
spec:
  replicas: 1
  selector: {matchLabels: {app: talker}}
  template:
    metadata: {labels: {app: talker}}
    spec:
      containers:
      - name: talker
        image: busybox
        stdin: true
        stdinOnce: true
        command: ["sh", "-c", "while read l; do echo \"heard: $l\"; done; echo stdin closed"]
      - name: term
        image: busybox
        stdin: true
        tty: true
        command: ["sh"]
"#;

/// Whether `kubectl top pod` (with `args`) lists `pod` with a CPU and a memory figure.
fn top_shows(k: &Kubectl, args: &[&str], pod: &str) -> bool {
    let mut all = vec!["-n", "shop", "top", "pod"];
    all.extend_from_slice(args);
    let out = k.command(&all).output().unwrap();
    let shown = text(&out.stdout);
    shown.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.first() == Some(&pod)
            && f.iter().any(|x| x.ends_with('m'))
            && f.iter().any(|x| x.ends_with("Mi"))
    })
}

#[test]
fn attach_and_top_through_the_logical_cluster_before_and_after_a_move() {
    let (_dev, admin) = shop_on_east(TALKER);
    for (cluster, pod) in before_and_after_a_move(&admin, "app=talker") {
        for (_, k) in each_kubectl(&admin, cluster) {
            let bin = &k.bin;
            // The container's own stdin and output; with `stdinOnce`, the client's end of
            // input is the container's, which then exits and ends the session. (It then
            // restarts after a back-off: until it runs again, attach is refused, so each
            // attach is tried until it finds it running.)
            let mut last = String::new();
            let attached = eventually(Duration::from_secs(60), || {
                let out = exec(
                    &k,
                    &["-n", "shop", "attach", "-i", &pod, "-c", "talker"],
                    b"hello\nagain\n",
                );
                last = format!("{} {}", text(&out.stdout), text(&out.stderr));
                out.status.success()
                    && text(&out.stdout).contains("heard: hello\nheard: again\nstdin closed\n")
            });
            assert!(attached, "{last:?}");
            // On the container's terminal, sized by the client.
            let it = format!(
                "stty cols 123 rows 45; {bin} --kubeconfig {} --cache-dir {} -n shop attach -it {pod} -c term",
                k.kubeconfig.display(),
                k.cache.display()
            );
            let attached = eventually(Duration::from_secs(60), || {
                let mut script = std::process::Command::new("script")
                    .args(["-qec", &it, "/dev/null"])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .spawn()
                    .unwrap();
                let mut input = script.stdin.take().unwrap();
                input
                    .write_all(format!("{SIZED}; echo \"answer $((6 * 7))\"; exit\n").as_bytes())
                    .unwrap();
                let out = script.wait_with_output().unwrap();
                drop(input);
                last = text(&out.stdout);
                last.contains("45 123\r\n") && last.contains("answer 42")
            });
            assert!(attached, "{last:?}");

            let err = k.fails(&["-n", "shop", "attach", &pod, "-c", "sidecar"]);
            assert!(err.contains("sidecar"), "{err}");
            let err = k.fails(&["-n", "shop", "attach", &pod, "-c", "talker", "--as=vera"]);
            assert!(
                err.contains(r#"User "vera" cannot create resource "pods/attach" in API group "" in the namespace "shop""#),
                "{err}"
            );

            // What the pod uses, measured on the cluster it runs on; a viewer may read it.
            assert!(
                eventually(Duration::from_secs(30), || top_shows(&k, &[], &pod)),
                "kubectl top pod never showed {pod}"
            );
            assert!(top_shows(&k, &["--as=vera", "-l", "app=talker"], &pod));
            // Each container (once both run again after the attaches above ended them).
            let mut out = String::new();
            let both = eventually(Duration::from_secs(60), || {
                out = k.ok(&["-n", "shop", "top", "pod", &pod, "--containers"]);
                out.contains("talker") && out.contains("term")
            });
            assert!(both, "{out}");
            let err = k.fails(&["-n", "shop", "top", "pod", "no-such-pod"]);
            assert!(err.contains("no-such-pod"), "{err}");
        }
        kube_rs_attach(&admin.kubeconfig, &pod);
        // The Python client's stream (v4 channels: it cannot close stdin, so it reads the
        // answer and goes; the container keeps running).
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/attach.py");
        let mut last = String::new();
        let ok = eventually(Duration::from_secs(60), || {
            let out = std::process::Command::new("python3")
                .arg(script)
                .arg(&admin.kubeconfig)
                .args(["shop", &pod, "talker"])
                .output()
                .unwrap();
            last = format!("{}\n{}", text(&out.stdout), text(&out.stderr));
            out.status.success() && text(&out.stdout).contains("python attach: ok")
        });
        assert!(ok, "python client: {last}");
    }
}

/// Run `f` with kube-rs's Pods of namespace `shop`, as `kubeconfig`'s user, on a runtime of
/// its own.
fn in_shop(
    kubeconfig: &std::path::Path,
    f: impl AsyncFnOnce(kube::Api<k8s_openapi::api::core::v1::Pod>),
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = sluice_test_support::client::client(kubeconfig, None).await;
        f(kube::Api::namespaced(client, "shop")).await;
    });
}

/// kube-rs's `AttachedProcess` attached to `pod`'s `talker`: a line to its stdin, then
/// stdin's close (`stdinOnce`: the container's end of input), its answers to the end.
fn kube_rs_attach(kubeconfig: &std::path::Path, pod: &str) {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, AttachParams};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    in_shop(kubeconfig, async |pods: Api<Pod>| {
        let mut last = String::new();
        for _ in 0..60 {
            let params = AttachParams::default()
                .container("talker")
                .stdin(true)
                .stderr(false);
            let mut p = match pods.attach(pod, &params).await {
                Ok(p) => p,
                Err(e) => {
                    // Restarting after an earlier client closed its stdin.
                    last = e.to_string();
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            let mut stdin = p.stdin().unwrap();
            stdin.write_all(b"from kube-rs\n").await.unwrap();
            stdin.shutdown().await.unwrap();
            drop(stdin);
            let mut out = String::new();
            p.stdout().unwrap().read_to_string(&mut out).await.unwrap();
            assert_eq!(out, "heard: from kube-rs\nstdin closed\n");
            p.join().await.unwrap();
            return;
        }
        panic!("kube-rs never attached: {last}");
    });
}

/// The ephemeral containers of `pod` and how each ended: `name=exitCode` lines.
fn ephemeral_ended(k: &Kubectl, pod: &str) -> String {
    k.ok(&[
        "-n",
        "shop",
        "get",
        "pod",
        pod,
        "-o",
        "jsonpath={range .status.ephemeralContainerStatuses[*]}{.name}={.state.terminated.exitCode}{\"\\n\"}{end}",
    ])
}

#[test]
fn debug_with_an_ephemeral_container_before_and_after_a_move() {
    let (_dev, admin) = shop_on_east(APP);
    // The namespace holds its pods to baseline: so are the debuggers that join them.
    admin.ok(&[
        "label",
        "namespace",
        "shop",
        "pod-security.kubernetes.io/enforce=baseline",
    ]);
    for (cluster, pod) in before_and_after_a_move(&admin, "app=app") {
        for (i, k) in each_kubectl(&admin, cluster) {
            // The debugger joins the running pod, on the cluster it runs on, and talks to
            // the client: kubectl adds it, waits for it to run, and attaches.
            let name = format!("dbg-{cluster}-{i}");
            let out = exec(
                &k,
                &[
                    "-n",
                    "shop",
                    "debug",
                    "-i",
                    &pod,
                    "--image=busybox",
                    "--profile=baseline",
                    "--target=main",
                    "-c",
                    &name,
                    "--",
                    "sh",
                    "-c",
                    "read line; echo \"debugger in $HOSTNAME heard: $line\"",
                ],
                b"hello\n",
            );
            assert!(
                out.status.success()
                    && text(&out.stdout).contains(&format!("debugger in {pod} heard: hello")),
                "{} {}",
                text(&out.stdout),
                text(&out.stderr)
            );
            // The pod of the logical cluster lists it, and how it ended; its log stays.
            let spec = k.ok(&[
                "-n",
                "shop",
                "get",
                "pod",
                &pod,
                "-o",
                "jsonpath={.spec.ephemeralContainers[*].name}",
            ]);
            assert!(spec.split(' ').any(|n| n == name), "{spec}");
            let mut ended = String::new();
            let done = eventually(Duration::from_secs(60), || {
                ended = ephemeral_ended(&k, &pod);
                ended.lines().any(|l| l == format!("{name}=0"))
            });
            assert!(done, "{ended}");
            let logs = k.ok(&["-n", "shop", "logs", &pod, "-c", &name]);
            assert!(logs.contains("heard: hello"), "{logs}");

            // Without rights to it, and beyond the namespace's Pod Security level: refused.
            let err = k.fails(&[
                "-n",
                "shop",
                "debug",
                &pod,
                "--image=busybox",
                "-c",
                "sneaky",
                "--as=vera",
                "--",
                "true",
            ]);
            assert!(
                err.contains(r#"User "vera" cannot patch resource "pods/ephemeralcontainers" in API group "" in the namespace "shop""#),
                "{err}"
            );
            let err = k.fails(&[
                "-n",
                "shop",
                "debug",
                &pod,
                "--image=busybox",
                "--profile=sysadmin",
                "-c",
                "privileged",
                "--",
                "true",
            ]);
            assert!(
                err.contains(r#"violates PodSecurity "baseline:latest": privileged"#),
                "{err}"
            );
        }
        kube_rs_ephemeral(&admin.kubeconfig, &pod, cluster);
    }
}

/// kube-rs's `patch_ephemeral_containers`: a debugger added that runs until it is told to
/// stop, then kube's refusals — a changed, a removed, a duplicate name, a target that is not
/// there, a port — with nothing of them stored.
fn kube_rs_ephemeral(kubeconfig: &std::path::Path, pod: &str, cluster: &str) {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, Patch, PatchParams, PostParams};
    in_shop(kubeconfig, async |pods: Api<Pod>| {
        let name = format!("kube-rs-{cluster}");
        let debugger = serde_json::json!({"name": name, "image": "busybox",
            "command": ["sh", "-c", "echo kube-rs debugger; exec sleep 3600"]});
        let added = pods
            .patch_ephemeral_containers(
                pod,
                &PatchParams::default(),
                &Patch::Strategic(serde_json::json!({"spec": {"ephemeralContainers": [debugger]}})),
            )
            .await
            .unwrap();
        let listed =
            serde_json::to_value(&added.spec.as_ref().unwrap().ephemeral_containers).unwrap();
        assert!(
            listed
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["name"] == name.as_str()),
            "{listed}"
        );
        // It runs there: its status comes up with the pod's.
        let mut running = false;
        for _ in 0..60 {
            let p = pods.get(pod).await.unwrap();
            let statuses =
                serde_json::to_value(&p.status.unwrap().ephemeral_container_statuses).unwrap();
            if statuses
                .as_array()
                .into_iter()
                .flatten()
                .any(|s| s["name"] == name.as_str() && s["state"]["running"].is_object())
            {
                running = true;
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        assert!(running, "{name} never ran on {cluster}");
        let refused = |e: kube::Error| match e {
            kube::Error::Api(s) => (s.code, s.message),
            other => panic!("{other}"),
        };
        let current = pods.get_ephemeral_containers(pod).await.unwrap();
        let list =
            serde_json::to_value(&current.spec.as_ref().unwrap().ephemeral_containers).unwrap();
        let mut changed = current.clone();
        let mut edited = list.clone();
        for c in edited.as_array_mut().unwrap() {
            if c["name"] == name.as_str() {
                c["image"] = "alpine".into();
            }
        }
        changed.spec.as_mut().unwrap().ephemeral_containers =
            serde_json::from_value(edited).unwrap();
        let (code, message) = refused(
            pods.replace_ephemeral_containers(pod, &PostParams::default(), &changed)
                .await
                .unwrap_err(),
        );
        assert_eq!(code, 422, "{message}");
        assert!(
            message.contains(&format!(
                "existing ephemeral containers \"{name}\" may not be changed"
            )),
            "{message}"
        );
        let (code, message) = refused(
            pods.patch_ephemeral_containers(
                pod,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"ephemeralContainers": []}})),
            )
            .await
            .unwrap_err(),
        );
        assert_eq!(code, 422, "{message}");
        assert!(message.contains("may not be removed"), "{message}");
        for (bad, says) in [
            (
                serde_json::json!({"name": "main", "image": "busybox"}),
                "Duplicate value: \"main\"",
            ),
            (
                serde_json::json!({"name": "aimless", "image": "busybox", "targetContainerName": "nope"}),
                "targetContainerName: Not found: \"nope\"",
            ),
            (
                serde_json::json!({"name": "server", "image": "busybox", "ports": [{"containerPort": 80}]}),
                "ports: Forbidden: cannot be set for an Ephemeral Container",
            ),
            (
                serde_json::json!({"name": "imageless"}),
                "image: Required value",
            ),
        ] {
            let (code, message) = refused(
                pods.patch_ephemeral_containers(
                    pod,
                    &PatchParams::default(),
                    &Patch::Strategic(serde_json::json!({"spec": {"ephemeralContainers": [bad]}})),
                )
                .await
                .unwrap_err(),
            );
            assert_eq!(code, 422, "{message}");
            assert!(message.contains(says), "{says}: {message}");
        }
        let after = pods.get_ephemeral_containers(pod).await.unwrap();
        assert_eq!(
            serde_json::to_value(&after.spec.unwrap().ephemeral_containers).unwrap(),
            list,
            "a refused change was stored"
        );
    });
}

const WEB: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - {name: main, image: sluice/echo}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  selector: {app: web}
  ports:
  - {name: http, port: 80, targetPort: 8080}
  - {name: echo, port: 9000, targetPort: 9000}
"#;

/// A running `kubectl port-forward`, and the local port of each remote port it forwards.
struct PortForward {
    child: std::process::Child,
    local: Vec<u16>,
    stderr: std::sync::Arc<Mutex<String>>,
}

impl PortForward {
    /// `kubectl port-forward TARGET :PORT…` (each on a port the kernel picks), over SPDY
    /// unless `websocket`, once kubectl says where it listens.
    fn start(k: &Kubectl, target: &str, ports: &[u16], websocket: bool) -> Self {
        use std::io::BufRead;
        let mut args = vec!["-n", "shop", "port-forward", "--address=127.0.0.1", target];
        let remote: Vec<String> = ports.iter().map(|p| format!(":{p}")).collect();
        args.extend(remote.iter().map(String::as_str));
        let mut child = k
            .command(&args)
            .env("KUBECTL_PORT_FORWARD_WEBSOCKETS", websocket.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = std::sync::Arc::new(Mutex::new(String::new()));
        let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while err.read_line(&mut line).unwrap_or(0) > 0 {
                sink.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut local = vec![0u16; ports.len()];
        let mut line = String::new();
        while local.contains(&0) {
            line.clear();
            if out.read_line(&mut line).unwrap_or(0) == 0 {
                panic!(
                    "kubectl port-forward {target} ended: {}",
                    stderr.lock().unwrap()
                );
            }
            // "Forwarding from 127.0.0.1:41234 -> 8080"
            let Some(rest) = line.trim().strip_prefix("Forwarding from 127.0.0.1:") else {
                continue;
            };
            // In the order asked (a Service's port shows as the pod's it targets).
            let (l, _) = rest.split_once(" -> ").unwrap();
            let i = local.iter().position(|p| *p == 0).unwrap();
            local[i] = l.parse().unwrap();
        }
        // Keep reading stdout ("Handling connection for …") so kubectl never blocks on it.
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        PortForward {
            child,
            local,
            stderr,
        }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

impl Drop for PortForward {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP GET of `path` through local port `port`: the echo's answer.
fn get_through(port: u16, path: &str) -> serde_json::Value {
    use std::io::Read;
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        c,
        "GET {path} HTTP/1.1\r\nHost: pf\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    c.read_to_end(&mut answer).unwrap();
    let answer = text(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let body = answer.split_once("\r\n\r\n").unwrap().1;
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// A long TCP stream through local port `port` to the echo: `bytes` sent in chunks while
/// the echo comes back; every byte returns, in order.
fn echo_through(port: u16, bytes: usize) {
    use std::io::Read;
    let c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let pattern: Vec<u8> = (0..bytes).map(|i| (i % 251) as u8).collect();
    let mut w = c.try_clone().unwrap();
    let sent = pattern.clone();
    let writer = std::thread::spawn(move || {
        for chunk in sent.chunks(64 * 1024) {
            w.write_all(chunk).unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
        w.shutdown(std::net::Shutdown::Write).unwrap();
    });
    let mut back = Vec::with_capacity(bytes);
    (&c).read_to_end(&mut back).unwrap();
    writer.join().unwrap();
    assert_eq!(back.len(), bytes, "bytes echoed");
    assert!(back == pattern, "the echo came back changed");
}

#[test]
fn port_forward_through_the_logical_cluster_before_and_after_a_move() {
    let (_dev, admin) = shop_on_east(WEB);
    for (cluster, pod) in before_and_after_a_move(&admin, "app=web") {
        let pod = format!("pod/{pod}");
        for (_, k) in each_kubectl(&admin, cluster) {
            let bin = &k.bin;
            // kubectl 1.31+ tunnels SPDY in a WebSocket; without it, SPDY itself.
            for websocket in [true, false] {
                eprintln!("{cluster}: kubectl {bin}, websocket {websocket}");
                // A pod, a Service (its port 80 is the pod's 8080) and a Deployment.
                for (target, http) in [(pod.as_str(), 8080), ("svc/web", 80), ("deploy/web", 8080)]
                {
                    let pf = PortForward::start(&k, target, &[http, 9000], websocket);
                    for n in 0..2 {
                        let answer = get_through(pf.local[0], &format!("/{n}"));
                        assert_eq!(answer["cluster"], cluster, "{answer}");
                        assert_eq!(answer["path"], format!("/{n}"));
                    }
                    echo_through(pf.local[1], 4 << 20);
                    assert!(!pf.stderr().contains("error"), "{target}: {}", pf.stderr());
                }
                // A port nobody listens on: the cluster's error reaches kubectl, which
                // gives up on the session as it does against any kube.
                let mut pf = PortForward::start(&k, &pod, &[9999], websocket);
                let _ = std::net::TcpStream::connect(("127.0.0.1", pf.local[0]))
                    .map(|mut c| std::io::copy(&mut c, &mut std::io::sink()));
                assert!(
                    eventually(Duration::from_secs(30), || pf
                        .stderr()
                        .contains("error forwarding port 9999")),
                    "{}",
                    pf.stderr()
                );
                let _ = eventually(Duration::from_secs(30), || {
                    pf.child.try_wait().ok().flatten().is_some()
                });
            }
            let err = k.fails(&["-n", "shop", "port-forward", &pod, ":8080", "--as=vera"]);
            assert!(
                err.contains(r#"User "vera" cannot create resource "pods/portforward" in API group "" in the namespace "shop""#),
                "{err}"
            );
            let err = k.fails(&["-n", "shop", "port-forward", "pod/no-such-pod", ":8080"]);
            assert!(err.contains(r#"pods "no-such-pod" not found"#), "{err}");
        }
        kube_rs_through(&admin.kubeconfig, pod.trim_start_matches("pod/"), cluster);
        // The Python client's WebSocket channels.
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/portforward.py");
        let out = std::process::Command::new("python3")
            .arg(script)
            .arg(&admin.kubeconfig)
            .args(["shop", pod.trim_start_matches("pod/"), cluster])
            .output()
            .unwrap();
        assert!(
            out.status.success() && text(&out.stdout).contains("python port-forward: ok"),
            "python client: {}\n{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }
}

/// kube-rs, a client we did not write, through the logical cluster: `AttachedProcess`
/// (exec: stdin to its close, stdout, the exit code in the status; a sized terminal) and
/// `Portforwarder`
/// (HTTP on one port, a refused port's error on its own channel).
fn kube_rs_through(kubeconfig: &std::path::Path, pod: &str, cluster: &str) {
    use futures::SinkExt;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, AttachParams};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    in_shop(kubeconfig, async |pods: Api<Pod>| {
        let mut p = pods
            .exec(
                pod,
                ["sh", "-c", "cat; echo \"on $SLUICE_CLUSTER\"; exit 5"],
                &AttachParams::default().stdin(true).stderr(false),
            )
            .await
            .unwrap();
        let mut stdin = p.stdin().unwrap();
        stdin.write_all(b"from kube-rs\n").await.unwrap();
        stdin.shutdown().await.unwrap();
        drop(stdin);
        let mut out = String::new();
        p.stdout().unwrap().read_to_string(&mut out).await.unwrap();
        let status = p.take_status().unwrap().await.unwrap();
        assert_eq!(out, format!("from kube-rs\non {cluster}\n"));
        assert_eq!(
            status.reason.as_deref(),
            Some("NonZeroExitCode"),
            "{status:?}"
        );
        let code = status.details.and_then(|d| d.causes).unwrap_or_default();
        assert_eq!(code[0].message.as_deref(), Some("5"));

        // On a terminal the client sizes.
        let mut p = pods
            .exec(
                pod,
                [
                    "sh".to_string(),
                    "-c".to_string(),
                    format!("{SIZED}; [ -t 0 ] && echo on-a-tty"),
                ],
                &AttachParams::default().stdin(true).tty(true).stderr(false),
            )
            .await
            .unwrap();
        let mut size = p.terminal_size().unwrap();
        size.send(kube::api::TerminalSize {
            width: 100,
            height: 30,
        })
        .await
        .unwrap();
        let stdin = p.stdin().unwrap();
        let mut out = String::new();
        p.stdout().unwrap().read_to_string(&mut out).await.unwrap();
        assert!(
            out.contains("30 100\r\n") && out.contains("on-a-tty"),
            "{out:?}"
        );
        drop(stdin);
        p.join().await.unwrap();

        let mut pf = pods.portforward(pod, &[8080, 9999]).await.unwrap();
        let mut http = pf.take_stream(8080).unwrap();
        http.write_all(b"GET /from-kube-rs HTTP/1.1\r\nHost: pf\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let refused = pf.take_error(9999).unwrap().await.unwrap_or_default();
        assert!(refused.contains("error forwarding port 9999"), "{refused}");
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        while !text(&answer).contains(&format!(r#""cluster":"{cluster}""#)) {
            let n = tokio::time::timeout(Duration::from_secs(60), http.read(&mut buf))
                .await
                .unwrap()
                .unwrap();
            assert!(n > 0, "the answer ended early: {}", text(&answer));
            answer.extend_from_slice(&buf[..n]);
        }
        assert!(
            text(&answer).starts_with("HTTP/1.1 200"),
            "{}",
            text(&answer)
        );
        pf.abort();
    });
}
