#![allow(clippy::unwrap_used)]
//! Local physical clusters that run real processes (issue: e2e local clusters): the real
//! kubectl against `sluice dev up`. The tests share the clusterset's fixed loopback ranges,
//! so they run one at a time.

use crate::support;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::{DevUp, Kubectl, eventually, http_get, processes_with, sluice_bin};

const ECHO: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: echo, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: echo}}
  strategy: {rollingUpdate: {maxSurge: 1, maxUnavailable: 0}}
  template:
    metadata: {labels: {app: echo}}
    spec:
      containers:
      - name: echo
        image: sluice/echo
        ports: [{name: http, containerPort: 8080}]
        readinessProbe: {httpGet: {port: http, path: /ready}, periodSeconds: 1}
        lifecycle: {preStop: {sleep: {seconds: 1}}}
---
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: default}
spec:
  selector: {app: echo}
  ports: [{name: http, port: 80, targetPort: http}]
"#;

fn ready_ips(k: &Kubectl) -> Vec<String> {
    let out = k.ok(&[
        "get",
        "endpointslices",
        "-l",
        "kubernetes.io/service-name=echo",
        "-o",
        "jsonpath={range .items[*].endpoints[?(@.conditions.ready==true)]}{.addresses[0]} {end}",
    ]);
    out.split_whitespace().map(str::to_string).collect()
}

#[test]
fn deployments_run_as_processes_and_roll_without_failures() {
    let (mut dev, _) = DevUp::start("east,west");
    let east = dev.kubectl("east");
    let west = dev.kubectl("west");
    east.apply_stdin(ECHO);
    east.ok(&["rollout", "status", "deploy/echo", "--timeout=30s"]);
    assert!(east.ok(&["get", "deploy", "echo"]).contains("3/3"));
    // Each pod answers on its own IP, from the east range, with its identity.
    let pods = east.ok(&[
        "get",
        "pods",
        "-l",
        "app=echo",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name}={.status.podIP} {end}",
    ]);
    let pods: Vec<(String, String)> = pods
        .split_whitespace()
        .map(|p| {
            let (n, ip) = p.split_once('=').unwrap();
            (n.to_string(), ip.to_string())
        })
        .collect();
    assert_eq!(pods.len(), 3);
    for (name, ip) in &pods {
        assert!(ip.starts_with("127.20."), "{ip}");
        let answer =
            http_get(ip, 8080, "/who").unwrap_or_else(|| panic!("{name} at {ip} does not answer"));
        assert_eq!(
            (
                answer["pod"].as_str(),
                answer["cluster"].as_str(),
                answer["namespace"].as_str()
            ),
            (Some(name.as_str()), Some("east"), Some("default"))
        );
    }
    assert_eq!(ready_ips(&east).len(), 3);

    // A rolling update while `sluice loadgen` (HTTP/1.1 and gRPC) hits Pod IPs from the
    // live EndpointSlice: no failed request.
    let kubeconfig = dev.state.join("clusters/east.kubeconfig");
    let loadgens: Vec<(String, Child)> = ["http1", "grpc"]
        .iter()
        .map(|p| {
            let child = Command::new(sluice_bin())
                .args([
                    "loadgen",
                    "--protocol",
                    p,
                    "--rate",
                    "200",
                    "--duration",
                    "10",
                    "--service",
                    "default/echo",
                    "--port",
                    "8080",
                    "--kubeconfig",
                ])
                .arg(&kubeconfig)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            (p.to_string(), child)
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    east.ok(&["set", "env", "deploy/echo", "COLOR=green"]);
    east.ok(&["rollout", "status", "deploy/echo", "--timeout=60s"]);
    for (protocol, child) in loadgens {
        let out = child.wait_with_output().unwrap();
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
            panic!(
                "{protocol}: no report: {}",
                String::from_utf8_lossy(&out.stdout)
            )
        });
        eprintln!("rolling update under {protocol} load: {report}");
        assert!(
            report["ok"].as_u64().unwrap() > 1500,
            "{protocol}: too little load: {report}"
        );
        assert_eq!(
            report["failed"], 0,
            "{protocol}: requests failed during the rollout: {report}"
        );
        assert!(out.status.success());
    }
    let new_pods = east.ok(&[
        "get",
        "pods",
        "-l",
        "app=echo",
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ]);
    assert!(
        pods.iter().all(|(n, _)| !new_pods.contains(n.as_str())),
        "all pods replaced"
    );

    // The other cluster runs side by side without seeing any of it.
    assert!(west.ok(&["get", "pods", "-o", "name"]).trim().is_empty());
    west.apply_stdin(&ECHO.replace("replicas: 3", "replicas: 1"));
    west.ok(&["rollout", "status", "deploy/echo", "--timeout=30s"]);
    let west_ip = west.ok(&["get", "pods", "-o", "jsonpath={.items[0].status.podIP}"]);
    assert!(west_ip.starts_with("127.21."), "{west_ip}");
    assert_eq!(http_get(&west_ip, 8080, "/").unwrap()["cluster"], "west");
    assert_eq!(ready_ips(&east).len(), 3);

    // Killing a pod's process restarts it.
    let pod = east.ok(&[
        "get",
        "pods",
        "-l",
        "app=echo",
        "-o",
        "jsonpath={.items[0].metadata.name}",
    ]);
    let ip = east.ok(&["get", "pod", &pod, "-o", "jsonpath={.status.podIP}"]);
    let victim = processes_with("sluice echo").len();
    assert!(victim >= 4);
    let pid = std::fs::read_dir("/proc").unwrap().flatten().find_map(|e| {
        let env = std::fs::read(e.path().join("environ")).ok()?;
        let env = String::from_utf8_lossy(&env);
        env.split('\0')
            .any(|kv| kv == format!("POD_NAME={pod}"))
            .then(|| e.file_name().to_string_lossy().to_string())
    });
    let pid = pid.expect("the pod's process");
    let _ = Command::new("kill").arg("-9").arg(&pid).status();
    assert!(eventually(Duration::from_secs(15), || east.ok(&[
        "get",
        "pod",
        &pod,
        "-o",
        "jsonpath={.status.containerStatuses[0].restartCount}"
    ]) == "1"));
    assert!(
        eventually(Duration::from_secs(15), || http_get(&ip, 8080, "/")
            .is_some()),
        "restarted pod answers again"
    );

    // Stopping dev up leaves no process behind.
    assert!(dev.stop(), "dev up did not exit cleanly");
    assert!(
        processes_with("sluice echo").is_empty(),
        "pods left behind: {:?}",
        processes_with("sluice echo")
    );
    let state = dev.state.display().to_string();
    assert!(
        processes_with(&state).is_empty(),
        "processes left behind: {:?}",
        processes_with(&state)
    );
}

#[test]
fn termination_logs_and_bad_pods() {
    let (mut dev, took) = DevUp::start("east");
    eprintln!("dev up ready in {:.2} s", took.as_secs_f64());
    let k = dev.kubectl("east");
    // A process that logs, and on SIGTERM says so and takes a second to finish.
    k.apply_stdin(r#"apiVersion: v1
kind: Pod
metadata: {name: graceful, namespace: default}
spec:
  terminationGracePeriodSeconds: 10
  containers:
  - name: main
    image: busybox
    command: ["sh", "-c", "trap 'echo got SIGTERM; sleep 1; echo bye; exit 0' TERM; i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.2; done"]
"#);
    assert!(eventually(Duration::from_secs(15), || k.ok(&[
        "get",
        "pod",
        "graceful",
        "-o",
        "jsonpath={.status.phase}"
    ]) == "Running"));
    // logs -f streams new lines as they come.
    let mut follow = k
        .command(&["logs", "-f", "graceful"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(follow.stdout.take().unwrap());
    let mut seen = Vec::new();
    let started = Instant::now();
    while seen.len() < 8 && started.elapsed() < Duration::from_secs(10) {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap() == 0 {
            break;
        }
        seen.push(line);
    }
    let _ = follow.kill();
    let _ = follow.wait();
    assert!(
        seen.len() >= 8 && seen.iter().all(|l| l.starts_with("tick")),
        "{seen:?}"
    );
    assert!(k.ok(&["logs", "graceful", "--tail=2"]).lines().count() == 2);
    // kubectl delete: SIGTERM, the process's own shutdown, then the Pod is gone.
    let t = Instant::now();
    k.ok(&["delete", "pod", "graceful"]);
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(900),
        "deletion did not wait for the graceful exit: {took:?}"
    );
    assert!(
        took < Duration::from_secs(9),
        "deletion waited for the whole grace period: {took:?}"
    );
    let logs = std::fs::read_to_string(
        dev.state
            .join("clusters/east/logs/default/graceful/main/0.log"),
    )
    .unwrap();
    assert!(
        logs.contains("got SIGTERM") && logs.contains("bye"),
        "{logs}"
    );

    // A process that ignores SIGTERM is killed when the grace period ends.
    k.apply_stdin(
        r#"apiVersion: v1
kind: Pod
metadata: {name: stubborn}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: busybox
    command: ["sh", "-c", "trap '' TERM; while true; do sleep 0.1; done"]
"#,
    );
    assert!(eventually(Duration::from_secs(15), || k.ok(&[
        "get",
        "pod",
        "stubborn",
        "-o",
        "jsonpath={.status.phase}"
    ]) == "Running"));
    let t = Instant::now();
    k.ok(&["delete", "pod", "stubborn"]);
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(8),
        "SIGKILL after the 2 s grace period, took {took:?}"
    );

    // Environment from literals, ConfigMaps, Secrets and field references; logs --previous.
    k.ok(&[
        "create",
        "configmap",
        "settings",
        "--from-literal=mode=fast",
    ]);
    k.ok(&[
        "create",
        "secret",
        "generic",
        "creds",
        "--from-literal=token=s3cret",
    ]);
    k.apply_stdin(r#"apiVersion: v1
kind: Pod
metadata: {name: envpod}
spec:
  containers:
  - name: main
    image: busybox
    command: ["sh", "-c", "echo mode=$MODE token=$TOKEN pod=$ME ip=$POD_IP cluster=$SLUICE_CLUSTER lit=$LIT; sleep 0.5; exit 1"]
    env:
    - {name: LIT, value: hello}
    - {name: MODE, valueFrom: {configMapKeyRef: {name: settings, key: mode}}}
    - {name: TOKEN, valueFrom: {secretKeyRef: {name: creds, key: token}}}
    - {name: ME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
"#);
    assert!(eventually(Duration::from_secs(20), || k
        .ok(&[
            "get",
            "pod",
            "envpod",
            "-o",
            "jsonpath={.status.containerStatuses[0].restartCount}"
        ])
        .parse::<u32>()
        .unwrap_or(0)
        >= 1));
    let previous = k.ok(&["logs", "envpod", "--previous"]);
    let ip = k.ok(&["get", "pod", "envpod", "-o", "jsonpath={.status.podIP}"]);
    assert_eq!(
        previous.trim(),
        format!("mode=fast token=s3cret pod=envpod ip={ip} cluster=east lit=hello")
    );

    // A startup probe holds readiness back until it passes; one that never passes restarts.
    let marker = dev.state.join("slowstart-started");
    k.apply_stdin(&format!(r#"apiVersion: v1
kind: Pod
metadata: {{name: slowstart}}
spec:
  containers:
  - name: main
    image: busybox
    command: ["sh", "-c", "sleep 2; touch {marker}; while true; do sleep 0.2; done"]
    startupProbe: {{exec: {{command: ["test", "-e", "{marker}"]}}, periodSeconds: 1, failureThreshold: 30}}
---
apiVersion: v1
kind: Pod
metadata: {{name: neverstarts}}
spec:
  containers:
  - name: main
    image: busybox
    command: ["sh", "-c", "while true; do sleep 0.2; done"]
    startupProbe: {{exec: {{command: ["false"]}}, periodSeconds: 1, failureThreshold: 2}}
"#, marker = marker.display()));
    assert!(eventually(Duration::from_secs(10), || k.ok(&[
        "get",
        "pod",
        "slowstart",
        "-o",
        "jsonpath={.status.phase}"
    ]) == "Running"));
    assert_eq!(
        k.ok(&[
            "get",
            "pod",
            "slowstart",
            "-o",
            "jsonpath={.status.containerStatuses[0].started}"
        ]),
        "false"
    );
    assert!(eventually(Duration::from_secs(15), || k.ok(&[
        "get",
        "pod",
        "slowstart",
        "-o",
        "jsonpath={.status.containerStatuses[0].ready}"
    ]) == "true"));
    assert!(marker.exists());
    assert!(eventually(Duration::from_secs(20), || k
        .ok(&[
            "get",
            "pod",
            "neverstarts",
            "-o",
            "jsonpath={.status.containerStatuses[0].restartCount}"
        ])
        .parse::<u32>()
        .unwrap_or(0)
        >= 1));

    // Bad pods: each shows its reason in status; nothing else breaks.
    k.apply_stdin(
        r#"apiVersion: v1
kind: Pod
metadata: {name: nocommand}
spec:
  containers: [{name: main, image: busybox, command: ["/does/not/exist"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: crashing}
spec:
  containers: [{name: main, image: busybox, command: ["sh", "-c", "echo dying; exit 3"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: unknownimage}
spec:
  containers: [{name: main, image: nginx:1.27}]
---
apiVersion: v1
kind: Pod
metadata: {name: porttaken}
spec:
  containers: [{name: main, image: sluice/echo, env: [{name: ECHO_HTTP_PORT, value: "9000"}]}]
"#,
    );
    let reason = |pod: &str| {
        k.ok(&["get", "pod", pod, "-o", "jsonpath={.status.containerStatuses[0].state.waiting.reason}{.status.containerStatuses[0].lastState.terminated.exitCode}"])
    };
    assert!(
        eventually(Duration::from_secs(15), || reason("nocommand")
            .starts_with("RunContainerError")),
        "{}",
        reason("nocommand")
    );
    let msg = k.ok(&[
        "get",
        "pod",
        "nocommand",
        "-o",
        "jsonpath={.status.containerStatuses[0].state.waiting.message}",
    ]);
    assert!(msg.contains("/does/not/exist"), "{msg}");
    assert!(
        eventually(Duration::from_secs(15), || reason("crashing")
            == "CrashLoopBackOff3"),
        "{}",
        reason("crashing")
    );
    assert!(
        k.ok(&[
            "get",
            "pod",
            "crashing",
            "-o",
            "jsonpath={.status.containerStatuses[0].lastState.terminated.message}"
        ])
        .contains("dying")
    );
    assert!(
        eventually(Duration::from_secs(15), || reason("unknownimage")
            == "ImageNotBuiltIn"),
        "{}",
        reason("unknownimage")
    );
    let msg = k.ok(&[
        "get",
        "pod",
        "unknownimage",
        "-o",
        "jsonpath={.status.containerStatuses[0].state.waiting.message}",
    ]);
    assert!(
        msg.contains("nginx:1.27") && msg.contains("not built into Sluice"),
        "{msg}"
    );
    // HTTP on the TCP echo port collides with itself: the process exits with the bind error.
    assert!(eventually(Duration::from_secs(15), || k
        .ok(&[
            "get",
            "pod",
            "porttaken",
            "-o",
            "jsonpath={.status.containerStatuses[0].lastState.terminated.message}"
        ])
        .contains("in use")));
    k.ok(&["get", "ns", "default"]);
    // The node agent's admin endpoint, named in the cluster descriptor.
    let descriptor: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dev.state.join("clusters/east.json")).unwrap())
            .unwrap();
    let node = descriptor["node"].as_str().unwrap().to_string();
    let raw = |path: &str| {
        let mut s = std::net::TcpStream::connect(&node).unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    assert!(raw("/readyz").starts_with("HTTP/1.1 200"));
    let metrics = raw("/metrics");
    let restarts: u64 = metrics
        .lines()
        .find(|l| l.starts_with("sluice_node_container_restarts_total "))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0);
    assert!(restarts >= 2, "{metrics}");
    assert!(
        metrics.contains("sluice_node_container_start_failures_total")
            && metrics.contains("sluice_node_pods "),
        "{metrics}"
    );
    assert!(dev.stop());
    assert!(processes_with(&dev.state.display().to_string()).is_empty());
}

#[test]
fn statefulset_starts_in_order_with_stable_names() {
    let (mut dev, _) = DevUp::start("east");
    let k = dev.kubectl("east");
    k.apply_stdin(
        r#"apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: None
  selector: {app: web}
  ports: [{name: http, port: 8080}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web}
spec:
  serviceName: web
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: echo
        image: sluice/echo
        readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
"#,
    );
    // Observe the start: a Pod never exists before its predecessor is Running and Ready.
    let started = Instant::now();
    let mut order_ok = true;
    loop {
        let out = k.ok(&["get", "pods", "-l", "app=web", "-o", "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type==\"Ready\")].status} {end}"]);
        let state: std::collections::BTreeMap<String, String> = out
            .split_whitespace()
            .filter_map(|p| {
                p.split_once('=')
                    .map(|(a, b)| (a.to_string(), b.to_string()))
            })
            .collect();
        for i in 1..3 {
            if state.contains_key(&format!("web-{i}"))
                && state.get(&format!("web-{}", i - 1)).map(String::as_str) != Some("True")
            {
                order_ok = false;
            }
        }
        if state.len() == 3 && state.values().all(|r| r == "True") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "statefulset did not become ready: {state:?}"
        );
        std::thread::sleep(Duration::from_millis(30));
    }
    assert!(order_ok, "a pod started before its predecessor was ready");
    assert!(eventually(Duration::from_secs(10), || k.ok(&[
        "get",
        "sts",
        "web",
        "-o",
        "jsonpath={.status.readyReplicas}"
    ]) == "3"));
    // Stable hostnames, published in the headless Service's EndpointSlice.
    let hosts = || {
        let out = k.ok(&[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=web",
            "-o",
            "jsonpath={.items[*].endpoints[*].hostname}",
        ]);
        let mut h: Vec<String> = out.split_whitespace().map(str::to_string).collect();
        h.sort();
        h
    };
    assert!(
        eventually(Duration::from_secs(10), || hosts()
            == ["web-0", "web-1", "web-2"]),
        "{:?}",
        hosts()
    );
    let ip = k.ok(&["get", "pod", "web-1", "-o", "jsonpath={.status.podIP}"]);
    assert_eq!(http_get(&ip, 8080, "/").unwrap()["pod"], "web-1");
    // A deleted member comes back under the same name.
    let uid = k.ok(&["get", "pod", "web-1", "-o", "jsonpath={.metadata.uid}"]);
    k.ok(&["delete", "pod", "web-1"]);
    assert!(eventually(Duration::from_secs(20), || {
        let now = k.run(&[
            "get",
            "pod",
            "web-1",
            "-o",
            "jsonpath={.metadata.uid} {.status.conditions[?(@.type==\"Ready\")].status}",
        ]);
        let s = String::from_utf8_lossy(&now.stdout).to_string();
        now.status.success() && !s.starts_with(&uid) && s.ends_with("True")
    }));
    // Scaling down removes the highest ordinal first.
    let names = || {
        k.ok(&[
            "get",
            "pods",
            "-l",
            "app=web",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ])
    };
    k.ok(&["scale", "sts", "web", "--replicas=1"]);
    assert!(eventually(Duration::from_secs(20), || names() == "web-0"));
    // `spec.ordinals.start` (KEP-3335) shifts the ordinals: web-2 and web-3 run, and web-0,
    // now below the range, goes.
    k.ok(&[
        "patch",
        "sts",
        "web",
        "--type=merge",
        "-p",
        r#"{"spec": {"replicas": 2, "ordinals": {"start": 2}}}"#,
    ]);
    assert!(
        eventually(Duration::from_secs(60), || names() == "web-2 web-3"
            && k.ok(&[
                "get",
                "sts",
                "web",
                "-o",
                "jsonpath={.status.readyReplicas}"
            ]) == "2"),
        "{}",
        names()
    );
    assert!(dev.stop());
}

/// Each ordinal of a StatefulSet mounts claims of its own, made from `volumeClaimTemplates`
/// before its Pod: a Pod deleted and made again finds its data; an ordinal scaled away
/// under `whenScaled: Delete` takes its claims with it; the others outlive the set
/// (`whenDeleted: Retain`).
#[test]
fn statefulset_ordinals_keep_their_claims() {
    let (mut dev, _) = DevUp::start("east");
    let k = dev.kubectl("east");
    k.apply_stdin(
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  serviceName: db
  replicas: 2
  selector: {matchLabels: {app: db}}
  persistentVolumeClaimRetentionPolicy: {whenScaled: Delete, whenDeleted: Retain}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers:
      - name: main
        image: busybox
        command: ["sh", "-c", "test -f /data/id || echo \"$HOSTNAME $$\" > /data/id; exec sleep 3600"]
        volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 10Mi}}
"#,
    );
    let ready =
        |n: &str| k.ok(&["get", "sts", "db", "-o", "jsonpath={.status.readyReplicas}"]) == n;
    assert!(
        eventually(Duration::from_secs(60), || ready("2")),
        "db never ran"
    );
    let claims = || {
        k.ok(&[
            "get",
            "pvc",
            "-l",
            "app=db",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.status.phase} {end}",
        ])
    };
    assert!(
        eventually(Duration::from_secs(30), || claims().trim()
            == "data-db-0=Bound data-db-1=Bound"),
        "{}",
        claims()
    );
    // Provisioned as kube's local-path provisioners do: the default class, a volume per
    // claim pinned to the node and bound to it. Beside it, the class of the clusterset's
    // shared storage (docs/stateful.md), kept when a claim goes.
    assert_eq!(
        k.ok(&[
            "get",
            "storageclass",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.metadata.annotations.storageclass\\.kubernetes\\.io/is-default-class} {.provisioner} {.volumeBindingMode} {.reclaimPolicy};{end}",
        ]),
        "shared  sluice.dev/shared-path WaitForFirstConsumer Retain;standard true sluice.dev/local-path WaitForFirstConsumer Delete;"
    );
    let volume_of = |claim: &str| {
        let uid = k.ok(&["get", "pvc", claim, "-o", "jsonpath={.metadata.uid}"]);
        let bound = k.ok(&[
            "get",
            "pvc",
            claim,
            "-o",
            "jsonpath={.spec.storageClassName} {.spec.volumeName}",
        ]);
        assert_eq!(bound, format!("standard pvc-{uid}"));
        let pv = k.ok(&[
            "get",
            "pv",
            &format!("pvc-{uid}"),
            "-o",
            "jsonpath={.status.phase} {.spec.claimRef.name} {.spec.persistentVolumeReclaimPolicy} {.spec.capacity.storage}|{.spec.local.path}",
        ]);
        let (status, path) = pv.split_once('|').unwrap_or_default();
        assert_eq!(status, format!("Bound {claim} Delete 10Mi"));
        (format!("pvc-{uid}"), std::path::PathBuf::from(path))
    };
    let (_, _) = volume_of("data-db-0");
    let (db1_volume, db1_dir) = volume_of("data-db-1");
    assert!(db1_dir.is_dir(), "{}", db1_dir.display());
    let id = |pod: &str| k.ok(&["exec", pod, "--", "cat", "/data/id"]);
    let first = id("db-0");
    assert!(first.starts_with("db-0 "), "{first}");
    assert!(id("db-1").starts_with("db-1 "));
    // db-0 made again mounts the same claim: what it wrote is there.
    let uid = k.ok(&["get", "pod", "db-0", "-o", "jsonpath={.metadata.uid}"]);
    k.ok(&["delete", "pod", "db-0", "--wait=false"]);
    assert!(
        eventually(Duration::from_secs(60), || {
            let now = k.run(&[
                "get",
                "pod",
                "db-0",
                "-o",
                "jsonpath={.metadata.uid} {.status.phase}",
            ]);
            let s = String::from_utf8_lossy(&now.stdout).to_string();
            now.status.success() && !s.starts_with(&uid) && s.ends_with("Running")
        }),
        "db-0 was not made again"
    );
    assert!(eventually(Duration::from_secs(30), || k
        .run(&["exec", "db-0", "--", "cat", "/data/id"])
        .status
        .success()));
    assert_eq!(id("db-0"), first);
    // Scaled away under whenScaled: Delete, db-1's claim goes with its Pod.
    k.ok(&["scale", "sts", "db", "--replicas=1"]);
    assert!(
        eventually(Duration::from_secs(60), || claims().trim()
            == "data-db-0=Bound"),
        "{}",
        claims()
    );
    // ... and its volume with it (the class reclaims with Delete): data and all.
    assert!(
        eventually(Duration::from_secs(30), || !k
            .run(&["get", "pv", &db1_volume])
            .status
            .success()),
        "{db1_volume} was not deleted"
    );
    assert!(!db1_dir.exists(), "{}", db1_dir.display());
    // The set deleted under whenDeleted: Retain, db-0's claim stays.
    k.ok(&["delete", "sts", "db"]);
    assert!(eventually(Duration::from_secs(60), || k
        .ok(&["get", "pods", "-l", "app=db", "-o", "name"])
        .is_empty()));
    assert_eq!(claims().trim(), "data-db-0=Bound");
    assert!(dev.stop());
}

/// Claims the node cannot serve leave their Pods waiting with kube's reason (a class that
/// does not exist, one another provisioner serves, more than the disk has free); a class
/// of the node's provisioner with `reclaimPolicy: Retain` keeps the data of a deleted
/// claim, its volume `Released`.
#[test]
fn claims_the_node_cannot_serve_wait_and_retained_volumes_keep_their_data() {
    let (mut dev, _) = DevUp::start("east");
    let k = dev.kubectl("east");
    let claim_and_pod = |name: &str, class: &str, size: &str| {
        format!(
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {name}}}\nspec:\n  \
             storageClassName: {class}\n  accessModes: [ReadWriteOnce]\n  resources: {{requests: {{storage: {size}}}}}\n\
             ---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers:\n  - name: main\n    \
             image: busybox\n    command: [\"sh\", \"-c\", \"echo kept > /data/f; exec sleep 3600\"]\n    \
             volumeMounts: [{{name: data, mountPath: /data}}]\n  volumes: [{{name: data, persistentVolumeClaim: {{claimName: {name}}}}}]\n"
        )
    };
    k.apply_stdin(
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: keep}\nprovisioner: sluice.dev/local-path\nreclaimPolicy: Retain\nvolumeBindingMode: WaitForFirstConsumer\n---\n\
         apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: ebs}\nprovisioner: ebs.csi.aws.com\n",
    );
    // A claim that names no class gets the default one when created (kube's
    // DefaultStorageClass admission), and waits for its first consumer.
    k.apply_stdin(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: unused}\nspec:\n  accessModes: [ReadWriteOnce]\n  resources: {requests: {storage: 1Mi}}\n",
    );
    assert_eq!(
        k.ok(&[
            "get",
            "pvc",
            "unused",
            "-o",
            "jsonpath={.spec.storageClassName} {.status.phase}"
        ]),
        "standard Pending"
    );
    k.apply_stdin(&claim_and_pod("nosuch", "fast", "1Mi"));
    k.apply_stdin(&claim_and_pod("elsewhere", "ebs", "1Mi"));
    k.apply_stdin(&claim_and_pod("huge", "standard", "1000Pi"));
    k.apply_stdin(&claim_and_pod("kept", "keep", "1Mi"));
    let waiting = |pod: &str| {
        k.ok(&[
            "get",
            "pod",
            pod,
            "-o",
            "jsonpath={.status.phase} {.status.containerStatuses[0].state.waiting.message}",
        ])
    };
    for (pod, says) in [
        ("nosuch", "storageclass.storage.k8s.io \"fast\" not found"),
        (
            "elsewhere",
            "waiting for a volume to be created, either by external provisioner \"ebs.csi.aws.com\"",
        ),
        (
            "huge",
            "persistentvolumeclaim \"huge\" asks for 1000Pi but node",
        ),
    ] {
        assert!(
            eventually(Duration::from_secs(60), || {
                let w = waiting(pod);
                w.starts_with("Pending ") && w.contains(says)
            }),
            "{pod}: {}",
            waiting(pod)
        );
        let phase = k.ok(&["get", "pvc", pod, "-o", "jsonpath={.status.phase}"]);
        assert_eq!(phase, "Pending", "{pod}");
    }
    assert!(eventually(Duration::from_secs(60), || k.ok(&[
        "get",
        "pod",
        "kept",
        "-o",
        "jsonpath={.status.phase}"
    ]) == "Running"));
    let uid = k.ok(&["get", "pvc", "kept", "-o", "jsonpath={.metadata.uid}"]);
    let volume = format!("pvc-{uid}");
    let path = k.ok(&["get", "pv", &volume, "-o", "jsonpath={.spec.local.path}"]);
    assert!(eventually(Duration::from_secs(30), || {
        std::fs::read_to_string(std::path::Path::new(&path).join("f")).is_ok_and(|s| s == "kept\n")
    }));
    k.ok(&["delete", "pod", "kept", "--wait=true"]);
    k.ok(&["delete", "pvc", "kept", "--wait=true"]);
    let phase = || k.ok(&["get", "pv", &volume, "-o", "jsonpath={.status.phase}"]);
    assert!(
        eventually(Duration::from_secs(30), || phase() == "Released"),
        "{}",
        phase()
    );
    assert_eq!(
        std::fs::read_to_string(std::path::Path::new(&path).join("f")).unwrap_or_default(),
        "kept\n"
    );
    assert!(dev.stop());
}

/// The node agent binds only what fits its node's allocatable (the Node's 2 CPUs here): a
/// Pod asking for more stays Pending, Unschedulable with the scheduler's words, and is
/// bound once room is made; a Pod that fits runs meanwhile.
#[test]
fn pods_beyond_the_nodes_allocatable_wait_unschedulable() {
    let (mut dev, _) = DevUp::start("east");
    let k = dev.kubectl("east");
    let pod = |name: &str, cpu: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  \
             containers:\n  - name: main\n    image: busybox\n    command: [\"sleep\", \"600\"]\n    \
             resources: {{requests: {{cpu: \"{cpu}\"}}}}\n"
        )
    };
    let field =
        |name: &str, path: &str| k.ok(&["get", "pod", name, "-o", &format!("jsonpath={path}")]);
    k.apply_stdin(&pod("big", "1500m"));
    assert!(eventually(Duration::from_secs(60), || field(
        "big",
        "{.status.phase}"
    ) == "Running"));
    k.apply_stdin(&pod("huge", "1"));
    let scheduled = |name: &str| {
        field(
            name,
            "{.status.conditions[?(@.type==\"PodScheduled\")].status}/{.status.conditions[?(@.type==\"PodScheduled\")].message}",
        )
    };
    assert!(
        eventually(Duration::from_secs(60), || scheduled("huge")
            == "False/0/1 nodes are available: 1 Insufficient cpu."),
        "{}",
        scheduled("huge")
    );
    assert_eq!(field("huge", "{.spec.nodeName}"), "", "not bound");
    k.apply_stdin(&pod("small", "100m"));
    assert!(eventually(Duration::from_secs(60), || field(
        "small",
        "{.status.phase}"
    ) == "Running"));
    assert_eq!(field("huge", "{.spec.nodeName}"), "", "still not bound");
    // Room is made: the waiting Pod is bound and runs.
    k.ok(&["delete", "pod", "big", "--wait=true"]);
    assert!(
        eventually(Duration::from_secs(60), || field("huge", "{.status.phase}")
            == "Running"),
        "bound once room was made: {}",
        scheduled("huge")
    );
    assert!(dev.stop());
}

#[test]
fn jobs_run_to_completion_and_cronjobs_make_them_on_schedule() {
    let (mut dev, _) = DevUp::start("east");
    let k = dev.kubectl("east");
    k.apply_stdin(
        r#"apiVersion: batch/v1
kind: Job
metadata: {name: works, namespace: default}
spec:
  completions: 3
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      containers: [{name: main, image: busybox, command: ["sh", "-c", "echo done"]}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: fails, namespace: default}
spec:
  backoffLimit: 1
  template:
    spec:
      restartPolicy: Never
      containers: [{name: main, image: busybox, command: ["sh", "-c", "exit 3"]}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: indexed, namespace: default}
spec:
  completions: 3
  parallelism: 3
  completionMode: Indexed
  template:
    spec:
      restartPolicy: Never
      containers: [{name: main, image: busybox, command: ["sh", "-c", "echo index=$JOB_COMPLETION_INDEX"]}]
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: tick, namespace: default}
spec:
  schedule: "@every 2s"
  successfulJobsHistoryLimit: 2
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers: [{name: main, image: busybox, command: ["true"]}]
"#,
    );
    // `kubectl wait` reads the conditions the Job controller writes.
    k.ok(&[
        "wait",
        "--for=condition=complete",
        "job/works",
        "job/indexed",
        "--timeout=120s",
    ]);
    let field = |what: &str, path: &str| k.ok(&["get", what, "-o", &format!("jsonpath={path}")]);
    assert_eq!(field("job/works", "{.status.succeeded}"), "3");
    assert_eq!(field("job/indexed", "{.status.completedIndexes}"), "0-2");
    let mut indexes: Vec<String> = k
        .ok(&["get", "pods", "-l", "job-name=indexed", "-o", "name"])
        .lines()
        .map(|pod| k.ok(&["logs", pod]).trim().to_string())
        .collect();
    indexes.sort();
    assert_eq!(indexes, ["index=0", "index=1", "index=2"]);
    k.ok(&[
        "wait",
        "--for=condition=failed",
        "job/fails",
        "--timeout=120s",
    ]);
    assert_eq!(
        field(
            "job/fails",
            "{.status.failed}/{.status.conditions[?(@.type==\"Failed\")].reason}"
        ),
        "2/BackoffLimitExceeded"
    );
    // The CronJob made Jobs that completed, and keeps only the last two.
    let tick_jobs = || {
        k.ok(&["get", "jobs", "-o", "name"])
            .lines()
            .filter(|j| j.starts_with("job.batch/tick-"))
            .count()
    };
    assert!(
        eventually(Duration::from_secs(90), || {
            !field("cronjob/tick", "{.status.lastSuccessfulTime}").is_empty() && tick_jobs() >= 2
        }),
        "{}",
        k.ok(&["get", "cronjob,jobs", "-o", "wide"])
    );
    std::thread::sleep(Duration::from_secs(8));
    assert!(
        tick_jobs() <= 3,
        "history limit: {}",
        k.ok(&["get", "jobs"])
    );
    // A schedule kube-apiserver refuses is refused here.
    let refused = k.fails(&[
        "create",
        "cronjob",
        "bad",
        "--image=busybox",
        "--schedule=61 * * * *",
    ]);
    assert!(refused.contains("spec.schedule"), "{refused}");
    assert!(dev.stop());
}

#[test]
fn parts_stop_when_dev_up_is_killed_outright() {
    let (mut dev, _) = DevUp::start("east,west");
    // A Pod too: its node agent stops it as it stops.
    dev.kubectl("east")
        .ok(&["create", "deployment", "orphan", "--image=sluice/echo"]);
    // And many that ignore SIGTERM: each needs its whole grace period and SIGKILL. Stopped
    // one after another (2 s each) they kept the node agent for 48 s and more.
    const STUBBORN: usize = 24;
    let stubborn = "trap '' TERM; exec sleep 3607";
    dev.kubectl("east").ok(&[
        "create",
        "deployment",
        "stubborn",
        "--image=busybox",
        &format!("--replicas={STUBBORN}"),
        "--",
        "sh",
        "-c",
        stubborn,
    ]);
    assert!(
        eventually(Duration::from_secs(60), || !processes_with("sluice echo")
            .is_empty()),
        "the echo pod did not start"
    );
    assert!(
        eventually(Duration::from_secs(90), || processes_with("sleep 3607")
            .len()
            >= STUBBORN),
        "the stubborn pods did not all start: {:#?}",
        processes_with("sleep 3607")
    );
    // Every part's command line names the state directory.
    let state = dev.state.display().to_string();
    let parts = processes_with(&state);
    assert!(parts.len() >= 8, "dev up's parts: {parts:#?}");
    dev.kill9();
    // The bound: a part notices within half a second, a node agent gives its pods 2 s and
    // itself 3 s more; the rest is slack for a loaded machine, well short of stopping the
    // pods one by one.
    let bound = Duration::from_secs(20);
    assert!(
        eventually(bound, || processes_with(&state).is_empty()),
        "left running when dev up was killed: {:#?}",
        processes_with(&state)
    );
    assert!(
        eventually(bound, || processes_with("sluice echo").is_empty()
            && processes_with("sleep 3607").is_empty()),
        "pods left running: {:#?} {:#?}",
        processes_with("sluice echo"),
        processes_with("sleep 3607")
    );
}
