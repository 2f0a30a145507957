#![allow(clippy::unwrap_used)]
//! Stateful apps through the logical cluster (issue 38): the claims a cluster makes for a
//! StatefulSet's claim templates show up in the logical cluster as read-only mirrors with
//! their class, volume and status there, and go when the cluster deletes them; a claim
//! applied to the logical cluster reports the status it has where it is bound; after a
//! move the mirrors of the StatefulSet's Pod and claim are the new cluster's. A claim's
//! data follows a move: every record the app wrote on the old cluster, up to the one it
//! wrote when stopped, is read on the new one, with the same checksum; its clients,
//! through the clusterset VIP, see no failure during the write pause.

mod support;

use std::sync::Mutex;
use std::time::Duration;

use support::clusterset::{Load, ds};
use support::{DevUp, eventually};

/// `dev up` binds the clusterset's fixed loopback ranges: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

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
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
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
    // The claim applied upstream reports its status there (it is no mirror); the claims
    // east's StatefulSet made are mirrored with the cluster's label.
    assert!(
        eventually(Duration::from_secs(90), || claims()
            == "data-db-0=Bound/east/10Mi data-db-1=Bound/east/10Mi notes=Bound//10Mi"),
        "{}",
        claims()
    );
    let mirror = k.ok(&[
        "-n",
        "shop",
        "get",
        "pvc",
        "data-db-0",
        "-o",
        "jsonpath={.spec.storageClassName} {.spec.volumeName}",
    ]);
    assert!(mirror.starts_with("standard pvc-"), "{mirror}");
    // Read-only: the cluster's syncer writes it, nobody else.
    let edit = k.run(&["-n", "shop", "label", "pvc", "data-db-0", "x=y"]);
    assert!(!edit.status.success());
    let said = String::from_utf8_lossy(&edit.stderr);
    assert!(
        said.contains("persistentvolumeclaims labelled sluice.dev/cluster are read-only mirrors"),
        "{said}"
    );
    // Scaled down with whenScaled: Delete, east deletes db-1's claim: its mirror goes.
    k.ok(&["-n", "shop", "scale", "sts", "db", "--replicas=1"]);
    assert!(
        eventually(Duration::from_secs(90), || claims()
            == "data-db-0=Bound/east/10Mi notes=Bound//10Mi"),
        "{}",
        claims()
    );
    // Moved to west, the same names pass from east's mirrors to west's: each cluster's
    // mirror waits for the other's to go instead of taking it over.
    k.ok(&[
        "label",
        "namespace",
        "shop",
        "sluice.dev/cluster=west",
        "--overwrite",
    ]);
    assert!(
        eventually(Duration::from_secs(120), || claims()
            == "data-db-0=Bound/west/10Mi notes=Bound//10Mi"),
        "{}",
        claims()
    );
    let pod = || {
        k.ok(&[
            "-n",
            "shop",
            "get",
            "pod",
            "db-0",
            "-o",
            "jsonpath={.metadata.labels.sluice\\.dev/cluster} {.status.phase}",
        ])
    };
    assert!(
        eventually(Duration::from_secs(60), || pod() == "west Running"),
        "{}",
        pod()
    );
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

/// The writer's Pod on `cluster`, through the logical cluster's mirrors.
fn writer_on(k: &support::Kubectl, cluster: &str) -> Option<String> {
    let out = k.run(&[
        "-n",
        "notes",
        "get",
        "pod",
        "-l",
        &format!("app=writer,sluice.dev/cluster={cluster}"),
        "--field-selector=status.phase=Running",
        "-o",
        "jsonpath={.items[0].metadata.name}",
    ]);
    let name = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !name.is_empty()).then_some(name)
}

fn in_writer(k: &support::Kubectl, pod: &str, script: &str) -> String {
    k.ok(&["-n", "notes", "exec", pod, "--", "sh", "-c", script])
}

#[test]
fn a_claims_data_follows_a_move_checked_record_by_record() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
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
    let west_k = dev.kubectl("west");
    let vip = || {
        west_k
            .ok(&[
                "-n",
                &ds(&west_k, "notes"),
                "get",
                "serviceimport",
                "web",
                "-o",
                "jsonpath={.spec.ips[0]}",
            ])
            .trim()
            .to_string()
    };
    assert!(
        eventually(Duration::from_secs(90), || !vip().is_empty()
            && support::http_get(&vip(), 80, "/").is_some()),
        "the app answers through west's VIP"
    );
    let load = Load::start_waiting("http1", &format!("{}:80", vip()), 3600, None, 30);
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
