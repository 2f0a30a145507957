#![allow(clippy::unwrap_used)]
//! The API gaps published manifests ran into, through the real kubectl (each version the
//! suite has): `autoscaling/v1` HorizontalPodAutoscalers as views of `v2` ones,
//! `events.k8s.io/v1` Events as views of core Events, RBAC objects named with colons, the
//! APIService kind, and the fields kube refuses to change once an object exists.

use crate::support;

use serde_json::Value;
use support::{Control, Kubectl, kubectls};

/// `kubectl apply -f -` of `manifest`, expected to fail: its stderr.
fn apply_fails(k: &Kubectl, manifest: &str) -> String {
    fails_with(k, "apply", manifest)
}

/// `kubectl VERB -f -` of `manifest`, expected to fail: its stderr.
fn fails_with(k: &Kubectl, verb: &str, manifest: &str) -> String {
    let out = k.fed(&[verb, "-f", "-"], manifest);
    assert!(
        !out.status.success(),
        "{verb}: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json_of(k: &Kubectl, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&k.ok(&all)).unwrap()
}

const HPA_V1: &str = r#"apiVersion: autoscaling/v1
kind: HorizontalPodAutoscaler
metadata: {name: web, namespace: gaps}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 1
  maxReplicas: 5
  targetCPUUtilizationPercentage: 50
"#;

/// HPA `web` read through `version` of autoscaling.
fn hpa(k: &Kubectl, version: &str) -> Value {
    let resource = format!("horizontalpodautoscalers.{version}.autoscaling");
    json_of(k, &["-n", "gaps", "get", &resource, "web"])
}

/// An HPA written through v1 is the v2 object; what v2 adds survives a v1 round trip.
fn autoscaling_v1(k: &Kubectl) {
    k.apply_stdin(HPA_V1);
    let v2 = hpa(k, "v2");
    assert_eq!(v2["apiVersion"], "autoscaling/v2");
    let cpu = &v2["spec"]["metrics"][0]["resource"];
    assert_eq!(cpu["name"], "cpu");
    assert_eq!(cpu["target"]["type"], "Utilization");
    assert_eq!(cpu["target"]["averageUtilization"], 50);
    // v2 adds a memory metric; v1 shows the CPU target and carries the rest.
    k.ok(&[
        "-n",
        "gaps",
        "patch",
        "horizontalpodautoscalers.v2.autoscaling",
        "web",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/spec/metrics/-","value":{"type":"Resource","resource":{"name":"memory","target":{"type":"AverageValue","averageValue":"100Mi"}}}}]"#,
    ]);
    let v1 = hpa(k, "v1");
    assert_eq!(v1["apiVersion"], "autoscaling/v1");
    assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 50);
    assert!(v1["spec"].get("metrics").is_none());
    // Written back whole through v1 (a read-modify-write by a v1 client): nothing lost.
    let mut changed = v1.clone();
    changed["spec"]["maxReplicas"] = 7.into();
    let out = k.fed(&["replace", "-f", "-"], &changed.to_string());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v2 = hpa(k, "v2");
    assert_eq!(v2["spec"]["maxReplicas"], 7);
    let names: Vec<&str> = v2["spec"]["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["resource"]["name"].as_str())
        .collect();
    assert_eq!(names, ["cpu", "memory"], "{v2}");
    assert!(
        v2["metadata"]["annotations"]
            .get("autoscaling.sluice.dev/v2-metrics")
            .is_none(),
        "the carrying annotation is not stored: {v2}"
    );
    // Tables through both versions.
    assert!(k.ok(&["-n", "gaps", "get", "hpa"]).contains("web"));
    assert!(
        k.ok(&[
            "-n",
            "gaps",
            "get",
            "horizontalpodautoscalers.v1.autoscaling"
        ])
        .contains("web")
    );
}

const EVENT_V1: &str = r#"apiVersion: events.k8s.io/v1
kind: Event
metadata: {name: web.1, namespace: gaps}
eventTime: "2026-11-30T05:00:00.000000Z"
reportingController: example.com/operator
reportingInstance: operator-0
action: Reconcile
reason: Scaled
type: Normal
note: scaled web to 3
regarding: {apiVersion: apps/v1, kind: Deployment, name: web, namespace: gaps}
"#;

/// An Event written through events.k8s.io/v1 is a core Event, and the other way round.
fn events_v1(k: &Kubectl) {
    k.apply_stdin(EVENT_V1);
    let core = json_of(k, &["-n", "gaps", "get", "event", "web.1"]);
    assert_eq!(core["apiVersion"], "v1");
    assert_eq!(core["message"], "scaled web to 3");
    assert_eq!(core["involvedObject"]["name"], "web");
    assert_eq!(core["reportingComponent"], "example.com/operator");
    assert!(
        k.ok(&["-n", "gaps", "get", "events"])
            .contains("scaled web to 3")
    );
    k.ok(&[
        "-n",
        "gaps",
        "create",
        "configmap",
        "noted",
        "--from-literal=a=b",
    ]);
    let listed = json_of(k, &["-n", "gaps", "get", "events.v1.events.k8s.io"]);
    let notes: Vec<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["note"].as_str())
        .collect();
    assert!(notes.contains(&"scaled web to 3"), "{listed}");
    let one = &listed["items"][0];
    assert_eq!(one["apiVersion"], "events.k8s.io/v1");
    assert!(one.get("message").is_none(), "{one}");
}

/// RBAC names are path segments, as kube validates them.
fn rbac_names(k: &Kubectl) {
    k.ok(&[
        "create",
        "clusterrole",
        "system:kube-dns-autoscaler",
        "--verb=get,list,watch",
        "--resource=nodes",
    ]);
    k.ok(&[
        "create",
        "clusterrolebinding",
        "system:kube-dns-autoscaler",
        "--clusterrole=system:kube-dns-autoscaler",
        "--serviceaccount=kube-system:kube-dns-autoscaler",
    ]);
    assert!(
        k.ok(&["get", "clusterrole", "system:kube-dns-autoscaler"])
            .contains("system:kube-dns-autoscaler")
    );
    // (kubectl apply checks the name itself before it asks; create sends it.)
    let err = fails_with(
        k,
        "create",
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: \"50%\", namespace: gaps}\nrules: []\n",
    );
    assert!(
        err.contains("metadata.name: Invalid value: \"50%\": may not contain '%'"),
        "{err}"
    );
    // Other kinds keep their DNS names.
    let err = apply_fails(
        k,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: \"a:b\", namespace: gaps}\n",
    );
    assert!(err.contains("a lowercase RFC 1123 subdomain"), "{err}");
}

const API_SERVICE: &str = r#"apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.metrics.example.com}
spec:
  group: metrics.example.com
  version: v1beta1
  groupPriorityMinimum: 100
  versionPriority: 100
  service: {name: metrics, namespace: gaps}
"#;

/// APIServices are stored and listed, and say they are not served.
fn api_services(k: &Kubectl) {
    k.apply_stdin(API_SERVICE);
    let a = json_of(k, &["get", "apiservice", "v1beta1.metrics.example.com"]);
    let available = &a["status"]["conditions"][0];
    assert_eq!(available["type"], "Available");
    assert_eq!(available["status"], "False");
    assert_eq!(available["reason"], "NotServed");
    let err = apply_fails(k, &API_SERVICE.replace("v1beta1.metrics", "v2.metrics"));
    assert!(
        err.contains("metadata.name: Invalid value: \"v2.metrics.example.com\"")
            && err.contains("v1beta1.metrics.example.com"),
        "{err}"
    );
}

const DEPLOYMENT: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: gaps}
spec:
  replicas: 0
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: "sluice/echo:1"}]
"#;

const FROZEN: &str = r#"apiVersion: v1
kind: ConfigMap
metadata: {name: frozen, namespace: gaps}
immutable: true
data: {level: "1"}
"#;

const SET: &str = r#"apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: gaps}
spec:
  replicas: 0
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: db, image: "sluice/echo:1"}]
"#;

/// The fields kube refuses to change, refused with kube's field paths and words; what
/// may change still does.
fn immutable_fields(k: &Kubectl) {
    k.apply_stdin(DEPLOYMENT);
    let err = apply_fails(k, &DEPLOYMENT.replace("app: web", "app: other"));
    assert!(
        err.contains("spec.selector: Invalid value:") && err.contains("field is immutable"),
        "{err}"
    );
    k.ok(&["-n", "gaps", "scale", "deployment", "web", "--replicas=1"]);
    k.apply_stdin(FROZEN);
    let err = apply_fails(k, &FROZEN.replace("level: \"1\"", "level: \"2\""));
    assert!(
        err.contains("data: Forbidden: field is immutable when `immutable` is set"),
        "{err}"
    );
    k.apply_stdin(SET);
    let err = apply_fails(k, &SET.replace("serviceName: db", "serviceName: other"));
    assert!(
        err.contains("spec: Forbidden: updates to statefulset spec for fields other than"),
        "{err}"
    );
    k.ok(&["-n", "gaps", "scale", "statefulset", "db", "--replicas=2"]);
    k.ok(&[
        "-n",
        "gaps",
        "create",
        "job",
        "once",
        "--image=busybox",
        "--",
        "true",
    ]);
    let err = k.fails(&["-n", "gaps", "set", "image", "job/once", "once=busybox:2"]);
    assert!(
        err.contains("spec.template: Invalid value:") && err.contains("field is immutable"),
        "{err}"
    );
}

#[test]
fn api_versions_names_and_immutable_fields_as_kube_serves_them() {
    for bin in kubectls() {
        let dir = tempfile::tempdir().unwrap();
        let control = Control::start(dir.path(), &[]);
        let k = Kubectl::new(&bin, &control.kubeconfig, &dir.path().join("cache"));
        k.ok(&["create", "namespace", "gaps"]);
        autoscaling_v1(&k);
        events_v1(&k);
        rbac_names(&k);
        api_services(&k);
        immutable_fields(&k);
    }
}
