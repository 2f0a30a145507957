#![allow(clippy::unwrap_used)]
//! Placement end to end, with the real kubectl against the logical cluster only: a
//! namespace placed on a cluster runs there and its rollout completes upstream; changing
//! its cluster label moves it make-before-break (a watcher sampling both clusters never sees
//! fewer available replicas than desired); a placement onto a cluster that does not exist
//! is reported and moves nothing; drift downstream is reverted and what is deleted upstream
//! goes downstream. The tests share the clusterset's fixed loopback ranges,
//! so they run one at a time.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use support::clusterset::{
    APP, Load, answering_vip, available, condition, deployment_exists, downstream_ns, ds,
    imported_ready, kill9, vip_of_web,
};
use support::{DevUp, Kubectl, eventually};

const WITHIN: Duration = Duration::from_secs(120);

#[test]
fn apply_run_roll_out_and_move_without_losing_availability() {
    let (_dev, _) = DevUp::start("east,west");
    let dev = _dev;
    let control = dev.kubectl_control();
    let east = dev.kubectl("east");
    let west = dev.kubectl("west");

    control.apply_stdin(APP);
    control.ok(&[
        "-n",
        "shop",
        "rollout",
        "status",
        "deployment/web",
        "--timeout=180s",
    ]);
    assert_eq!(available(&east), 2, "running in east");
    assert!(!deployment_exists(&west), "not in west");
    // A bare Pod travels with its namespace too.
    control.ok(&["-n", "shop", "run", "solo", "--image=sluice/echo"]);
    let solo_in = |k: &Kubectl| {
        k.ok(&["-n", &downstream_ns(&control), "get", "pods", "-o", "name"])
            .contains("pod/solo")
    };
    let solo_phase = |control: &Kubectl| {
        control.ok(&[
            "-n",
            "shop",
            "get",
            "pod",
            "solo",
            "-o",
            "jsonpath={.status.phase}",
        ])
    };
    assert!(
        eventually(WITHIN, || solo_in(&east)
            && solo_phase(&control) == "Running"),
        "the bare pod runs in east: {}",
        solo_phase(&control)
    );
    assert!(
        eventually(WITHIN, || condition(&control, "status") == "True"),
        "placed: {}",
        condition(&control, "message")
    );
    let status = control.ok(&[
        "-n",
        "shop",
        "get",
        "deployment",
        "web",
        "-o",
        "jsonpath={.status.availableReplicas}/{.status.observedGeneration}/{.metadata.generation}",
    ]);
    let parts: Vec<&str> = status.split('/').collect();
    assert_eq!(parts[0], "2", "status summed back: {status}");
    assert_eq!(parts[1], parts[2], "generation observed: {status}");
    // A consumer in west, through west's VIP, from here to the end: every request counted.
    let vip = answering_vip(&west, "shop");
    let load = Load::start("http1", &format!("{vip}:80"), 3600, None);
    // The pods, read-only mirrors, with the cluster they run on.
    let wide = |control: &Kubectl| {
        control.ok(&["-n", "shop", "get", "pods", "-o", "wide", "-l", "app=web"])
    };
    assert!(
        eventually(WITHIN, || {
            let out = wide(&control);
            out.matches(".east").count() == 2 && out.matches("Running").count() == 2
        }),
        "pods shown upstream on east: {}",
        wide(&control)
    );

    // What east's components recorded is told upstream, on the objects there, from east:
    // the scheduler and kubelet on the Pods, the scaling on the Deployment.
    let reasons = |control: &Kubectl, kind: &str| {
        control.ok(&[
            "-n",
            "shop",
            "get",
            "events",
            "-o",
            &format!(
                "jsonpath={{range .items[?(@.involvedObject.kind==\"{kind}\")]}}{{.reason}}@{{.source.host}} {{end}}"
            ),
        ])
    };
    assert!(
        eventually(WITHIN, || {
            let pods = reasons(&control, "Pod");
            pods.contains("Scheduled@east")
                && pods.contains("Started@east-node.east")
                && reasons(&control, "Deployment").contains("ScalingReplicaSet@east")
        }),
        "events copied up: pods {} / deployment {}",
        reasons(&control, "Pod"),
        reasons(&control, "Deployment")
    );
    let described = control.ok(&["-n", "shop", "describe", "deployment", "web"]);
    assert!(
        described.contains("ScalingReplicaSet"),
        "kubectl describe upstream shows them: {described}"
    );

    // A placement onto a cluster that does not exist: reported, nothing moves.
    control.ok(&[
        "label",
        "namespace",
        "shop",
        "sluice.dev/cluster=north",
        "--overwrite",
    ]);
    assert!(
        eventually(WITHIN, || condition(&control, "reason")
            == "ClusterNotFound"),
        "reported: {}",
        condition(&control, "reason")
    );
    let events = control.ok(&[
        "-n",
        "shop",
        "get",
        "events",
        "-o",
        "jsonpath={.items[*].reason}",
    ]);
    assert!(events.contains("ClusterNotFound"), "an Event: {events}");
    assert_eq!(available(&east), 2, "still running in east");

    // Move to west, sampling both clusters throughout.
    let stop = Arc::new(AtomicBool::new(false));
    let min_seen = Arc::new(AtomicI64::new(i64::MAX));
    let samples = Arc::new(AtomicUsize::new(0));
    let watcher = {
        let (stop, min_seen, samples) = (stop.clone(), min_seen.clone(), samples.clone());
        let (east, west) = (east.clone(), west.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                let total = available(&east) + available(&west);
                min_seen.fetch_min(total, Ordering::AcqRel);
                samples.fetch_add(1, Ordering::AcqRel);
            }
        })
    };
    control.ok(&[
        "label",
        "namespace",
        "shop",
        "sluice.dev/cluster=west",
        "--overwrite",
    ]);
    let moved = eventually(WITHIN, || {
        !deployment_exists(&east) && available(&west) == 2
    });
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Release);
    watcher.join().unwrap();
    assert!(
        moved,
        "moved to west: east {} west {}",
        available(&east),
        available(&west)
    );
    assert!(samples.load(Ordering::Acquire) > 3, "the watcher sampled");
    assert!(
        eventually(WITHIN, || solo_in(&west) && !solo_in(&east)),
        "the bare pod moved to west"
    );
    assert_eq!(solo_phase(&control), "Running", "and runs there");
    assert!(
        min_seen.load(Ordering::Acquire) >= 2,
        "available replicas in east ∪ west fell to {} during the move",
        min_seen.load(Ordering::Acquire)
    );
    assert!(
        eventually(WITHIN, || condition(&control, "reason") == "Placed"),
        "placed on west: {}",
        condition(&control, "message")
    );
    let labels = control.ok(&[
        "-n",
        "shop",
        "get",
        "deployment",
        "web",
        "-o",
        "jsonpath={.metadata.labels}",
    ]);
    assert!(
        labels.contains("state.sluice.dev/west") && !labels.contains("state.sluice.dev/east"),
        "{labels}"
    );

    // Drift on the physical cluster is reverted: west's copy scaled by hand goes back to
    // what the logical cluster says.
    west.ok(&[
        "-n",
        &downstream_ns(&control),
        "scale",
        "deployment",
        "web",
        "--replicas=5",
    ]);
    let replicas = |k: &Kubectl| {
        k.ok(&[
            "-n",
            &downstream_ns(&control),
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.spec.replicas}",
        ])
    };
    assert!(
        eventually(WITHIN, || replicas(&west) == "2"),
        "drift reverted: {} replicas",
        replicas(&west)
    );

    let counted = load.stop();
    eprintln!(
        "the consumer in west through the placement, the move and the drift: {} ok, {} failed",
        counted.ok, counted.failed
    );
    assert_eq!(counted.failed, 0, "{}", counted.failures);
    assert!(counted.ok >= 300, "only {} answered", counted.ok);

    // Deleted upstream, gone downstream: the Service, then the namespace with the rest.
    control.ok(&["-n", "shop", "delete", "service", "web"]);
    let service_there = |k: &Kubectl| {
        k.ok(&[
            "-n",
            &downstream_ns(&control),
            "get",
            "services",
            "-o",
            "name",
        ])
        .contains("service/web")
    };
    assert!(
        eventually(WITHIN, || !service_there(&west)),
        "the Service deleted upstream is gone from west"
    );
    // (The drift's surplus Pods may still be stopping: their count settles at 2.)
    assert!(
        eventually(WITHIN, || available(&west) == 2),
        "the rest keeps running: {} available",
        available(&west)
    );
    control.ok(&["delete", "namespace", "shop", "--wait=false"]);
    assert!(
        eventually(WITHIN, || !deployment_exists(&west)),
        "the namespace deleted upstream is gone from west"
    );
}

fn app(ns: &str, cluster: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata:
  name: {ns}
  labels: {{sluice.dev/cluster: {cluster}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {ns}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers:
      - name: echo
        image: sluice/echo
        readinessProbe: {{httpGet: {{port: 8080, path: /ready}}, periodSeconds: 1}}
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: {ns}}}
spec:
  selector: {{app: web}}
  ports: [{{name: http, port: 80, targetPort: 8080}}]
"#
    )
}

/// The downstream namespaces of the root logical cluster that hold a Deployment `web`.
fn running(k: &Kubectl) -> Vec<String> {
    let out = k.ok(&[
        "get",
        "deployments",
        "-A",
        "-o",
        "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name} {end}",
    ]);
    let mut v: Vec<String> = out
        .split_whitespace()
        .filter_map(|s| s.strip_suffix("/web"))
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

#[test]
fn drain_moves_everything_off_and_cordon_keeps_it_off_until_uncordon() {
    let (dev, _) = DevUp::start("east,west");
    let control = dev.kubectl_control();
    let east = dev.kubectl("east");
    let west = dev.kubectl("west");
    for ns in ["a", "b", "c"] {
        control.apply_stdin(&app(ns, "east"));
    }
    for ns in ["a", "b", "c"] {
        control.ok(&[
            "-n",
            ns,
            "rollout",
            "status",
            "deployment/web",
            "--timeout=180s",
        ]);
    }
    let mut all = vec![ds(&control, "a"), ds(&control, "b"), ds(&control, "c")];
    all.sort();
    assert_eq!(running(&east), all);
    // Consumers of all three in west, through west's VIPs, through the whole drain.
    let loads: Vec<(&str, Load)> = ["a", "b", "c"]
        .into_iter()
        .map(|ns| {
            let vip = answering_vip(&west, ns);
            (ns, Load::start("http1", &format!("{vip}:80"), 3600, None))
        })
        .collect();

    // An unknown cluster is a clear error.
    let kubeconfig = dev.state.join("control.kubeconfig");
    let out = std::process::Command::new(support::sluice_bin())
        .args(["drain", "north", "--kubeconfig"])
        .arg(&kubeconfig)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cluster \"north\" does not exist"), "{err}");

    let out = std::process::Command::new(support::sluice_bin())
        .args([
            "drain",
            "east",
            "--wait",
            "--timeout",
            "300",
            "--kubeconfig",
        ])
        .arg(&kubeconfig)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "drain failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("cluster east drained: 3 namespace(s) moved"),
        "{stdout}"
    );
    assert!(
        eventually(WITHIN, || running(&east).is_empty()
            && running(&west) == all),
        "everything in west: east {:?} west {:?}",
        running(&east),
        running(&west)
    );
    for (ns, load) in loads {
        let c = load.stop();
        eprintln!(
            "{ns} through west's VIP during the drain: {} ok, {} failed",
            c.ok, c.failed
        );
        assert_eq!(c.failed, 0, "{ns}: {}", c.failures);
        assert!(c.ok >= 200, "{ns}: only {} answered", c.ok);
    }
    let drained = control.ok(&[
        "get",
        "cluster",
        "east",
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Drained\")].reason} {.status.placedNamespaces}",
    ]);
    assert!(
        eventually(WITHIN, || control.ok(&[
            "get",
            "cluster",
            "east",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Drained\")].reason}"
        ]) == "Drained"),
        "{drained}"
    );

    // Cordoned and drained: nothing new lands there; even a pinned namespace runs elsewhere.
    control.apply_stdin(&app("d", "east"));
    assert!(
        eventually(WITHIN, || running(&west).contains(&ds(&control, "d"))),
        "a namespace pinned to a draining cluster runs elsewhere"
    );
    assert!(!running(&east).contains(&ds(&control, "d")));

    let out = std::process::Command::new(support::sluice_bin())
        .args(["uncordon", "east", "--kubeconfig"])
        .arg(&kubeconfig)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        eventually(WITHIN, || running(&east).contains(&ds(&control, "d"))),
        "placed once uncordoned"
    );
}

const TALKER: &str = r#"apiVersion: v1
kind: Namespace
metadata:
  name: talk
  labels: {sluice.dev/cluster: west}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: talker, namespace: talk}
spec:
  replicas: 1
  selector: {matchLabels: {app: talker}}
  template:
    metadata: {labels: {app: talker}}
    spec:
      containers:
      - name: talk
        image: busybox
        command: ["sh", "-c", "echo started; i=0; while [ $i -lt 100000 ]; do i=$((i+1)); echo line $i; sleep 0.2; done"]
      - name: crash
        image: busybox
        command: ["sh", "-c", "echo attempt; sleep 1; exit 3"]
"#;

#[test]
fn kubectl_logs_upstream_come_from_the_physical_cluster() {
    let (dev, _) = DevUp::start("east,west");
    let control = dev.kubectl_control();
    control.apply_stdin(TALKER);
    let talkers = || {
        control
            .ok(&[
                "-n",
                "talk",
                "get",
                "pods",
                "-l",
                "app=talker",
                "-o",
                "name",
            ])
            .lines()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let pod = || talkers().join(" ");
    assert!(
        eventually(WITHIN, || !pod().is_empty()),
        "the pod is mirrored"
    );
    let pod = pod();
    let logs = |args: &[&str]| {
        let mut all = vec!["-n", "talk", "logs", pod.as_str()];
        all.extend_from_slice(args);
        control.run(&all)
    };
    assert!(
        eventually(WITHIN, || {
            let out = logs(&["-c", "talk"]);
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains("line 3")
        }),
        "logs: {:?}",
        logs(&["-c", "talk"])
    );
    let text = |o: std::process::Output| String::from_utf8_lossy(&o.stdout).into_owned();
    let first = text(logs(&["-c", "talk"]));
    assert!(first.starts_with("started\n"), "{first}");
    let tail = text(logs(&["-c", "talk", "--tail=1"]));
    assert_eq!(tail.lines().count(), 1, "{tail}");
    assert!(tail.starts_with("line "), "{tail}");
    // Without -c, kubectl picks the first container.
    assert!(text(logs(&[])).starts_with("started\n"));
    // A previous instance: the crashing container has restarted.
    assert!(
        eventually(WITHIN, || {
            let out = logs(&["-c", "crash", "--previous"]);
            out.status.success() && text(out).contains("attempt")
        }),
        "previous: {:?}",
        logs(&["-c", "crash", "--previous"])
    );
    // -f streams: more lines arrive while it runs.
    let mut follow = control
        .command(&["-n", "talk", "logs", "-f", &pod, "-c", "talk", "--tail=1"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let _ = follow.kill();
    let out = follow.wait_with_output().unwrap();
    let streamed = String::from_utf8_lossy(&out.stdout);
    assert!(
        streamed.lines().count() >= 3,
        "followed lines arrive: {streamed:?}"
    );
    // A Pod made in the logical cluster (`kubectl run`) runs on the cluster of its
    // namespace; its status and logs come from there, and it has no mirror beside it.
    control.ok(&[
        "-n",
        "talk",
        "run",
        "debug",
        "--image=busybox",
        "--restart=Never",
        "--command",
        "--",
        "sh",
        "-c",
        "echo hello from debug; sleep 600",
    ]);
    let phase = || {
        control.ok(&[
            "-n",
            "talk",
            "get",
            "pod",
            "debug",
            "-o",
            "jsonpath={.status.phase}/{.status.podIP}",
        ])
    };
    assert!(
        eventually(WITHIN, || phase().starts_with("Running/127.21.")),
        "runs in west, status upstream: {}",
        phase()
    );
    assert!(
        eventually(WITHIN, || text(
            control.run(&["-n", "talk", "logs", "debug"])
        )
        .contains("hello from debug")),
        "logs: {:?}",
        control.run(&["-n", "talk", "logs", "debug"])
    );
    let west = dev.kubectl("west");
    let down = control.downstream("root", "talk");
    assert!(
        west.ok(&["-n", &down, "get", "pods", "-o", "name"])
            .contains("pod/debug"),
        "its copy runs in west"
    );
    // What west's kubelet recorded about it is told upstream, on it.
    let debug_events = || {
        control.ok(&[
            "-n",
            "talk",
            "get",
            "events",
            "-o",
            "jsonpath={range .items[?(@.involvedObject.name==\"debug\")]}{.reason}@{.source.host} {end}",
        ])
    };
    assert!(
        eventually(WITHIN, || debug_events().contains("Started@west-node.west")),
        "events of the bare pod copied up: {}",
        debug_events()
    );
    let upstream_pods = control.ok(&["-n", "talk", "get", "pods", "-o", "name"]);
    assert_eq!(
        upstream_pods.matches("pod/debug").count(),
        1,
        "one Pod upstream, no mirror beside it: {upstream_pods}"
    );
    control.ok(&[
        "-n",
        "talk",
        "delete",
        "pod",
        "debug",
        "--wait=true",
        "--timeout=120s",
    ]);
    assert!(
        eventually(WITHIN, || !west
            .ok(&["-n", &down, "get", "pods", "-o", "name"])
            .contains("pod/debug")),
        "deleted upstream, gone from west"
    );

    // A mirror is not a pod of this logical cluster: asking for an unknown container
    // reaches the cluster, which says so.
    let out = logs(&["-c", "nope"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("nope"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A mirror is read-only upstream; deleting it deletes the real Pod, which its
    // Deployment replaces (mirrored in turn).
    let refused = control.fails(&["-n", "talk", "label", pod.as_str(), "debugging=yes"]);
    assert!(refused.contains("read-only mirrors"), "{refused}");
    control.ok(&[
        "-n",
        "talk",
        "delete",
        pod.as_str(),
        "--wait=true",
        "--timeout=120s",
    ]);
    assert!(
        eventually(WITHIN, || {
            let now = talkers();
            now.len() == 1 && now[0] != pod
        }),
        "replaced: {:?} (was {pod})",
        talkers()
    );
}

const POLICIES: &str = r#"apiVersion: sluice.dev/v1alpha1
kind: Placement
metadata: {name: spread}
spec:
  namespaceSelector: {matchLabels: {team: spread}}
  locationSelector: {matchLabels: {sluice.dev/local: "true"}}
  mode: Spread
---
apiVersion: sluice.dev/v1alpha1
kind: Placement
metadata: {name: nowhere}
spec:
  namespaceSelector: {matchLabels: {team: lost}}
  locationSelector: {matchLabels: {region: mars}}
---
apiVersion: sluice.dev/v1alpha1
kind: Placement
metadata: {name: broken}
spec:
  namespaceSelector: {matchLabels: {team: broken}}
  locationSelector:
    matchExpressions: [{key: region, operator: Equals, values: [eu]}]
---
apiVersion: v1
kind: Namespace
metadata: {name: wide, labels: {team: spread}}
---
apiVersion: v1
kind: Namespace
metadata: {name: lost, labels: {team: lost}}
---
apiVersion: v1
kind: Namespace
metadata: {name: odd, labels: {team: broken}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: wide}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: echo
        image: sluice/echo
        readinessProbe: {httpGet: {port: 8080, path: /ready}, periodSeconds: 1}
"#;

#[test]
fn placements_spread_replicas_and_report_what_they_cannot_place() {
    let (dev, _) = DevUp::start("east,west");
    let control = dev.kubectl_control();
    // Fields placement acts on are refused when it could not act on them.
    let refused = control
        .command(&["apply", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().expect("stdin").write_all(
                b"apiVersion: sluice.dev/v1alpha1\nkind: Placement\nmetadata: {name: typo}\nspec: {mode: Sprad}\n",
            )?;
            c.wait_with_output()
        })
        .unwrap();
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("spec.mode") && err.contains("Spread"), "{err}");
    let err = control.fails(&[
        "patch",
        "cluster",
        "east",
        "--type=merge",
        "-p",
        r#"{"spec":{"capacity":{"cpu":"lots"}}}"#,
    ]);
    assert!(err.contains("spec.capacity.cpu"), "{err}");
    let (east, west) = (dev.kubectl("east"), dev.kubectl("west"));
    control.apply_stdin(POLICIES);
    control.ok(&[
        "-n",
        "wide",
        "rollout",
        "status",
        "deployment/web",
        "--timeout=180s",
    ]);
    let replicas = |k: &Kubectl| {
        let out = k.run(&[
            "-n",
            &ds(&control, "wide"),
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.spec.replicas}",
            "--ignore-not-found",
        ]);
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<i64>()
            .unwrap_or(0)
    };
    assert_eq!((replicas(&east), replicas(&west)), (2, 1), "split 2 + 1");
    let up = || {
        control.ok(&[
            "-n",
            "wide",
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.spec.replicas} {.status.availableReplicas} {.status.replicas}",
        ])
    };
    assert!(
        eventually(WITHIN, || up() == "3 3 3"),
        "spec untouched upstream, status summed: {}",
        up()
    );
    // Scaling upstream re-splits.
    control.ok(&["-n", "wide", "scale", "deployment/web", "--replicas=4"]);
    assert!(
        eventually(WITHIN, || (replicas(&east), replicas(&west)) == (2, 2)),
        "re-split: {} + {}",
        replicas(&east),
        replicas(&west)
    );
    control.ok(&[
        "-n",
        "wide",
        "rollout",
        "status",
        "deployment/web",
        "--timeout=180s",
    ]);

    let placement = |name: &str| {
        control.ok(&[
            "get",
            "placement",
            name,
            "-o",
            "jsonpath={.status.conditions[0].reason}|{.status.conditions[0].message}|{.status.selectedClusters}",
        ])
    };
    assert!(
        eventually(WITHIN, || placement("spread").starts_with("Ready|")),
        "{}",
        placement("spread")
    );
    assert!(placement("spread").contains("east") && placement("spread").contains("west"));
    assert!(
        eventually(WITHIN, || placement("nowhere")
            .starts_with("NoClusterMatches|")),
        "{}",
        placement("nowhere")
    );
    assert!(
        eventually(WITHIN, || placement("broken")
            .starts_with("InvalidSelector|")),
        "{}",
        placement("broken")
    );
    assert!(
        placement("broken").contains("Equals"),
        "{}",
        placement("broken")
    );
    let placed = |ns: &str| {
        control.ok(&[
            "get",
            "namespace",
            ns,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Placed\")].reason}",
        ])
    };
    assert!(
        eventually(WITHIN, || placed("lost") == "NoClusterMatches"),
        "{}",
        placed("lost")
    );
    assert!(
        eventually(WITHIN, || placed("odd") == "InvalidSelector"),
        "{}",
        placed("odd")
    );
    let events = control.ok(&[
        "-n",
        "lost",
        "get",
        "events",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(
        events.contains("nowhere"),
        "an Event names the placement: {events}"
    );
}

/// The syncer of `cluster` in `dev`'s clusterset: its pid.
fn syncer_pid(dev: &DevUp, cluster: &str) -> Option<u32> {
    let state = dev.state.display().to_string();
    support::processes_with_pid(&format!("--cluster {cluster} --downstream"))
        .into_iter()
        .find(|(_, cmd)| cmd.contains(" syncer ") && cmd.contains(&state))
        .map(|(pid, _)| pid)
}

/// A syncer for `cluster` started by the test, as dev up starts one; killed on drop.
struct Syncer(std::process::Child);

impl Syncer {
    fn start(dev: &DevUp, cluster: &str, index: u8) -> Self {
        let ip = format!("127.{}.0.1:0", 20 + index);
        let child = std::process::Command::new(support::sluice_bin())
            .arg("syncer")
            .arg("--control")
            .arg(
                dev.state
                    .join("syncers")
                    .join(format!("{cluster}.kubeconfig")),
            )
            .args(["--cluster", cluster])
            .arg("--downstream")
            .arg(
                dev.state
                    .join("clusters")
                    .join(format!("{cluster}.kubeconfig")),
            )
            .args(["--admin", &ip, "--logs", &ip])
            .env("SLUICE_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        Self(child)
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_move_survives_a_killed_syncer_and_a_silent_cluster_loses_its_workloads() {
    let (dev, _) = DevUp::start("east,west");
    let control = dev.kubectl_control();
    let (east, west) = (dev.kubectl("east"), dev.kubectl("west"));
    control.apply_stdin(APP);
    control.ok(&[
        "-n",
        "shop",
        "rollout",
        "status",
        "deployment/web",
        "--timeout=180s",
    ]);

    // West's syncer dies (SIGKILL) as the move to west starts: the move waits, east keeps
    // serving, and once a syncer runs again the move completes, once.
    kill9(syncer_pid(&dev, "west").expect("west's syncer"));
    control.ok(&[
        "label",
        "namespace",
        "shop",
        "sluice.dev/cluster=west",
        "--overwrite",
    ]);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        available(&east),
        2,
        "east keeps running while west cannot take over"
    );
    let _west_syncer = Syncer::start(&dev, "west", 1);
    assert!(
        eventually(WITHIN, || !deployment_exists(&east)
            && available(&west) == 2),
        "the move completed: east {} west {}",
        available(&east),
        available(&west)
    );
    assert_eq!(
        running(&west),
        vec![ds(&control, "shop")],
        "one copy in west"
    );

    // East's syncer stops: east becomes NotReady and what a Placement put there moves.
    control.apply_stdin(
        r#"apiVersion: sluice.dev/v1alpha1
kind: Placement
metadata: {name: anywhere}
spec:
  namespaceSelector: {matchLabels: {team: any}}
  locationSelector: {matchLabels: {sluice.dev/local: "true"}}
"#,
    );
    control.apply_stdin(&app("roam", "x").replace("sluice.dev/cluster: x", "team: any"));
    control.ok(&[
        "-n",
        "roam",
        "rollout",
        "status",
        "deployment/web",
        "--timeout=180s",
    ]);
    assert_eq!(
        running(&east),
        vec![ds(&control, "roam")],
        "the least loaded cluster"
    );
    kill9(syncer_pid(&dev, "east").expect("east's syncer"));
    let ready = || {
        control.ok(&[
            "get",
            "cluster",
            "east",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].reason}",
        ])
    };
    assert!(
        eventually(WITHIN, || ready() == "SyncerHeartbeatMissing"),
        "east NotReady: {}",
        ready()
    );
    assert!(
        eventually(WITHIN, || running(&west).contains(&ds(&control, "roam"))),
        "roam moved to west"
    );
    control.ok(&[
        "-n",
        "roam",
        "rollout",
        "status",
        "deployment/web",
        "--timeout=180s",
    ]);
    // The mirrors of the Pods east ran are not left upstream by its dead syncer.
    let mirrors_of = |cluster: &str| {
        control
            .ok(&[
                "-n",
                "roam",
                "get",
                "pods",
                "-l",
                &format!("sluice.dev/cluster={cluster}"),
                "-o",
                "name",
            ])
            .lines()
            .count()
    };
    assert!(
        eventually(WITHIN, || mirrors_of("east") == 0
            && mirrors_of("west") == 1),
        "mirrors: east {} west {}",
        mirrors_of("east"),
        mirrors_of("west")
    );
    // When east's syncer returns, it removes what no longer belongs there.
    let _east_syncer = Syncer::start(&dev, "east", 0);
    assert!(
        eventually(WITHIN, || running(&east).is_empty()),
        "leftovers removed: {:?}",
        running(&east)
    );
    assert!(eventually(WITHIN, || ready() == "SyncerHeartbeat"));
}

fn capped(ns: &str, replicas: u32) -> String {
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata: {{name: {ns}, labels: {{team: cap}}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {ns}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers:
      - name: echo
        image: sluice/echo
        resources: {{requests: {{cpu: 100m, memory: 16Mi}}}}
        readinessProbe: {{httpGet: {{port: 8080, path: /ready}}, periodSeconds: 1}}
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: {ns}}}
spec:
  selector: {{app: web}}
  ports: [{{name: http, port: 80, targetPort: 8080}}]
"#
    )
}

#[test]
fn capacity_decides_where_namespaces_go_and_growth_spills_over() {
    let (dev, _) = DevUp::start("east,west");
    let control = dev.kubectl_control();
    let (east, west) = (dev.kubectl("east"), dev.kubectl("west"));
    control.ok(&[
        "patch",
        "cluster",
        "east",
        "--type=merge",
        "-p",
        r#"{"spec":{"capacity":{"pods":3}}}"#,
    ]);
    control.ok(&[
        "patch",
        "cluster",
        "west",
        "--type=merge",
        "-p",
        r#"{"spec":{"capacity":{"pods":5,"cpu":"2"}}}"#,
    ]);
    control.apply_stdin(
        r#"apiVersion: sluice.dev/v1alpha1
kind: Placement
metadata: {name: by-capacity}
spec:
  namespaceSelector: {matchLabels: {team: cap}}
  locationSelector: {matchLabels: {sluice.dev/local: "true"}}
"#,
    );
    let replicas_in = |k: &Kubectl, ns: &str| {
        let out = k.run(&[
            "-n",
            &ds(k, ns),
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.spec.replicas}",
            "--ignore-not-found",
        ]);
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<i64>()
            .unwrap_or(0)
    };
    control.apply_stdin(&capped("small", 2));
    control.ok(&[
        "-n",
        "small",
        "rollout",
        "status",
        "deployment/web",
        "--timeout=180s",
    ]);
    assert_eq!(
        running(&east),
        vec![ds(&control, "small")],
        "small fits the least loaded: east"
    );
    // Consumers of small in west, through west's VIP, for the rest of the test: what else
    // is admitted, refused or spilled costs them nothing.
    let small_vip = || {
        west.ok(&[
            "-n",
            &ds(&control, "small"),
            "get",
            "serviceimport",
            "web",
            "-o",
            "jsonpath={.spec.ips[0]}",
        ])
    };
    assert!(
        eventually(WITHIN, || !small_vip().trim().is_empty()),
        "small imported in west"
    );
    let vip = small_vip();
    assert!(
        eventually(WITHIN, || support::http_get(vip.trim(), 80, "/").is_some()),
        "small answers through west's VIP"
    );
    let load = Load::start("http1", &format!("{}:80", vip.trim()), 3600, None);
    // 4 pods do not fit beside small's 2 on east (3): west.
    control.apply_stdin(&capped("big", 4));
    control.ok(&[
        "-n",
        "big",
        "rollout",
        "status",
        "deployment/web",
        "--timeout=180s",
    ]);
    assert_eq!(replicas_in(&west, "big"), 4);
    assert_eq!(replicas_in(&east, "big"), 0);
    let allocated = || {
        control.ok(&[
            "get",
            "cluster",
            "west",
            "-o",
            "jsonpath={.status.allocated.pods} {.status.allocated.cpu}",
        ])
    };
    assert!(
        eventually(WITHIN, || allocated() == "4 400m"),
        "allocated: {}",
        allocated()
    );
    // 20 fit nowhere: Pending, saying why.
    control.apply_stdin(&capped("huge", 20));
    let reason = |ns: &str| {
        control.ok(&[
            "get",
            "namespace",
            ns,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Placed\")].reason}",
        ])
    };
    assert!(
        eventually(WITHIN, || reason("huge") == "InsufficientCapacity"),
        "{}",
        reason("huge")
    );
    // (Its namespace was placed while still empty; what was copied down meanwhile goes.)
    assert!(
        eventually(WITHIN, || !running(&east).contains(&ds(&control, "huge"))
            && !running(&west).contains(&ds(&control, "huge"))),
        "nothing of it runs"
    );
    // small grows past east's capacity: east keeps what fits, the excess spills to west.
    control.ok(&["-n", "small", "scale", "deployment/web", "--replicas=4"]);
    assert!(
        eventually(WITHIN, || replicas_in(&east, "small") == 3
            && replicas_in(&west, "small") == 1),
        "spilled: east {} west {}",
        replicas_in(&east, "small"),
        replicas_in(&west, "small")
    );
    control.ok(&[
        "-n",
        "small",
        "rollout",
        "status",
        "deployment/web",
        "--timeout=180s",
    ]);
    let up = || {
        control.ok(&[
            "-n",
            "small",
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.status.availableReplicas}",
        ])
    };
    // (east may run a 4th pod for a moment: its syncer sees the scale before its share.)
    assert!(
        eventually(WITHIN, || up() == "4"),
        "status sums both clusters: {}",
        up()
    );
    let c = load.stop();
    eprintln!(
        "small through west's VIP while others were placed and it spilled: {} ok, {} failed",
        c.ok, c.failed
    );
    assert_eq!(c.failed, 0, "{}", c.failures);
    assert!(c.ok >= 200, "only {} answered", c.ok);
}

/// The MCS controller of `dev`'s clusterset, stopped (SIGSTOP) while this lives and resumed
/// (SIGCONT) when it is dropped, whatever the test's outcome.
struct FrozenMcs(u32);

impl FrozenMcs {
    fn freeze(dev: &DevUp) -> Self {
        let state = dev.state.display().to_string();
        let pid = support::processes_with_pid(" mcs --control ")
            .into_iter()
            .find(|(_, cmd)| cmd.contains(&state))
            .map(|(pid, _)| pid)
            .expect("dev up runs an MCS controller");
        signal(pid, "-STOP");
        Self(pid)
    }
}

impl Drop for FrozenMcs {
    fn drop(&mut self) {
        signal(self.0, "-CONT");
    }
}

fn signal(pid: u32, sig: &str) {
    let _ = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status();
}

/// Ready endpoints of `web` from `source` in `k`'s cluster's MCS imports.
#[test]
fn a_move_waits_until_every_cluster_imports_the_new_endpoints() {
    let (dev, _) = DevUp::start("east,west,north");
    let control = dev.kubectl_control();
    let east = dev.kubectl("east");
    let west = dev.kubectl("west");
    let north = dev.kubectl("north");
    control.apply_stdin(APP);
    control.ok(&[
        "-n",
        "shop",
        "rollout",
        "status",
        "deployment/web",
        "--timeout=180s",
    ]);
    // Every cluster holds the namespace (north runs nothing of it: imports only), each
    // imports east's two endpoints, and each says so upstream on the namespace.
    let reports = |control: &Kubectl| {
        control.ok(&[
            "get",
            "namespace",
            "shop",
            "-o",
            "go-template={{range $k, $v := .metadata.annotations}}{{$k}}={{$v}}\n{{end}}",
        ])
    };
    assert!(
        eventually(WITHIN, || [&east, &west, &north]
            .iter()
            .all(|k| imported_ready(k, "east") == 2)),
        "every cluster imports east's endpoints"
    );
    assert!(
        eventually(WITHIN, || {
            let r = reports(&control);
            ["east", "west", "north"].iter().all(|c| {
                r.contains(&format!(
                    r#"imports.sluice.dev/{c}={{"web":{{"east":{{"ready":2}}}}}}"#
                ))
            })
        }),
        "every cluster reports its imports upstream: {}",
        reports(&control)
    );
    assert!(!deployment_exists(&north), "north holds imports only");

    // With the MCS controller stopped, B becomes available but nobody imports its
    // endpoints: A stays, and the namespace says what the move waits for.
    let frozen = FrozenMcs::freeze(&dev);
    control.ok(&[
        "label",
        "namespace",
        "shop",
        "sluice.dev/cluster=west",
        "--overwrite",
    ]);
    assert!(
        eventually(WITHIN, || available(&west) == 2),
        "the app runs in west"
    );
    assert!(
        eventually(WITHIN, || condition(&control, "message")
            .contains("Ready in the imports of")),
        "the move waits for the imports: {}",
        condition(&control, "message")
    );
    // Placement passes run every few seconds: several of them leave A in place.
    std::thread::sleep(Duration::from_secs(8));
    assert_eq!(
        available(&east),
        2,
        "east is not touched while west is unseen"
    );
    assert_eq!(condition(&control, "reason"), "Moving");

    // Imports resume: every cluster sees west's endpoints; then east's traffic weight steps
    // down in north's imports, then to 0 and draining, and only then does east go.
    drop(frozen);
    let mut seen: Vec<String> = Vec::new();
    let deadline = std::time::Instant::now() + WITHIN;
    while deployment_exists(&east) && std::time::Instant::now() < deadline {
        let state = north.ok(&[
            "-n",
            &downstream_ns(&control),
            "get",
            "endpointslices",
            "-l",
            "multicluster.kubernetes.io/service-name=web,multicluster.kubernetes.io/source-cluster=east",
            "-o",
            r"jsonpath={range .items[*]}{.metadata.annotations.sluice\.dev/weight}/{.metadata.annotations.sluice\.dev/draining}{end}",
        ]);
        if seen.last() != Some(&state) {
            seen.push(state);
        }
    }
    assert!(!deployment_exists(&east), "the move completes: {seen:?}");
    assert!(
        seen.iter().any(|s| s
            .split('/')
            .next()
            .and_then(|w| w.parse::<u32>().ok())
            .is_some_and(|w| w > 0 && w < 100)),
        "east's weight stepped down while it still ran: {seen:?}"
    );
    // Weight 0 and draining last only until every cluster's imports show it (milliseconds
    // here): the namespace's Events tell the whole sequence.
    let shifts = control.ok(&[
        "-n",
        "shop",
        "get",
        "events",
        "--field-selector",
        "involvedObject.kind=Namespace,reason=Shifting",
        "-o",
        "jsonpath={range .items[*]}{.message}|{end}",
    ]);
    for step in ["(weight 80)", "(weight 20)", "(weight 0, draining)"] {
        assert!(shifts.contains(step), "{step} in the Events: {shifts}");
    }
    for k in [&east, &west, &north] {
        assert_eq!(imported_ready(k, "west"), 2, "west imported everywhere");
    }
    assert!(
        eventually(WITHIN, || condition(&control, "status") == "True"),
        "placed: {}",
        condition(&control, "message")
    );
    // East keeps the namespace for its imports.
    assert!(
        east.ok(&["get", "namespace", &downstream_ns(&control), "-o", "name"])
            .contains(&downstream_ns(&control)),
        "east keeps an imports-only namespace"
    );
}

/// `shop` pinned to east, a Placement that sets its traffic shift to `shift` (its cluster
/// selector matches nothing: the label places), and the `web` app: `replicas` echo pods
/// whose container gets the extra lines `container`, behind a Service with `ports`.
fn shifted_app(shift: &str, replicas: u32, container: &str, ports: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata:
  name: shop
  labels: {{sluice.dev/cluster: east, team: shop}}
---
apiVersion: sluice.dev/v1alpha1
kind: Placement
metadata: {{name: shop-shift}}
spec:
  namespaceSelector: {{matchLabels: {{team: shop}}}}
  locationSelector: {{matchLabels: {{region: nowhere}}}}
  trafficShift: {shift}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: shop}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers:
      - name: echo
        image: sluice/echo
        readinessProbe: {{httpGet: {{port: http, path: /ready}}, periodSeconds: 1}}
{container}
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: shop}}
spec:
  selector: {{app: web}}
  ports:
{ports}
"#
    )
}

/// The app with a TCP echo port besides HTTP; the old cluster may drain for 10 minutes.
fn streaming_app() -> String {
    shifted_app(
        "{durationSeconds: 1, steps: 1, maxDrainSeconds: 600}",
        1,
        "        ports: [{name: http, containerPort: 8080}, {name: stream, containerPort: 9000}]",
        "  - {name: http, port: 80, targetPort: http}\n  - {name: tcp-stream, port: 9000, targetPort: stream}",
    )
}

/// A TCP connection through a cluster's clusterset VIP, echoing what it is sent.
struct Stream(std::net::TcpStream);

impl Stream {
    fn open(k: &Kubectl) -> Stream {
        let vip = vip_of_web(k);
        let s = std::net::TcpStream::connect((vip.trim(), 9000)).expect("connect to the VIP");
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut s = Stream(s);
        assert!(s.echoes(), "the stream echoes");
        s
    }

    /// One round trip; false once the connection is broken.
    fn echoes(&mut self) -> bool {
        use std::io::{Read, Write};
        let mut buf = [0u8; 5];
        self.0.write_all(b"ping\n").is_ok()
            && self.0.read_exact(&mut buf).is_ok()
            && &buf == b"ping\n"
    }
}

/// The namespace's `Drained` condition field `field` (jsonpath).
fn drained(control: &Kubectl, field: &str) -> String {
    control.ok(&[
        "get",
        "namespace",
        "shop",
        "-o",
        &format!("jsonpath={{.status.conditions[?(@.type==\"Drained\")].{field}}}"),
    ])
}

#[test]
fn a_move_holds_the_old_cluster_while_a_connection_to_it_lives_and_says_what_it_cut() {
    let (dev, _) = DevUp::start("east,west");
    let control = dev.kubectl_control();
    let east = dev.kubectl("east");
    let west = dev.kubectl("west");
    control.apply_stdin(&streaming_app());
    assert!(
        eventually(WITHIN, || available(&east) == 1
            && imported_ready(&west, "east") == 1),
        "the app runs in east and west imports it"
    );
    // A long-lived connection from west, through west's VIP, to east's pod.
    let mut stream = Stream::open(&west);
    control.ok(&[
        "label",
        "namespace",
        "shop",
        "sluice.dev/cluster=west",
        "--overwrite",
    ]);
    // West runs the app and takes the traffic; east is draining, held by the connection
    // west's dataplane reports (visible upstream in west's import report).
    let report = |control: &Kubectl| {
        control.ok(&[
            "get",
            "namespace",
            "shop",
            "-o",
            r"jsonpath={.metadata.annotations.imports\.sluice\.dev/west}",
        ])
    };
    assert!(
        eventually(WITHIN, || report(&control).contains(
            r#""east":{"ready":1,"weight":0,"draining":true,"active":1}"#
        )),
        "west reports its live connection to draining east: {}",
        report(&control)
    );
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(available(&east), 1, "east stays while the connection lives");
    assert_eq!(condition(&control, "reason"), "Shifting");
    assert!(stream.echoes(), "the connection still carries data");
    // The connection ends: east goes, and the namespace says nothing was cut.
    drop(stream);
    assert!(
        eventually(WITHIN, || !deployment_exists(&east)),
        "east leaves once the connection is closed"
    );
    assert!(
        eventually(WITHIN, || drained(&control, "reason") == "Drained"),
        "drained: {}",
        drained(&control, "message")
    );
    assert!(
        drained(&control, "message").contains("east left with no live connection"),
        "{}",
        drained(&control, "message")
    );

    // Back to east, with at most 3 s for connections to drain: the one left open is cut,
    // and the namespace and an Event say so.
    control.ok(&[
        "patch",
        "placement",
        "shop-shift",
        "--type=merge",
        "-p",
        r#"{"spec":{"trafficShift":{"maxDrainSeconds":3}}}"#,
    ]);
    let stream = Stream::open(&west);
    control.ok(&[
        "label",
        "namespace",
        "shop",
        "sluice.dev/cluster=east",
        "--overwrite",
    ]);
    assert!(
        eventually(WITHIN, || drained(&control, "reason") == "ConnectionsCut"),
        "the cut is reported: {}",
        drained(&control, "message")
    );
    let message = drained(&control, "message");
    assert!(
        message.contains("west left after 3 s with 1 live connections or requests to it cut"),
        "{message}"
    );
    assert_eq!(drained(&control, "status"), "False");
    let events = control.ok(&[
        "-n",
        "shop",
        "get",
        "events",
        "--field-selector",
        "involvedObject.kind=Namespace,reason=ConnectionsCut",
        "-o",
        "jsonpath={range .items[*]}{.type}:{.message}|{end}",
    ]);
    assert!(events.contains("Warning:west left after 3 s"), "{events}");
    drop(stream);
}

/// The app, whose pods answer 5 % of requests with errors in west only; the shift is slow
/// enough to judge west while east still serves.
fn faulty_app() -> String {
    shifted_app(
        "{durationSeconds: 30, steps: 10, rollback: {minRequests: 50}}",
        2,
        "        ports: [{name: http, containerPort: 8080}]\n        env:\n        - {name: ECHO_ERROR_PERCENT, value: \"5\"}\n        - {name: ECHO_ERROR_CLUSTER, value: west}",
        "  - {name: http, port: 80, targetPort: http}",
    )
}

#[test]
fn a_move_to_a_cluster_that_answers_with_errors_rolls_back_by_itself() {
    let (dev, _) = DevUp::start("east,west");
    let control = dev.kubectl_control();
    let east = dev.kubectl("east");
    let west = dev.kubectl("west");
    control.apply_stdin(&faulty_app());
    assert!(
        eventually(WITHIN, || available(&east) == 2
            && imported_ready(&west, "east") == 2),
        "the app runs in east and west imports it"
    );
    // Consumers in west, through west's VIP, all along.
    let vip = vip_of_web(&west);
    let mut load = std::process::Command::new(support::sluice_bin())
        .args(["loadgen", "--protocol", "http1", "--rate", "100"])
        .args([
            "--duration",
            "600",
            "--target",
            &format!("{}:80", vip.trim()),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    control.ok(&[
        "label",
        "namespace",
        "shop",
        "sluice.dev/cluster=west",
        "--overwrite",
    ]);
    // West runs the app and takes traffic; its errors are seen while east still serves, and
    // the move fails by itself, with the figures.
    let reason = |control: &Kubectl| condition(control, "reason");
    assert!(
        eventually(WITHIN, || reason(&control) == "MoveFailed"),
        "rolled back: {} {}",
        reason(&control),
        condition(&control, "message")
    );
    let message = condition(&control, "message");
    eprintln!("verdict: {message}");
    assert!(
        message.contains("the move to west was rolled back") && message.contains("% errors of"),
        "{message}"
    );
    let verdict: serde_json::Value = serde_json::from_str(&control.ok(&[
        "get",
        "namespace",
        "shop",
        "-o",
        r"jsonpath={.metadata.annotations.moves\.sluice\.dev/failed}",
    ]))
    .unwrap();
    assert!(
        verdict["new"]["requests"].as_u64().unwrap() >= 50,
        "{verdict}"
    );
    assert!(verdict["new"]["errors"].as_u64().unwrap() > 0, "{verdict}");
    assert_eq!(verdict["from"], serde_json::json!(["east"]));
    // East stays; west goes (its traffic shifted back off it); the failure stays said.
    assert!(
        eventually(WITHIN, || !deployment_exists(&west)),
        "west's copy is removed"
    );
    assert_eq!(available(&east), 2, "east kept serving");
    assert!(
        eventually(WITHIN, || reason(&control) == "MoveFailed"),
        "{}",
        condition(&control, "message")
    );
    // A new target clears the verdict: back to east by its label, placed again.
    control.ok(&[
        "label",
        "namespace",
        "shop",
        "sluice.dev/cluster=east",
        "--overwrite",
    ]);
    assert!(
        eventually(WITHIN, || condition(&control, "status") == "True"),
        "{}",
        condition(&control, "message")
    );
    assert!(
        !control
            .ok(&[
                "get",
                "namespace",
                "shop",
                "-o",
                "jsonpath={.metadata.annotations}"
            ])
            .contains("moves.sluice.dev/failed"),
        "the verdict is cleared"
    );
    let _ = load.kill();
    let _ = load.wait();
}
