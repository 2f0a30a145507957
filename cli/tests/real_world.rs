#![allow(clippy::unwrap_used)]
//! Manifests written by others, applied to a logical cluster with the real kubectl: the
//! Kubernetes project's guestbook, its StatefulSet examples (Cassandra, CockroachDB, etcd,
//! MySQL Galera, MySQL, nginx, Redis, ZooKeeper), kubectl's and the user guide's examples,
//! fetched by `e2e/manifests/fetch` from Debian's source package of Kubernetes 1.20.2.
//! Each app goes into a namespace of its own, placed on a physical cluster; every object is
//! then classified: a workload *runs* when its downstream copy made its Pods and the
//! cluster bound them; another object that travels is *synced* when its copy is there; a
//! kind that does not travel (a PodTemplate) is accepted upstream. Objects of API versions
//! Kubernetes has removed are refused (as Kubernetes 1.35 refuses them) and not counted.
//! The seeds' bar: 95% of the rest just work.
//!
//! The node agents run built-in images only: these manifests' commands are for their own
//! images, not for this machine, so their containers wait with `ImageNotBuiltIn` — the
//! container runtime is the one part the local clusters do not have.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{DevUp, Kubectl};

/// The apps: a namespace each, the directory (not recursive unless marked) holding their
/// manifests, and the cluster they are placed on. Their Pods request 5.8 CPUs in all and a
/// local cluster's node has 2, so they are spread over four clusters, as an operator would
/// size a clusterset (on fewer, the surplus Pods stay Pending with `Insufficient cpu`, as
/// on any cluster).
const APPS: &[(&str, &str, bool, &str)] = &[
    (
        "guestbook",
        "test/e2e/testing-manifests/guestbook",
        false,
        "south",
    ),
    (
        "guestbook-legacy",
        "test/e2e/testing-manifests/guestbook/legacy",
        false,
        "south",
    ),
    (
        "cassandra",
        "test/e2e/testing-manifests/statefulset/cassandra",
        false,
        "west",
    ),
    (
        "cockroachdb",
        "test/e2e/testing-manifests/statefulset/cockroachdb",
        false,
        "east",
    ),
    (
        "etcd",
        "test/e2e/testing-manifests/statefulset/etcd",
        false,
        "east",
    ),
    (
        "mysql-galera",
        "test/e2e/testing-manifests/statefulset/mysql-galera",
        false,
        "south",
    ),
    (
        "mysql-upgrade",
        "test/e2e/testing-manifests/statefulset/mysql-upgrade",
        false,
        "north",
    ),
    (
        "nginx",
        "test/e2e/testing-manifests/statefulset/nginx",
        false,
        "west",
    ),
    (
        "redis",
        "test/e2e/testing-manifests/statefulset/redis",
        false,
        "west",
    ),
    (
        "zookeeper",
        "test/e2e/testing-manifests/statefulset/zookeeper",
        false,
        "north",
    ),
    (
        "kubectl-examples",
        "test/e2e/testing-manifests/kubectl",
        false,
        "east",
    ),
    (
        "user-guide",
        "test/fixtures/doc-yaml/user-guide",
        true,
        "east",
    ),
    (
        "ingress-http",
        "test/e2e/testing-manifests/ingress/http",
        false,
        "north",
    ),
];

/// API versions Kubernetes no longer serves (removed in 1.16–1.25); Kubernetes 1.35
/// refuses objects of them, and so does Sluice.
const REMOVED: &[&str] = &[
    "extensions/v1beta1",
    "apps/v1beta1",
    "apps/v1beta2",
    "policy/v1beta1",
    "batch/v1beta1",
    "networking.k8s.io/v1beta1",
    "apiextensions.k8s.io/v1beta1",
    "rbac.authorization.k8s.io/v1beta1",
];

/// Where the corpus is: fetched (checksum checked) when it is not there yet.
fn corpus() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../e2e/manifests/fetch");
    let out = Command::new(&script).output().unwrap();
    assert!(
        out.status.success(),
        "{} failed (it downloads Debian's kubernetes source package): {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The manifest files of an app.
fn files(dir: &Path, recursive: bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if recursive {
                out.extend(files(&path, true));
            }
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let manifest = [".yaml", ".yml", ".json", ".yaml.in", ".json.in"]
            .iter()
            .any(|ext| name.ends_with(ext));
        // Data files beside the manifests (the update demo's page content) are not objects.
        if manifest && std::fs::read_to_string(&path).unwrap().contains("kind") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// Fill the e2e templates' image placeholders (`{{.AgnhostImage}}`) as Kubernetes' e2e
/// framework does, with an image name.
fn fill(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{.") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 3..];
        let Some(end) = after.find("}}") else {
            rest = &rest[start..];
            break;
        };
        let name = after[..end].trim_end_matches("Image").to_lowercase();
        out.push_str(&format!("registry.k8s.io/e2e-test-images/{name}:1.0"));
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    /// A workload whose Pods the downstream controllers made and the cluster bound.
    Runs,
    /// An object that travels, present downstream.
    Synced,
    /// A namespaced kind that does not travel, accepted by the logical cluster.
    Upstream,
    /// Cluster-scoped: not part of an app, not counted.
    ClusterScoped,
    /// Of an API version Kubernetes removed: refused, not counted.
    Removed,
    Failed(String),
}

impl Outcome {
    fn counted(&self) -> bool {
        !matches!(self, Outcome::ClusterScoped | Outcome::Removed)
    }
    fn works(&self) -> bool {
        matches!(self, Outcome::Runs | Outcome::Synced | Outcome::Upstream)
    }
}

/// Resources that travel (as `kubectl -o name` names them), and whether they run Pods.
fn travels(resource: &str) -> Option<bool> {
    match resource {
        "pod"
        | "deployment.apps"
        | "replicaset.apps"
        | "statefulset.apps"
        | "daemonset.apps"
        | "replicationcontroller"
        | "job.batch"
        | "cronjob.batch" => Some(true),
        "service"
        | "configmap"
        | "secret"
        | "serviceaccount"
        | "persistentvolumeclaim"
        | "ingress.networking.k8s.io"
        | "networkpolicy.networking.k8s.io"
        | "horizontalpodautoscaler.autoscaling"
        | "poddisruptionbudget.policy" => Some(false),
        _ => None,
    }
}

const CLUSTER_SCOPED: &[&str] = &[
    "persistentvolume",
    "namespace",
    "storageclass.storage.k8s.io",
];

/// Whether the downstream copy `d` of a workload made its Pods and they are bound.
fn made_pods(resource: &str, d: &Value, pods: &[Value]) -> Result<(), String> {
    let n = |f: &str| d["status"][f].as_i64().unwrap_or(0);
    let made = match resource {
        "pod" => 1,
        "job.batch" => n("active") + n("succeeded") + n("failed"),
        "daemonset.apps" => n("currentNumberScheduled"),
        "cronjob.batch" => 1,
        _ => n("replicas"),
    };
    if made == 0 {
        return Err(format!("no pods made downstream: status {}", d["status"]));
    }
    if resource == "pod" {
        let pod = pods
            .iter()
            .find(|p| p["metadata"]["name"] == d["metadata"]["name"]);
        return match pod {
            Some(p) if bound(p) => Ok(()),
            _ => Err(format!("pod not bound downstream: {}", d["status"])),
        };
    }
    Ok(())
}

fn bound(p: &Value) -> bool {
    p["spec"]["nodeName"]
        .as_str()
        .is_some_and(|n| !n.is_empty())
}

/// One applied file's objects as kubectl names them, and the errors it printed.
fn apply(control: &Kubectl, ns: &str, path: &Path) -> (Vec<String>, Vec<String>) {
    let text = fill(&std::fs::read_to_string(path).unwrap());
    let tmp = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tmp.path(), text).unwrap();
    let out = control.run(&[
        "apply",
        "-n",
        ns,
        "-f",
        tmp.path().to_str().unwrap(),
        "-o",
        "name",
    ]);
    let names = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .filter(|l| l.contains('/'))
        .collect();
    let errors = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.to_lowercase().starts_with("error") || l.starts_with("resource mapping"))
        .map(str::to_string)
        .collect();
    (names, errors)
}

fn json(k: &Kubectl, args: &[&str]) -> Value {
    let out = k.run(args);
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

#[test]
fn real_world_manifests_just_work_on_the_clusters() {
    let root = corpus();
    let (dev, _) = DevUp::start_with("east,west,north,south", &["--builtin-images-only"]);
    let control = dev.kubectl_control();
    let clusters: BTreeMap<&str, Kubectl> = ["east", "west", "north", "south"]
        .into_iter()
        .map(|c| (c, dev.kubectl(c)))
        .collect();

    // Apply every app: (app, kubectl name or failed document) → outcome so far.
    let mut outcomes: BTreeMap<(String, String), Outcome> = BTreeMap::new();
    for (app, dir, recursive, cluster) in APPS {
        control.apply_stdin(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {app}\n  labels: {{sluice.dev/cluster: {cluster}}}\n"
        ));
        for file in files(&root.join(dir), *recursive) {
            let (names, errors) = apply(&control, app, &file);
            let rel = file.strip_prefix(&root).unwrap().display().to_string();
            for n in names {
                outcomes.insert((app.to_string(), n), Outcome::Failed("pending".into()));
            }
            for e in errors {
                let removed = REMOVED
                    .iter()
                    .any(|v| e.contains(&format!("version \"{v}\"")));
                let outcome = if removed {
                    Outcome::Removed
                } else {
                    Outcome::Failed(e.clone())
                };
                outcomes.insert((app.to_string(), format!("{rel}: {e}")), outcome);
            }
        }
    }

    // Classify, until everything works or the deadline passes.
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let mut pods_by_ns: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for (app, _, _, cluster) in APPS {
            let down = control.downstream("root", app);
            let pods = json(
                &clusters[cluster],
                &["-n", &down, "get", "pods", "-o", "json"],
            );
            pods_by_ns.insert(
                app.to_string(),
                pods["items"].as_array().cloned().unwrap_or_default(),
            );
        }
        for ((app, name), outcome) in outcomes.iter_mut() {
            if matches!(outcome, Outcome::Removed) || name.contains(": ") {
                continue;
            }
            let (_, _, _, cluster) = APPS.iter().find(|a| a.0 == app).unwrap();
            let (resource, _) = name.split_once('/').unwrap();
            *outcome = if CLUSTER_SCOPED.contains(&resource) {
                Outcome::ClusterScoped
            } else {
                match travels(resource) {
                    None => Outcome::Upstream,
                    Some(workload) => {
                        let down = control.downstream("root", app);
                        let d = json(
                            &clusters[cluster],
                            &["-n", &down, "get", name, "-o", "json"],
                        );
                        if d.is_null() {
                            Outcome::Failed(format!("not in {cluster}"))
                        } else if !workload {
                            Outcome::Synced
                        } else {
                            match made_pods(resource, &d, &pods_by_ns[app.as_str()]) {
                                Ok(()) => Outcome::Runs,
                                Err(e) => Outcome::Failed(e),
                            }
                        }
                    }
                }
            };
        }
        // Every Pod of every app is bound to its node.
        let unbound: Vec<String> = pods_by_ns
            .iter()
            .flat_map(|(app, pods)| {
                pods.iter()
                    .filter(|p| !bound(p))
                    .map(move |p| format!("{app}/{}", p["metadata"]["name"]))
            })
            .collect();
        // Done when nothing can still come: every object applied works (apply errors
        // stay what they are) and every Pod is bound.
        let done = unbound.is_empty()
            && outcomes
                .iter()
                .all(|((_, name), o)| name.contains(": ") || !matches!(o, Outcome::Failed(_)));
        if done || Instant::now() > deadline {
            report(&outcomes, &unbound);
            let counted = outcomes.values().filter(|o| o.counted()).count();
            let works = outcomes.values().filter(|o| o.works()).count();
            assert!(counted >= 60, "the corpus holds {counted} objects to count");
            assert!(
                works * 100 >= counted * 95,
                "{works} of {counted} objects work ({}%)",
                works * 100 / counted.max(1)
            );
            assert!(unbound.is_empty(), "pods not bound: {unbound:?}");
            break;
        }
        std::thread::sleep(Duration::from_secs(2));
    }

    // The removed API versions are refused, as Kubernetes refuses them.
    assert!(
        outcomes.values().any(|o| *o == Outcome::Removed),
        "the corpus has objects of removed API versions"
    );
    // The containers reached the node's runtime and wait for images it does not have.
    let south = &clusters["south"];
    let down = control.downstream("root", "guestbook");
    let reasons = south.ok(&[
        "-n",
        &down,
        "get",
        "pods",
        "-o",
        "jsonpath={.items[*].status.containerStatuses[*].state.waiting.reason}",
    ]);
    assert!(reasons.contains("ImageNotBuiltIn"), "reasons: {reasons}");
}

fn report(outcomes: &BTreeMap<(String, String), Outcome>, unbound: &[String]) {
    let mut by: BTreeMap<String, usize> = BTreeMap::new();
    for o in outcomes.values() {
        let key = match o {
            Outcome::Failed(_) => "Failed".to_string(),
            o => format!("{o:?}"),
        };
        *by.entry(key).or_default() += 1;
    }
    let counted = outcomes.values().filter(|o| o.counted()).count();
    let works = outcomes.values().filter(|o| o.works()).count();
    println!("real-world manifests: {works} of {counted} objects work; {by:?}");
    for ((app, name), o) in outcomes {
        if !o.works() {
            println!("  {app}: {name}: {o:?}");
        }
    }
    if !unbound.is_empty() {
        println!("  pods not bound: {unbound:?}");
    }
}
