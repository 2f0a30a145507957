#![allow(clippy::unwrap_used)]
//! Stateful apps through the logical cluster (issue 38): the claims a cluster makes for a
//! StatefulSet's claim templates show up in the logical cluster as read-only mirrors with
//! their class, volume and status there, and go when the cluster deletes them; a claim
//! applied to the logical cluster reports the status it has where it is bound; after a
//! move the mirrors of the StatefulSet's Pod and claim are the new cluster's.

mod support;

use std::sync::Mutex;
use std::time::Duration;

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
