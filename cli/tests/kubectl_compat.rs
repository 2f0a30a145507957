#![allow(clippy::unwrap_used)]
//! What a new user's first kubectl commands expect of an API server, as kube-apiserver
//! does it: the system namespaces in every logical cluster, Secret `stringData`, Service IP
//! families, and a physical cluster's objects carrying nothing kube-apiserver does not add.

use crate::support;

use support::{Control, Kubectl, kubectls};

fn jsonpath(k: &Kubectl, args: &[&str], path: &str) -> String {
    let mut a = args.to_vec();
    let expr = format!("jsonpath={path}");
    a.extend(["-o", &expr]);
    k.ok(&a)
}

/// A user's first commands in the root cluster and in a new workspace's cluster.
fn first_commands(k: &Kubectl) {
    let namespaces = jsonpath(k, &["get", "namespaces"], "{.items[*].metadata.name}");
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(
            namespaces.split(' ').any(|n| n == ns),
            "{ns} in {namespaces}"
        );
    }
    assert_eq!(
        jsonpath(
            k,
            &["get", "namespace", "kube-public"],
            "{.metadata.labels.kubernetes\\.io/metadata\\.name}"
        ),
        "kube-public"
    );
    // No -n: the default namespace.
    k.ok(&["create", "deployment", "web", "--image=sluice/echo"]);
    k.ok(&[
        "create",
        "configmap",
        "settings",
        "--from-literal=mode=fast",
    ]);
    assert_eq!(
        jsonpath(k, &["get", "deployment", "web"], "{.metadata.namespace}"),
        "default"
    );

    // stringData is merged into data (base64) and not stored.
    k.apply_stdin(
        "apiVersion: v1\nkind: Secret\nmetadata: {name: creds}\ndata: {user: b2xk}\nstringData: {user: admin, password: s3cr3t}\n",
    );
    assert_eq!(
        jsonpath(
            k,
            &["get", "secret", "creds"],
            "{.data.user} {.data.password} {.type}"
        ),
        "YWRtaW4= czNjcjN0 Opaque"
    );
    let secret: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "secret", "creds", "-o", "json"])).unwrap();
    assert!(secret.get("stringData").is_none(), "{secret}");

    // A headless Service gets its IP families like any other.
    k.apply_stdin(
        "apiVersion: v1\nkind: Service\nmetadata: {name: db}\nspec: {clusterIP: None, selector: {app: db}, ports: [{port: 5432}]}\n",
    );
    assert_eq!(
        jsonpath(
            k,
            &["get", "service", "db"],
            "{.spec.ipFamilies} {.spec.ipFamilyPolicy}"
        ),
        "[\"IPv4\"] SingleStack"
    );
}

#[test]
fn every_logical_cluster_has_the_system_namespaces_and_kube_defaults() {
    for bin in kubectls() {
        let dir = tempfile::tempdir().unwrap();
        let control = Control::start(dir.path(), &[]);
        let root = Kubectl::new(&bin, &control.kubeconfig, &dir.path().join("cache"));
        first_commands(&root);
        root.apply_stdin(
            "apiVersion: sluice.dev/v1alpha1\nkind: Workspace\nmetadata: {name: shop}\n",
        );
        let shop = Kubectl::new(
            &bin,
            &control.workspace_kubeconfig("root:shop"),
            &dir.path().join("cache-shop"),
        );
        first_commands(&shop);
        // A nested workspace too.
        shop.apply_stdin(
            "apiVersion: sluice.dev/v1alpha1\nkind: Workspace\nmetadata: {name: team}\n",
        );
        let team = Kubectl::new(
            &bin,
            &control.workspace_kubeconfig("root:shop:team"),
            &dir.path().join("cache-team"),
        );
        team.ok(&["create", "configmap", "c", "--from-literal=a=b"]);
    }
}

#[test]
fn a_physical_clusters_objects_carry_no_logical_cluster_annotation() {
    let bin = kubectls().remove(0);
    let dir = tempfile::tempdir().unwrap();
    let control = Control::start(
        dir.path(),
        &["--single-cluster", "--service-cidr", "127.41.0.0/16"],
    );
    let k = Kubectl::new(&bin, &control.kubeconfig, &dir.path().join("cache"));
    k.ok(&[
        "create",
        "configmap",
        "settings",
        "--from-literal=mode=fast",
    ]);
    k.ok(&["label", "configmap", "settings", "tier=web"]);
    for what in [
        &["configmap", "settings"][..],
        &["namespace", "default"],
        &["service", "kubernetes"],
    ] {
        let mut args = vec!["get"];
        args.extend_from_slice(what);
        args.extend(["-o", "json"]);
        let out = k.ok(&args);
        assert!(
            !out.contains("sluice.dev/logical-cluster"),
            "{what:?}: {out}"
        );
    }
    // The system namespaces a physical cluster has, and the ones it keeps.
    let namespaces = jsonpath(&k, &["get", "namespaces"], "{.items[*].metadata.name}");
    assert_eq!(
        namespaces,
        "default kube-node-lease kube-public kube-system"
    );
    let refused = k.fails(&["delete", "namespace", "kube-public"]);
    assert!(refused.contains("may not be deleted"), "{refused}");
}

/// Kinds of ordinary manifests, as the Kubernetes documentation's examples write them.
const WORKLOAD_KINDS: &str = r#"
apiVersion: batch/v1
kind: Job
metadata: {name: pi}
spec:
  template:
    spec:
      containers:
      - name: pi
        image: perl:5.34.0
        command: ["perl", "-Mbignum=bpi", "-wle", "print bpi(2000)"]
      restartPolicy: Never
  backoffLimit: 4
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: hello}
spec:
  schedule: "* * * * *"
  jobTemplate:
    spec:
      template:
        spec:
          containers:
          - name: hello
            image: busybox:1.28
            command: [/bin/sh, -c, date; echo Hello from the Kubernetes cluster]
          restartPolicy: OnFailure
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: php-apache}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: php-apache}
  minReplicas: 1
  maxReplicas: 10
  metrics:
  - type: Resource
    resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: zk-pdb}
spec:
  minAvailable: 2
  selector: {matchLabels: {app: zookeeper}}
---
apiVersion: v1
kind: ReplicationController
metadata: {name: nginx}
spec:
  replicas: 3
  selector: {app: nginx}
  template:
    metadata: {name: nginx, labels: {app: nginx}}
    spec:
      containers:
      - name: nginx
        image: nginx
        ports: [{containerPort: 80}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: test-network-policy}
spec:
  podSelector: {matchLabels: {role: db}}
  ingress:
  - from: [{podSelector: {matchLabels: {role: frontend}}}]
    ports: [{port: 6379}]
---
apiVersion: v1
kind: LimitRange
metadata: {name: cpu-resource-constraint}
spec:
  limits:
  - default: {cpu: 500m}
    defaultRequest: {cpu: 500m}
    type: Container
---
apiVersion: v1
kind: ResourceQuota
metadata: {name: pods-high}
spec:
  hard: {cpu: "1000", memory: 200Gi, pods: "10"}
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: task-pv-volume, labels: {type: local}}
spec:
  storageClassName: manual
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce]
  hostPath: {path: /mnt/data}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: standard}
provisioner: kubernetes.io/no-provisioner
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: external-lb}
spec: {controller: example.com/ingress-controller}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high-priority}
value: 1000000
globalDefault: false
description: "This priority class should be used for XYZ service pods only."
"#;

#[test]
fn the_kinds_of_ordinary_manifests_are_served_with_kube_defaults() {
    for bin in kubectls() {
        let dir = tempfile::tempdir().unwrap();
        let control = Control::start(dir.path(), &[]);
        let k = Kubectl::new(&bin, &control.kubeconfig, &dir.path().join("cache"));
        k.apply_stdin(WORKLOAD_KINDS);
        for (what, name) in [
            ("job", "pi"),
            ("cronjob", "hello"),
            ("hpa", "php-apache"),
            ("pdb", "zk-pdb"),
            ("rc", "nginx"),
            ("networkpolicy", "test-network-policy"),
            ("limitrange", "cpu-resource-constraint"),
            ("quota", "pods-high"),
            ("pv", "task-pv-volume"),
            ("storageclass", "standard"),
            ("ingressclass", "external-lb"),
            ("priorityclass", "high-priority"),
        ] {
            assert_eq!(
                jsonpath(&k, &["get", what, name], "{.metadata.name}"),
                name,
                "{what}"
            );
        }
        // kube-apiserver's defaults and the Job's generated selector.
        let uid = jsonpath(&k, &["get", "job", "pi"], "{.metadata.uid}");
        assert_eq!(
            jsonpath(
                &k,
                &["get", "job", "pi"],
                "{.spec.selector.matchLabels.batch\\.kubernetes\\.io/controller-uid} {.spec.template.metadata.labels.job-name} {.spec.completions} {.spec.backoffLimit}"
            ),
            format!("{uid} pi 1 4")
        );
        assert_eq!(
            jsonpath(
                &k,
                &["get", "cronjob", "hello"],
                "{.spec.concurrencyPolicy} {.spec.successfulJobsHistoryLimit} {.spec.failedJobsHistoryLimit}"
            ),
            "Allow 3 1"
        );
        assert_eq!(
            jsonpath(
                &k,
                &["get", "networkpolicy", "test-network-policy"],
                "{.spec.policyTypes}"
            ),
            "[\"Ingress\"]"
        );
        assert_eq!(
            jsonpath(
                &k,
                &["get", "pv", "task-pv-volume"],
                "{.spec.persistentVolumeReclaimPolicy}"
            ),
            "Retain"
        );
        // kubectl's own generators, and scaling through the scale subresource.
        k.ok(&["create", "job", "once", "--image=sluice/echo"]);
        k.ok(&[
            "create",
            "cronjob",
            "tick",
            "--image=sluice/echo",
            "--schedule=*/5 * * * *",
        ]);
        k.ok(&["scale", "rc", "nginx", "--replicas=5"]);
        assert_eq!(
            jsonpath(&k, &["get", "rc", "nginx"], "{.spec.replicas}"),
            "5"
        );
        // A Job whose pods would restart forever is refused, as by kube-apiserver.
        let out = k
            .command(&["apply", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(
                    b"apiVersion: batch/v1\nkind: Job\nmetadata: {name: forever}\nspec:\n  template:\n    spec:\n      containers: [{name: c, image: x}]\n",
                )?;
                c.wait_with_output()
            })
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("spec.template.spec.restartPolicy"), "{err}");
    }
}

/// Kinds without an OpenAPI v3 entry send kubectl to `/openapi/v2` in protobuf: a kind
/// nobody serves gets kubectl's own `no matches for kind`, a `kind: List` is created item
/// by item, and kubectl validates each item against the v2 definitions (an unknown field
/// in an item is refused before anything is written), as with kube-apiserver.
#[test]
fn unserved_kinds_and_lists_go_through_openapi_v2_in_protobuf() {
    for bin in kubectls() {
        let dir = tempfile::tempdir().unwrap();
        let control = Control::start(dir.path(), &[]);
        let k = Kubectl::new(&bin, &control.kubeconfig, &dir.path().join("cache"));
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path.display().to_string()
        };

        let widget = write(
            "widget.yaml",
            "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec: {}\n",
        );
        let err = k.fails(&["apply", "-f", &widget]);
        assert!(
            err.contains("no matches for kind \"Widget\" in version \"example.com/v1\""),
            "{bin}: {err}"
        );

        let list = write(
            "list.yaml",
            "apiVersion: v1\nkind: List\nitems:\n\
             - {apiVersion: v1, kind: ConfigMap, metadata: {name: a}, data: {x: \"1\"}}\n\
             - {apiVersion: v1, kind: ConfigMap, metadata: {name: b}}\n",
        );
        k.ok(&["create", "-f", &list]);
        assert_eq!(
            jsonpath(
                &k,
                &["get", "configmaps", "a", "b"],
                "{.items[*].metadata.name}"
            ),
            "a b"
        );
        k.ok(&["apply", "-f", &list]);

        let bad = write(
            "bad.yaml",
            "apiVersion: v1\nkind: List\nitems:\n\
             - {apiVersion: v1, kind: ConfigMap, metadata: {name: c}, bogus: 1}\n",
        );
        let err = k.fails(&["apply", "-f", &bad]);
        assert!(
            err.contains("unknown field \"bogus\" in io.k8s.api.core.v1.ConfigMap"),
            "{bin}: {err}"
        );
        k.fails(&["get", "configmap", "c"]);

        // A realistic List validates against the v2 definitions without false alarms.
        let app = write(
            "app.yaml",
            "apiVersion: v1\nkind: List\nitems:\n\
             - apiVersion: apps/v1\n  kind: Deployment\n  metadata: {name: web, labels: {app: web}}\n  spec:\n    replicas: 2\n    selector: {matchLabels: {app: web}}\n    strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 25%, maxUnavailable: 1}}\n    template:\n      metadata: {labels: {app: web}}\n      spec:\n        containers:\n        - name: web\n          image: nginx:1.27\n          ports: [{containerPort: 80, protocol: TCP, name: http}]\n          resources: {limits: {cpu: 500m, memory: 128Mi}}\n          readinessProbe: {httpGet: {path: /, port: http}}\n\
             - apiVersion: v1\n  kind: Service\n  metadata: {name: web}\n  spec:\n    selector: {app: web}\n    ports: [{port: 80, targetPort: http}]\n",
        );
        k.ok(&["apply", "-f", &app]);
        assert_eq!(
            jsonpath(&k, &["get", "deployment", "web"], "{.spec.replicas}"),
            "2"
        );
    }
}
