#![allow(clippy::unwrap_used)]
//! Stateful apps through the logical cluster (issue 38): the claims a cluster makes for a
//! StatefulSet's claim templates show up in the logical cluster as read-only mirrors with
//! their class, volume and status there, and go when the cluster deletes them; a claim
//! applied to the logical cluster reports the status it has where it is bound; after a
//! move the mirrors of the StatefulSet's Pod and claim are the new cluster's. A claim's
//! data follows a move: every record the app wrote on the old cluster, up to the one it
//! wrote when stopped, is read on the new one, with the same checksum; its clients,
//! through the clusterset VIP, see no failure during the write pause. A claim on shared
//! storage is the same data on every cluster and is never copied.

use crate::support;

use std::time::Duration;

use support::clusterset::{Load, Restarted, answering_vip};
use support::{DevUp, eventually};

const APP: &str = r#"apiVersion: v1
kind: Namespace
metadata: {name: shop, labels: {sluice.dev/cluster: east}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: notes, namespace: shop}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 10Mi}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: writer, namespace: shop}
spec:
  replicas: 1
  strategy: {type: Recreate}
  selector: {matchLabels: {app: writer}}
  template:
    metadata: {labels: {app: writer}}
    spec:
      containers:
      - name: main
        image: busybox
        command: ["sh", "-c", "echo start >> /data/log; exec sleep 3600"]
        volumeMounts: [{name: data, mountPath: /data}]
      volumes: [{name: data, persistentVolumeClaim: {claimName: notes}}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: shop}
spec:
  serviceName: db
  replicas: 2
  selector: {matchLabels: {app: db}}
  persistentVolumeClaimRetentionPolicy: {whenScaled: Delete}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers:
      - name: main
        image: busybox
        command: ["sh", "-c", "echo $HOSTNAME >> /data/id; exec sleep 3600"]
        volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 10Mi}}
"#;

#[test]
fn claims_show_in_the_logical_cluster_where_they_are_bound() {
    let (mut dev, _) = DevUp::start("east,west");
    let k = dev.kubectl_control();
    k.apply_stdin(APP);
    let claims = || {
        k.ok(&[
            "-n",
            "shop",
            "get",
            "pvc",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.status.phase}/{.metadata.labels.sluice\\.dev/cluster}/{.status.capacity.storage} {end}",
        ])
        .trim()
        .to_string()
    };
    // The claim applied upstream reports its status there; so do the StatefulSet's, one per
    // ordinal, which the logical cluster made from its claim template as a cluster would
    // (east's controller found them and made none of its own: nothing is mirrored).
    assert!(
        eventually(Duration::from_secs(90), || claims()
            == "data-db-0=Bound//10Mi data-db-1=Bound//10Mi notes=Bound//10Mi"),
        "{}",
        claims()
    );
    let labels = k.ok(&[
        "-n",
        "shop",
        "get",
        "pvc",
        "data-db-0",
        "-o",
        "jsonpath={.metadata.labels}",
    ]);
    assert!(labels.contains(r#""app":"db""#), "{labels}");
    // Pods stay read-only mirrors: the cluster's syncer writes them, nobody else.
    let edit = k.run(&["-n", "shop", "label", "pod", "db-0", "x=y"]);
    assert!(!edit.status.success());
    let said = String::from_utf8_lossy(&edit.stderr);
    assert!(
        said.contains("pods labelled sluice.dev/cluster are read-only mirrors"),
        "{said}"
    );
    // Scaled down with whenScaled: Delete, db-1's claim goes once its Pod has.
    k.ok(&["-n", "shop", "scale", "sts", "db", "--replicas=1"]);
    assert!(
        eventually(Duration::from_secs(90), || claims()
            == "data-db-0=Bound//10Mi notes=Bound//10Mi"),
        "{}",
        claims()
    );
    // Moved to west, db-0 takes its claim's data along.
    k.ok(&[
        "label",
        "namespace",
        "shop",
        "sluice.dev/cluster=west",
        "--overwrite",
    ]);
    // While db-0 moves it is on neither cluster for a moment: no mirror at all.
    let pod = || {
        let out = k.run(&[
            "-n",
            "shop",
            "get",
            "pod",
            "db-0",
            "-o",
            "jsonpath={.metadata.labels.sluice\\.dev/cluster} {.status.phase}",
        ]);
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    assert!(
        eventually(Duration::from_secs(120), || pod() == "west Running"),
        "{}",
        pod()
    );
    let ids = || k.ok(&["-n", "shop", "exec", "db-0", "--", "cat", "/data/id"]);
    assert!(
        eventually(Duration::from_secs(30), || ids().lines().count() == 2),
        "db-0 started on west without east's record: {}",
        ids()
    );
    assert_eq!(ids(), "db-0\ndb-0\n");
    assert!(dev.stop());
}

const WRITER: &str = r#"apiVersion: v1
kind: Namespace
metadata: {name: notes, labels: {sluice.dev/cluster: east}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: journal, namespace: notes}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 50Mi}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: writer, namespace: notes}
spec:
  replicas: 1
  strategy: {type: Recreate}
  selector: {matchLabels: {app: writer}}
  template:
    metadata: {labels: {app: writer}}
    spec:
      terminationGracePeriodSeconds: 10
      containers:
      - name: main
        image: busybox
        # One numbered record every 20 ms, each with the cluster and the time; a record
        # when stopped (the app flushing on SIGTERM); a 4 MiB blob written once.
        command:
        - sh
        - -c
        - |
          cd /data
          [ -f blob ] || head -c 4194304 /dev/urandom > blob
          i=$(cat log 2>/dev/null | wc -l)
          trap 'i=$((i+1)); echo "$i $SLUICE_CLUSTER stopped $(date +%s%N)" >> log; exit 0' TERM
          while :; do i=$((i+1)); echo "$i $SLUICE_CLUSTER $(date +%s%N)" >> log; sleep 0.02; done
        volumeMounts: [{name: data, mountPath: /data}]
      # What the app's clients talk to: it stops and starts with the writer.
      - name: echo
        image: sluice/echo
        ports: [{name: http, containerPort: 8080}]
        readinessProbe: {httpGet: {port: http, path: /ready}, periodSeconds: 1}
      volumes: [{name: data, persistentVolumeClaim: {claimName: journal}}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: notes}
spec:
  selector: {app: writer}
  ports: [{name: http, port: 80, targetPort: 8080}]
"#;

/// The Running Pod of `app` in namespace `ns` on `cluster`, through the logical cluster's
/// mirrors.
fn running_on(k: &support::Kubectl, ns: &str, app: &str, cluster: &str) -> Option<String> {
    let out = k.run(&[
        "-n",
        ns,
        "get",
        "pod",
        "-l",
        &format!("app={app},sluice.dev/cluster={cluster}"),
        "--field-selector=status.phase=Running",
        "-o",
        "jsonpath={.items[0].metadata.name}",
    ]);
    let name = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !name.is_empty()).then_some(name)
}

/// The writer's Pod on `cluster`.
fn writer_on(k: &support::Kubectl, cluster: &str) -> Option<String> {
    running_on(k, "notes", "writer", cluster)
}

/// The `/metrics` text of a dataplane's admin endpoint.
fn admin_metrics(admin: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(admin).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

fn in_writer(k: &support::Kubectl, pod: &str, script: &str) -> String {
    k.ok(&["-n", "notes", "exec", pod, "--", "sh", "-c", script])
}

#[test]
fn a_claims_data_follows_a_move_checked_record_by_record() {
    let (mut dev, _) = DevUp::start("east,west");
    let k = dev.kubectl_control();
    k.apply_stdin(WRITER);
    assert!(
        eventually(Duration::from_secs(90), || writer_on(&k, "east").is_some()),
        "the writer never ran on east"
    );
    let east = writer_on(&k, "east").unwrap();
    // Records pile up; the blob's checksum where it was written.
    assert!(eventually(Duration::from_secs(30), || {
        in_writer(&k, &east, "wc -l < /data/log")
            .trim()
            .parse::<u64>()
            .is_ok_and(|n| n > 50)
    }));
    // A consumer on west, through west's clusterset VIP of the app's Service, from before
    // the move to its end: during the write pause its requests are held, not failed.
    let vip = answering_vip(&dev.kubectl("west"), "notes");
    let load = Load::start_waiting("http1", &format!("{vip}:80"), 3600, None, 30);
    let blob = in_writer(&k, &east, "sha256sum /data/blob");
    let before: u64 = in_writer(&k, &east, "wc -l < /data/log")
        .trim()
        .parse()
        .unwrap();

    k.ok(&[
        "label",
        "namespace",
        "notes",
        "sluice.dev/cluster=west",
        "--overwrite",
    ]);
    assert!(
        eventually(Duration::from_secs(180), || writer_on(&k, "west").is_some()
            && writer_on(&k, "east").is_none()),
        "the writer never moved: {}",
        k.ok(&["get", "ns", "notes", "-o", "jsonpath={.status.conditions}"])
    );
    let west = writer_on(&k, "west").unwrap();
    // Give west's writer a few records of its own, and the consumer a few answers.
    std::thread::sleep(Duration::from_secs(2));
    let counted = load.stop();
    println!(
        "consumer through west's VIP: {} ok, {} failed {}",
        counted.ok, counted.failed, counted.failures
    );
    assert_eq!(counted.failed, 0, "{}", counted.failures);
    assert!(counted.ok > 100, "{counted:?}");
    // West's dataplane held the requests that came while no endpoint served.
    let metrics = admin_metrics("127.21.0.1:15000");
    let held: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("sluice_proxy_holds_total"))
        .collect();
    println!("west's dataplane: {held:?}");
    assert!(
        held.iter().any(|l| l.contains("outcome=\"served\"")),
        "no request was held: {held:?}"
    );
    let log = in_writer(&k, &west, "cat /data/log");
    let lines: Vec<Vec<&str>> = log.lines().map(|l| l.split(' ').collect()).collect();
    // Numbered without a gap from 1: nothing east wrote was lost, west went on from there.
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(
            l[0],
            (i + 1).to_string(),
            "record {} of {}: {l:?}",
            i + 1,
            lines.len()
        );
    }
    let stopped = lines
        .iter()
        .position(|l| l[1] == "east" && l[2] == "stopped")
        .unwrap_or_else(|| panic!("east's last record (written when stopped) is missing:\n{log}"));
    assert!(stopped as u64 >= before, "{stopped} < {before}");
    assert!(lines[..stopped].iter().all(|l| l[1] == "east"));
    assert!(
        lines[stopped + 1..].iter().all(|l| l[1] == "west") && lines.len() > stopped + 1,
        "west wrote before east stopped, or not at all:\n{log}"
    );
    // The write pause, from the records themselves: east's last to west's first.
    let t = |l: &Vec<&str>| l.last().unwrap().parse::<u128>().unwrap();
    let pause_ms = (t(&lines[stopped + 1]) - t(&lines[stopped])) / 1_000_000;
    println!(
        "write pause: {pause_ms} ms ({} records on east, then west)",
        stopped + 1
    );
    assert_eq!(in_writer(&k, &west, "sha256sum /data/blob"), blob);

    // What the logical cluster shows: the claim copied, said on it and on the namespace.
    let copied = k.ok(&[
        "-n",
        "notes",
        "get",
        "pvc",
        "journal",
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"sluice.dev/Copied\")].reason}",
    ]);
    assert_eq!(copied, "Copied");
    let events = k.ok(&[
        "-n",
        "notes",
        "get",
        "events",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(
        events.contains(
            "the data of claim journal (bulk copy while the app runs) is copied from east to west"
        ),
        "{events}"
    );
    // The movers are gone, and so is the copy's request on the claim.
    assert!(
        eventually(Duration::from_secs(60), || {
            let pods = k.ok(&["-n", "notes", "get", "pods", "-o", "name"]);
            let ann = k.ok(&[
                "-n",
                "notes",
                "get",
                "pvc",
                "journal",
                "-o",
                "jsonpath={.metadata.annotations}",
            ]);
            !pods.contains("sluice-copy") && !ann.contains("copy.sluice.dev")
        }),
        "{}",
        k.ok(&["-n", "notes", "get", "pods", "-o", "name"])
    );
    assert!(dev.stop());
}

const FAST: &str = r#"apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: fast}
provisioner: sluice.dev/local-path
volumeBindingMode: WaitForFirstConsumer
"#;

const VAULT: &str = r#"apiVersion: v1
kind: Namespace
metadata: {name: vault, labels: {sluice.dev/cluster: east}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: keys, namespace: vault}
spec:
  storageClassName: fast
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 10Mi}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: keeper, namespace: vault}
spec:
  replicas: 1
  selector: {matchLabels: {app: keeper}}
  template:
    metadata: {labels: {app: keeper}}
    spec:
      containers:
      - name: main
        image: busybox
        command: ["sh", "-c", "while :; do echo $SLUICE_CLUSTER >> /data/log; sleep 0.1; done"]
        volumeMounts: [{name: data, mountPath: /data}]
      volumes: [{name: data, persistentVolumeClaim: {claimName: keys}}]
"#;

/// Move namespace `ns` (its Deployment `keeper` running on east, on a claim) to west and
/// check that the move waits, saying `why` in the namespace's condition and an Event,
/// while east's keeper runs on untouched and nothing runs on west; then turn it back and
/// check that the movers go and the keeper is still the same Pod on east.
fn waits_saying(k: &support::Kubectl, ns: &str, why: &str) {
    let keeper_on = |cluster: &str| running_on(k, ns, "keeper", cluster).unwrap_or_default();
    assert!(
        eventually(Duration::from_secs(90), || !keeper_on("east").is_empty()),
        "the keeper never ran on east"
    );
    let pod = keeper_on("east");
    let lines = || -> u64 {
        k.ok(&[
            "-n",
            ns,
            "exec",
            &pod,
            "--",
            "sh",
            "-c",
            "wc -l < /data/log",
        ])
        .trim()
        .parse()
        .unwrap_or(0)
    };
    k.ok(&[
        "label",
        "namespace",
        ns,
        "sluice.dev/cluster=west",
        "--overwrite",
    ]);
    let placed = || {
        k.ok(&[
            "get",
            "ns",
            ns,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Placed\")].message}",
        ])
    };
    assert!(
        eventually(Duration::from_secs(120), || placed().contains(why)),
        "the move says which claim and why: {}",
        placed()
    );
    assert!(
        eventually(Duration::from_secs(30), || k
            .ok(&[
                "-n",
                ns,
                "get",
                "events",
                "-o",
                "jsonpath={.items[*].message}"
            ])
            .contains(why)),
        "an Event says it too"
    );
    // Nothing of east is touched: the same Pod runs on and keeps writing; nothing runs on
    // west.
    let before = lines();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(keeper_on("east"), pod);
    assert!(lines() > before, "east's keeper stopped writing");
    assert_eq!(keeper_on("west"), "");
    assert!(placed().contains(why), "{}", placed());
    // Turned back: it stays on east, and the copy's request and movers go.
    k.ok(&[
        "label",
        "namespace",
        ns,
        "sluice.dev/cluster=east",
        "--overwrite",
    ]);
    assert!(
        eventually(Duration::from_secs(120), || {
            let ann = k.ok(&[
                "-n",
                ns,
                "get",
                "pvc",
                "-o",
                "jsonpath={.items[*].metadata.annotations}",
            ]);
            let pods = k.ok(&["-n", ns, "get", "pods", "-o", "name"]);
            !ann.contains("copy.sluice.dev") && !pods.contains("sluice-copy")
        }),
        "the copy's request and movers go: {}",
        k.ok(&["-n", ns, "get", "pods", "-o", "wide"])
    );
    assert_eq!(keeper_on("east"), pod);
    // West, which may hold part of a copy, never runs the app, and lets the namespace go.
    let on_west = || {
        k.ok(&[
            "-n",
            ns,
            "get",
            "pods",
            "-l",
            "sluice.dev/cluster=west",
            "-o",
            "name",
        ])
    };
    assert!(
        eventually(Duration::from_secs(120), || on_west().is_empty()),
        "west still runs: {}",
        on_west()
    );
}

/// A claim whose class the target lacks: the move waits, saying which claim and why on
/// the namespace's condition and in an Event; the app keeps running where it was, on its
/// data, and nothing starts on the target; turned back, the namespace stays where it was.
#[test]
fn a_claim_the_target_cannot_take_holds_the_move_and_leaves_the_source_alone() {
    let (mut dev, _) = DevUp::start("east,west");
    let k = dev.kubectl_control();
    dev.kubectl("east").apply_stdin(FAST);
    k.apply_stdin(VAULT);
    let why = "claim keys (cannot be copied: CreateContainerConfigError: storageclass.storage.k8s.io \"fast\" not found)";
    waits_saying(&k, "vault", why);
    assert!(dev.stop());
}

const LEDGER: &str = r#"apiVersion: v1
kind: Namespace
metadata: {name: ledger, labels: {sluice.dev/cluster: east}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: books, namespace: ledger}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 400Mi}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: writer, namespace: ledger}
spec:
  replicas: 1
  strategy: {type: Recreate}
  selector: {matchLabels: {app: writer}}
  template:
    metadata: {labels: {app: writer}}
    spec:
      containers:
      - name: main
        image: busybox
        # A 200 MiB blob written once (long enough to copy that a kill lands mid-copy),
        # then a numbered record every 50 ms.
        command:
        - sh
        - -c
        - |
          cd /data
          [ -f blob ] || { head -c 209715200 /dev/urandom > blob.part && mv blob.part blob; }
          i=$(cat log 2>/dev/null | wc -l)
          trap 'i=$((i+1)); echo "$i $SLUICE_CLUSTER stopped" >> log; exit 0' TERM
          while :; do i=$((i+1)); echo "$i $SLUICE_CLUSTER" >> log; sleep 0.05; done
        volumeMounts: [{name: data, mountPath: /data}]
      volumes: [{name: data, persistentVolumeClaim: {claimName: books}}]
"#;

/// A copy interrupted twice — the target's mover killed mid-transfer, then the target's
/// agent (its syncer) killed and started again — resumes, and the app moves whole: the
/// blob's checksum and every record are the same on the new cluster.
#[test]
fn an_interrupted_copy_resumes_and_the_app_moves_whole() {
    let (mut dev, _) = DevUp::start("east,west");
    let k = dev.kubectl_control();
    k.apply_stdin(LEDGER);
    let writer = |cluster: &str| running_on(&k, "ledger", "writer", cluster);
    let exec =
        |pod: &str, script: &str| k.ok(&["-n", "ledger", "exec", pod, "--", "sh", "-c", script]);
    assert!(
        eventually(Duration::from_secs(90), || writer("east").is_some()),
        "the writer never ran on east"
    );
    let east = writer("east").unwrap();
    assert!(
        eventually(Duration::from_secs(60), || exec(&east, "ls /data")
            .lines()
            .any(|l| l == "blob")),
        "the blob was never written"
    );
    let blob = exec(&east, "sha256sum /data/blob");

    k.ok(&[
        "label",
        "namespace",
        "ledger",
        "sluice.dev/cluster=west",
        "--overwrite",
    ]);
    // The target's mover, killed while it pulls.
    let mut pull = None;
    assert!(
        eventually(Duration::from_secs(120), || {
            pull = support::processes_with_pid("mover pull")
                .into_iter()
                .find(|(_, cmd)| cmd.contains("--pass bulk"));
            pull.is_some()
        }),
        "no pull mover ran"
    );
    std::thread::sleep(Duration::from_millis(300));
    let (pid, cmd) = pull.unwrap();
    println!("killing the pull mover mid-copy: {cmd}");
    support::clusterset::kill9(pid);

    // The target's agent, killed and started again as it ran.
    let (pid, cmd) = support::processes_with_pid(" syncer ")
        .into_iter()
        .find(|(_, cmd)| cmd.contains("--cluster west"))
        .expect("west's syncer");
    let nul_separated = |what: &str| -> Vec<String> {
        std::fs::read(format!("/proc/{pid}/{what}"))
            .map(|b| {
                b.split(|c| *c == 0)
                    .filter(|a| !a.is_empty())
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    // The same arguments and environment (the parent pid it stops with included).
    let argv = nul_separated("cmdline");
    let env: Vec<(String, String)> = nul_separated("environ")
        .into_iter()
        .filter_map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect();
    support::clusterset::kill9(pid);
    println!("killed west's syncer: {cmd}");
    std::thread::sleep(Duration::from_secs(3));
    let _syncer = Restarted(
        std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .env_clear()
            .envs(env)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );

    assert!(
        eventually(Duration::from_secs(240), || writer("west").is_some()
            && writer("east").is_none()),
        "the writer never moved: {}",
        k.ok(&["get", "ns", "ledger", "-o", "jsonpath={.status.conditions}"])
    );
    let west = writer("west").unwrap();
    assert_eq!(exec(&west, "sha256sum /data/blob"), blob);
    std::thread::sleep(Duration::from_millis(500));
    let log = exec(&west, "cat /data/log");
    let lines: Vec<&str> = log.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        assert!(
            l.starts_with(&format!("{} ", i + 1)),
            "record {} of {}: {l:?}",
            i + 1,
            lines.len()
        );
    }
    let stopped = lines
        .iter()
        .position(|l| l.ends_with("east stopped"))
        .unwrap_or_else(|| panic!("east's last record is missing:\n{log}"));
    assert!(lines[stopped + 1..].iter().all(|l| l.contains(" west")));
    let copied = k.ok(&[
        "-n",
        "ledger",
        "get",
        "pvc",
        "books",
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"sluice.dev/Copied\")].message}",
    ]);
    println!("{} records, {stopped} on east; {copied}", lines.len());
    assert!(dev.stop());
}

const BOARD: &str = r#"apiVersion: sluice.dev/v1alpha1
kind: Placement
metadata: {name: everywhere}
spec:
  namespaceSelector: {matchLabels: {team: board}}
  locationSelector: {matchLabels: {sluice.dev/local: "true"}}
  mode: Spread
---
apiVersion: v1
kind: Namespace
metadata: {name: board, labels: {team: board}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: wall
  namespace: board
  annotations: {sluice.dev/storage: shared}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: shared
  resources: {requests: {storage: 10Mi}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: scribe, namespace: board}
spec:
  replicas: 2
  selector: {matchLabels: {app: scribe}}
  template:
    metadata: {labels: {app: scribe}}
    spec:
      containers:
      - name: main
        image: busybox
        # Each Pod signs the wall once, with its cluster and name.
        command: ["sh", "-c", "echo \"$SLUICE_CLUSTER $HOSTNAME\" >> /data/wall; exec sleep 3600"]
        volumeMounts: [{name: data, mountPath: /data}]
      volumes: [{name: data, persistentVolumeClaim: {claimName: wall}}]
"#;

/// A claim marked `sluice.dev/storage: shared` of the local clusters' `shared` class is one
/// volume wherever it is mounted: a Deployment spread on east and west reads, from each
/// cluster, what the other cluster's Pod wrote; each cluster says so on the claim; a typo
/// in the annotation is refused; and when the namespace leaves east no mover runs and the
/// data is whole on west.
#[test]
fn a_shared_claim_is_the_same_data_on_every_cluster_and_a_move_copies_nothing() {
    let (mut dev, _) = DevUp::start("east,west");
    let k = dev.kubectl_control();
    k.apply_stdin(BOARD);
    let scribe_on = |cluster: &str| running_on(&k, "board", "scribe", cluster);
    assert!(
        eventually(Duration::from_secs(120), || scribe_on("east").is_some()
            && scribe_on("west").is_some()),
        "the scribes never ran on both clusters: {}",
        k.ok(&["-n", "board", "get", "pods", "-o", "wide"])
    );
    let wall = |pod: &str| k.ok(&["-n", "board", "exec", pod, "--", "cat", "/data/wall"]);
    // Each Pod reads what the other cluster's Pod wrote: one volume, mounted on both.
    let (east, west) = (scribe_on("east").unwrap(), scribe_on("west").unwrap());
    for pod in [&east, &west] {
        assert!(
            eventually(Duration::from_secs(30), || {
                let w = wall(pod);
                w.contains(&format!("east {east}")) && w.contains(&format!("west {west}"))
            }),
            "{pod} reads: {}",
            wall(pod)
        );
    }
    // The claim says so, as each cluster found it.
    let shared = || {
        k.ok(&[
            "-n",
            "board",
            "get",
            "pvc",
            "wall",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"sluice.dev/Shared\")].status}/{.status.conditions[?(@.type==\"sluice.dev/Shared\")].reason}",
        ])
    };
    assert!(
        eventually(Duration::from_secs(60), || shared()
            == "True/NetworkStorage"),
        "{}",
        shared()
    );
    // A value that means nothing is refused where it is written.
    let typo = k.run(&[
        "-n",
        "board",
        "annotate",
        "pvc",
        "wall",
        "sluice.dev/storage=Shared",
        "--overwrite",
    ]);
    let said = String::from_utf8_lossy(&typo.stderr).to_string();
    assert!(!typo.status.success());
    assert!(
        said.contains(r#"metadata.annotations[sluice.dev/storage]: Unsupported value: "Shared": supported values: "moves", "shared""#),
        "{said}"
    );

    // Leaving east: nothing to copy, so no mover runs and west's Pods never wait for one;
    // the wall keeps every signature.
    k.ok(&[
        "label",
        "namespace",
        "board",
        "sluice.dev/cluster=west",
        "--overwrite",
    ]);
    let movers = std::sync::Mutex::new(0usize);
    let placed = || {
        let m = k.ok(&[
            "get",
            "pods",
            "-A",
            "-l",
            "copy.sluice.dev/mover",
            "-o",
            "name",
        ]);
        let mut seen = movers.lock().unwrap();
        *seen += m.lines().count();
        k.ok(&[
            "get",
            "ns",
            "board",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Placed\")].reason} {.status.conditions[?(@.type==\"Placed\")].message}",
        ])
    };
    assert!(
        eventually(Duration::from_secs(180), || {
            let p = placed();
            p.starts_with("Placed ") && !p.contains("east") && scribe_on("east").is_none()
        }),
        "{}",
        placed()
    );
    assert_eq!(*movers.lock().unwrap(), 0, "a mover ran for a shared claim");
    let annotations = k.ok(&[
        "-n",
        "board",
        "get",
        "pvc",
        "wall",
        "-o",
        "jsonpath={.metadata.annotations}",
    ]);
    assert!(!annotations.contains("copy.sluice.dev"), "{annotations}");
    // Durable traces a copy would have left, whatever the polling above saw: the target's
    // record of a pass on the claim, and the namespace's Event of waiting for it.
    let copied = k.ok(&[
        "-n",
        "board",
        "get",
        "pvc",
        "wall",
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"sluice.dev/Copied\")].reason}",
    ]);
    assert_eq!(copied, "", "the shared claim was copied");
    let events = k.ok(&[
        "-n",
        "board",
        "get",
        "events",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(!events.contains("the data of claim wall"), "{events}");
    let last = scribe_on("west").unwrap();
    let w = wall(&last);
    assert!(
        w.contains(&format!("east {east}")) && w.contains(&format!("west {west}")),
        "{w}"
    );
    assert!(dev.stop());
}

const QUORUM: &str = r#"apiVersion: v1
kind: Namespace
metadata: {name: quorum, labels: {sluice.dev/cluster: east}}
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: quorum}
spec:
  clusterIP: None
  selector: {app: db}
  ports: [{name: peer, port: 7000}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: quorum}
spec:
  serviceName: db
  replicas: 3
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      terminationGracePeriodSeconds: 10
      containers:
      - name: main
        image: busybox
        # Each member: a 1 MiB blob written once, then one numbered record every 50 ms
        # with its name and cluster, and one when stopped (flushing on SIGTERM).
        command:
        - sh
        - -c
        - |
          cd /data
          [ -f blob ] || head -c 1048576 /dev/urandom > blob
          i=$(cat log 2>/dev/null | wc -l)
          trap 'i=$((i+1)); echo "$i $HOSTNAME $SLUICE_CLUSTER stopped $(date +%s%N)" >> log; exit 0' TERM
          while :; do i=$((i+1)); echo "$i $HOSTNAME $SLUICE_CLUSTER $(date +%s%N)" >> log; sleep 0.05; done
        # Not Ready on a cluster while its claim holds a file named for it (run inside the
        # container, in its environment, as kubelet runs exec probes).
        readinessProbe:
          exec: {command: ["sh", "-c", "test ! -f /data/hold-$SLUICE_CLUSTER"]}
          periodSeconds: 1
        volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 10Mi}}
"#;

/// The members of set `db` in namespace `quorum` that are Ready, and where each runs, as
/// the logical cluster's Pod mirrors say.
fn ready_members(k: &support::Kubectl) -> Option<Vec<(String, String)>> {
    let out = k.run(&[
        "-n",
        "quorum",
        "get",
        "pods",
        "-l",
        "app=db",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name} {.metadata.labels.sluice\\.dev/cluster} {.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}",
    ]);
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Some(
        text.lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                (f.len() == 3 && f[2] == "True").then(|| (f[0].to_string(), f[1].to_string()))
            })
            .collect(),
    )
}

/// A 3-member StatefulSet moves east → west one ordinal at a time: each member's claim is
/// copied (bulk while it serves, final once it stopped), it starts on west on its copy, and
/// only then does the next member stop on east. Watched throughout through the logical
/// cluster, at least two members are Ready at every look; each member's records from east,
/// up to the one it wrote when stopped, are on west without a gap, its blob with the same
/// checksum.
#[test]
fn a_statefulset_moves_one_member_at_a_time_and_keeps_its_quorum_and_its_data() {
    let (mut dev, _) = DevUp::start("east,west");
    let k = dev.kubectl_control();
    k.apply_stdin(QUORUM);
    let members = ["db-0", "db-1", "db-2"];
    let on = |cluster: &str| {
        ready_members(&k).is_some_and(|m| {
            members
                .iter()
                .all(|n| m.iter().any(|(p, c)| p == n && c == cluster))
        })
    };
    assert!(
        eventually(Duration::from_secs(120), || on("east")),
        "the set never ran on east: {:?}",
        ready_members(&k)
    );
    let exec = |pod: &str, script: &str| {
        let script = format!("cd /data && {script}");
        k.ok(&["-n", "quorum", "exec", pod, "--", "sh", "-c", &script])
    };
    let mut blobs = Vec::new();
    let mut before = Vec::new();
    for m in members {
        assert!(eventually(Duration::from_secs(30), || {
            exec(m, "wc -l < log")
                .trim()
                .parse::<u64>()
                .is_ok_and(|n| n > 20)
        }));
        blobs.push(exec(m, "sha256sum blob"));
        before.push(exec(m, "wc -l < log").trim().parse::<usize>().unwrap());
    }

    // Watch the members from before the move to its end.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (k, stop) = (dev.kubectl_control(), stop.clone());
        std::thread::spawn(move || {
            // Told to stop once the test sees the set on west, it still looks until it sees
            // that itself (or a minute has passed), so its looks end with the last arrival.
            let mut looks: Vec<Vec<(String, String)>> = Vec::new();
            let mut stopping_since = None;
            loop {
                let all_west = looks
                    .last()
                    .is_some_and(|l| l.len() == 3 && l.iter().all(|(_, c)| c == "west"));
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let since = *stopping_since.get_or_insert_with(std::time::Instant::now);
                    if all_west || since.elapsed() > Duration::from_secs(60) {
                        break;
                    }
                }
                if let Some(m) = ready_members(&k) {
                    looks.push(m);
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            looks
        })
    };
    // db-1 will not be Ready on west until the test says so (its copy carries the file):
    // the move must wait there, with db-2 still serving on east.
    exec("db-1", "touch hold-west");
    let began = std::time::Instant::now();
    k.ok(&[
        "label",
        "namespace",
        "quorum",
        "sluice.dev/cluster=west",
        "--overwrite",
    ]);
    let stalled = || {
        let pods = k.ok(&[
            "-n",
            "quorum",
            "get",
            "pods",
            "-l",
            "app=db",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}/{.metadata.labels.sluice\\.dev/cluster}/{.status.phase} {end}",
        ]);
        pods.contains("db-1/west/Running")
            && ready_members(&k).is_some_and(|m| {
                m.contains(&("db-0".to_string(), "west".to_string()))
                    && m.contains(&("db-2".to_string(), "east".to_string()))
            })
    };
    assert!(
        eventually(Duration::from_secs(180), stalled),
        "db-1 never got to west: {:?} {}",
        ready_members(&k),
        k.ok(&["get", "ns", "quorum", "-o", "jsonpath={.status.conditions}"])
    );
    // However long db-1 is not Ready on west, db-2 stays on east, Ready.
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(500));
        let m = ready_members(&k).unwrap_or_default();
        assert!(
            m.contains(&("db-2".to_string(), "east".to_string())),
            "db-2 left east before db-1 was Ready on west: {m:?}"
        );
        assert!(!m.iter().any(|(p, _)| p == "db-1"), "{m:?}");
    }
    let said = k.ok(&["get", "ns", "quorum", "-o", "jsonpath={.status.conditions}"]);
    assert!(
        said.contains(
            "data-db-2 (bulk copied, waiting for the ordinals before it to run on the target)"
        ),
        "{said}"
    );
    let held_for = began.elapsed();
    exec("db-1", "rm hold-west");
    let released = std::time::Instant::now();
    let moved = eventually(Duration::from_secs(300), || on("west"));
    println!(
        "move: {:.1} s to the stall at db-1, {:.1} s from its release to all three Ready on west",
        held_for.as_secs_f64(),
        released.elapsed().as_secs_f64()
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let looks = watcher.join().unwrap();
    assert!(
        moved,
        "the set never moved: {:?} {}",
        ready_members(&k),
        k.ok(&["get", "ns", "quorum", "-o", "jsonpath={.status.conditions}"])
    );
    // Where each member was Ready, look by look: the fewest at once, and the order in which
    // members came up on west.
    let fewest = looks.iter().map(Vec::len).min().unwrap_or(0);
    let mut arrived: Vec<String> = Vec::new();
    for look in &looks {
        for (p, c) in look {
            if c == "west" && !arrived.contains(p) {
                arrived.push(p.clone());
            }
        }
    }
    println!(
        "{} looks during the move; fewest Ready members at once: {fewest}; on west in the order {arrived:?}",
        looks.len()
    );
    assert!(looks.len() >= 5, "too few looks: {}", looks.len());
    assert!(fewest >= 2, "the quorum was lost: {looks:?}");
    assert_eq!(
        arrived, members,
        "members did not move one at a time in order"
    );

    // Each member's data: east's records up to its stop, then west's, no gap; its blob.
    for (i, m) in members.iter().enumerate() {
        let log = exec(m, "cat log");
        let lines: Vec<Vec<&str>> = log.lines().map(|l| l.split(' ').collect()).collect();
        for (n, l) in lines.iter().enumerate() {
            assert_eq!(l[0], (n + 1).to_string(), "{m} record {}: {l:?}", n + 1);
            assert_eq!(l[1], *m, "{m}: {l:?}");
        }
        let stopped = lines
            .iter()
            .position(|l| l[2] == "east" && l.get(3) == Some(&"stopped"))
            .unwrap_or_else(|| panic!("{m}: east's record when stopped is missing:\n{log}"));
        assert!(stopped >= before[i], "{m}: {stopped} < {}", before[i]);
        assert!(
            lines[..stopped].iter().all(|l| l[2] == "east"),
            "{m}:\n{log}"
        );
        assert!(
            lines[stopped + 1..].iter().all(|l| l[2] == "west") && lines.len() > stopped + 1,
            "{m}: west wrote before east stopped, or not at all:\n{log}"
        );
        // This member's write pause, from its own records: east's last to west's first.
        let t = |l: &Vec<&str>| l.last().unwrap().parse::<u128>().unwrap();
        let pause_ms = (t(&lines[stopped + 1]) - t(&lines[stopped])) / 1_000_000;
        println!(
            "{m}: write pause {pause_ms} ms ({} records on east, then west)",
            stopped + 1
        );
        assert_eq!(exec(m, "sha256sum blob"), blobs[i], "{m}");
    }
    let claims = k.ok(&[
        "-n",
        "quorum",
        "get",
        "pvc",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type==\"sluice.dev/Copied\")].reason} {end}",
    ]);
    assert_eq!(
        claims.trim(),
        "data-db-0=Copied data-db-1=Copied data-db-2=Copied"
    );
    assert!(dev.stop());
}

const ROOMY: &str = r#"apiVersion: v1
kind: Namespace
metadata: {name: attic, labels: {sluice.dev/cluster: east}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: boxes, namespace: attic}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 64Mi}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: keeper, namespace: attic}
spec:
  replicas: 1
  selector: {matchLabels: {app: keeper}}
  template:
    metadata: {labels: {app: keeper}}
    spec:
      containers:
      - name: main
        image: busybox
        command: ["sh", "-c", "while :; do echo $SLUICE_CLUSTER >> /data/log; sleep 0.1; done"]
        volumeMounts: [{name: data, mountPath: /data}]
      volumes: [{name: data, persistentVolumeClaim: {claimName: boxes}}]
"#;

/// A file system mounted for a test, unmounted when it ends, however it ends.
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// A claim larger than the room the target has: the move waits, saying which claim and
/// why in the target's own words, and the app keeps running on east, on its data.
#[test]
fn a_claim_larger_than_the_target_has_room_for_holds_the_move() {
    let (mut dev, _) = DevUp::start("east,west");
    // West's node keeps its volumes on a 16 MiB file system (nothing of west uses it yet).
    let volumes = dev.state.join("clusters").join("west").join("volumes");
    std::fs::create_dir_all(&volumes).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=16m", "sluice-test-small"])
        .arg(&volumes)
        .status()
        .unwrap();
    assert!(mounted.success(), "mounting a small file system needs root");
    let small = Mounted(volumes);
    let k = dev.kubectl_control();
    k.apply_stdin(ROOMY);
    let why = "claim boxes (cannot be copied: CreateContainerConfigError: persistentvolumeclaim \"boxes\" asks for 64Mi but node";
    waits_saying(&k, "attic", why);
    assert!(dev.stop());
    drop(small);
}

const SEEDED: &str = r#"apiVersion: v1
kind: Namespace
metadata: {name: nursery, labels: {sluice.dev/cluster: east}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: seed, namespace: nursery}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 10Mi}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: planter, namespace: nursery}
spec:
  replicas: 1
  selector: {matchLabels: {app: planter}}
  template:
    metadata: {labels: {app: planter}}
    spec:
      containers:
      - name: main
        image: busybox
        command: ["sh", "-c", "echo hello from the seed > /seed/greeting; while :; do sleep 1; done"]
        volumeMounts: [{name: seed, mountPath: /seed}]
      volumes: [{name: seed, persistentVolumeClaim: {claimName: seed}}]
"#;

const SPROUT: &str = r#"apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: sprout, namespace: nursery}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 10Mi}}
  dataSource: {kind: PersistentVolumeClaim, name: seed}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: keeper, namespace: nursery}
spec:
  replicas: 1
  selector: {matchLabels: {app: keeper}}
  template:
    metadata: {labels: {app: keeper}}
    spec:
      containers:
      - name: main
        image: busybox
        command: ["sh", "-c", "while :; do echo $SLUICE_CLUSTER >> /data/log; sleep 0.1; done"]
        volumeMounts: [{name: data, mountPath: /data}]
      volumes: [{name: data, persistentVolumeClaim: {claimName: sprout}}]
"#;

const RESTORED: &str = r#"apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: restored, namespace: nursery}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 10Mi}}
  dataSource: {apiGroup: snapshot.storage.k8s.io, kind: VolumeSnapshot, name: nightly}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: restorer, namespace: nursery}
spec:
  replicas: 1
  selector: {matchLabels: {app: restorer}}
  template:
    metadata: {labels: {app: restorer}}
    spec:
      containers:
      - name: main
        image: busybox
        command: ["sleep", "3600"]
        volumeMounts: [{name: data, mountPath: /data}]
      volumes: [{name: data, persistentVolumeClaim: {claimName: restored}}]
"#;

/// A claim filled from another claim (a clone, which local clusters make) runs on east
/// with the seed's files; moving its namespace waits, saying the clone cannot be copied,
/// and nothing of east stops — not even the app of the seed claim, whose copy could go on.
/// A claim filled from a VolumeSnapshot, which local clusters cannot serve, leaves its Pod
/// waiting with the node's reason, shown in the logical cluster.
#[test]
fn a_claim_filled_from_a_data_source_holds_the_move() {
    let (mut dev, _) = DevUp::start("east,west");
    let k = dev.kubectl_control();
    k.apply_stdin(SEEDED);
    let in_pod = |app: &str, script: &str| {
        let pod = running_on(&k, "nursery", app, "east").unwrap_or_default();
        if pod.is_empty() {
            return String::new();
        }
        let out = k.run(&["-n", "nursery", "exec", &pod, "--", "sh", "-c", script]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert!(
        eventually(Duration::from_secs(90), || in_pod(
            "planter",
            "cat /seed/greeting"
        ) == "hello from the seed"),
        "the planter never wrote the seed"
    );
    let planter = running_on(&k, "nursery", "planter", "east").unwrap();
    k.apply_stdin(SPROUT);
    assert!(
        eventually(Duration::from_secs(90), || in_pod(
            "keeper",
            "cat /data/greeting"
        ) == "hello from the seed"),
        "the clone never had the seed's files: {}",
        k.ok(&["-n", "nursery", "get", "events"])
    );
    let why = "claim sprout (cannot be copied: it is filled from a dataSource (PersistentVolumeClaim seed)";
    waits_saying(&k, "nursery", why);
    // The seed's copy was held too: its app never stopped on east.
    assert_eq!(
        running_on(&k, "nursery", "planter", "east").as_deref(),
        Some(planter.as_str())
    );
    k.apply_stdin(RESTORED);
    let refused = "a dataSource of kind \"VolumeSnapshot\" (volumesnapshot.snapshot.storage.k8s.io \"nightly\") is not supported by local clusters";
    assert!(
        eventually(Duration::from_secs(90), || k
            .ok(&[
                "-n",
                "nursery",
                "get",
                "events",
                "-o",
                "jsonpath={.items[*].message}"
            ])
            .contains(refused)),
        "the node's reason shows in the logical cluster: {refused}: {}",
        k.ok(&["-n", "nursery", "get", "events"])
    );
    assert!(dev.stop());
}

/// Where the block test's container sees its device. Like a mount point, the node makes
/// it on the machine (an empty file); the test removes it.
const RAW_DEVICE: &str = "/dev/sluice-test-raw";

const RAW: &str = r#"apiVersion: v1
kind: Namespace
metadata: {name: vault, labels: {sluice.dev/cluster: east}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: raw, namespace: vault}
spec:
  accessModes: [ReadWriteOnce]
  volumeMode: Block
  resources: {requests: {storage: 16Mi}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: keeper, namespace: vault}
spec:
  replicas: 1
  selector: {matchLabels: {app: keeper}}
  template:
    metadata: {labels: {app: keeper}}
    spec:
      containers:
      - name: main
        image: busybox
        command: ["sh", "-c", "test -b /dev/sluice-test-raw && printf 'raw bytes' | dd of=/dev/sluice-test-raw conv=notrunc,fsync && while :; do echo $SLUICE_CLUSTER >> /data/log; sleep 0.1; done"]
        volumeDevices: [{name: disk, devicePath: /dev/sluice-test-raw}]
        volumeMounts: [{name: log, mountPath: /data}]
      volumes:
      - {name: disk, persistentVolumeClaim: {claimName: raw}}
      - {name: log, emptyDir: {}}
"#;

/// The device of the block test, removed from the machine however the test ends.
struct RawDevice;

impl Drop for RawDevice {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(RAW_DEVICE);
    }
}

/// A block-mode claim, which local clusters serve as a loop device: the app writes raw
/// bytes to it and reads them back on east; moving its namespace waits, saying the mover
/// copies file systems, and nothing of east stops.
#[test]
fn a_block_claim_holds_the_move() {
    let _device = RawDevice;
    let (mut dev, _) = DevUp::start("east,west");
    let k = dev.kubectl_control();
    k.apply_stdin(RAW);
    let read = || {
        let pod = running_on(&k, "vault", "keeper", "east").unwrap_or_default();
        if pod.is_empty() {
            return String::new();
        }
        k.ok(&[
            "-n",
            "vault",
            "exec",
            &pod,
            "--",
            "sh",
            "-c",
            "dd if=/dev/sluice-test-raw bs=9 count=1 2>/dev/null",
        ])
    };
    assert!(
        eventually(Duration::from_secs(90), || read() == "raw bytes"),
        "the keeper never wrote its device: {}",
        k.ok(&["-n", "vault", "get", "events"])
    );
    let bound = dev.kubectl("east").ok(&[
        "get",
        "pv",
        "-o",
        "jsonpath={range .items[*]}{.spec.claimRef.name}={.spec.volumeMode} {end}",
    ]);
    assert!(bound.contains("raw=Block"), "{bound}");
    let why = "claim raw (cannot be copied: it is a block-mode claim (volumeMode: Block), and the mover copies file systems)";
    waits_saying(&k, "vault", why);
    assert_eq!(read(), "raw bytes", "the device keeps its bytes on east");
    assert!(dev.stop());
}
