#![allow(clippy::unwrap_used)]
//! The Helm charts (`charts/`), installed with real Helm (Helm v4's Go SDK through PyPI
//! `helm-python-sdk`, `tests/python/helm.py`) onto the clusters of `sluice dev up --bare`,
//! whose node agents run the `sluice` image as this binary (issue: Helm charts).

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use sluice_test_support::etcd::{Etcd, free_port};
use support::{DevUp, Kubectl, eventually, kubectls, sluice_bin};

fn chart(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("charts")
        .join(name)
}

/// Run `tests/python/helm.py`; its stdout, or its stderr as the error.
fn helm(args: &[&str]) -> Result<String, String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/helm.py");
    let out = Command::new("python3")
        .arg(script)
        .args(args)
        .output()
        .expect("python3");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The agent chart's values for `cluster` of a bare clusterset: its parts listen where
/// `dev up --bare` told the node agents and wrote in the cluster's descriptor.
fn agent_values(state: &Path, cluster: &str) -> Value {
    let d: Value = serde_json::from_slice(
        &std::fs::read(state.join("clusters").join(format!("{cluster}.json"))).unwrap(),
    )
    .unwrap();
    let port = |k: &str| -> u16 {
        d[k].as_str()
            .unwrap()
            .rsplit(':')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    json!({
        "cluster": cluster,
        "dns": {"port": port("dns")},
        "dataplane": {"ingressPort": port("ingress"), "gatewayPort": port("gateway")},
    })
}

#[test]
fn charts_lint_clean_and_carry_the_crds_the_binary_serves() {
    // As charts/README.md says: `helm lint --strict` of each chart with each of its
    // `ci/*-values.yaml` (chart-testing's convention); only the "icon is recommended" kind
    // of note (severity info) may remain.
    for name in ["sluice-agent", "sluice-control", "sluice-mcs"] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(chart(name).join("ci"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().ends_with("-values.yaml"))
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{name} has no ci/*-values.yaml");
        for values in files {
            let report = helm(&[
                "lint",
                chart(name).to_str().unwrap(),
                values.to_str().unwrap(),
            ])
            .unwrap_or_else(|e| panic!("lint {name} -f {}: {e}", values.display()));
            let report: Value = serde_json::from_str(&report).unwrap();
            let problems: Vec<&Value> = report["messages"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["severity"].as_i64().unwrap_or(0) > 1)
                .collect();
            assert!(
                problems.is_empty(),
                "lint {name} -f {}: {report}",
                values.display()
            );
        }
    }

    // The agent chart's CRDs are the ones the binary serves and prints.
    let printed = Command::new(sluice_bin())
        .args(["mcs", "crds"])
        .output()
        .unwrap();
    let printed: Value = serde_json::from_slice(&printed.stdout).unwrap();
    let in_chart = Command::new("python3")
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d]))",
        ])
        .arg(chart("sluice-agent").join("crds").join("mcs.yaml"))
        .output()
        .unwrap();
    assert!(in_chart.status.success(), "{in_chart:?}");
    let in_chart: Value = serde_json::from_slice(&in_chart.stdout).unwrap();
    assert_eq!(
        in_chart, printed["items"],
        "charts/sluice-agent/crds/mcs.yaml differs from `sluice mcs crds`"
    );
}

/// A control plane installed from its chart: the credentials directory its Secret was
/// made from, where it answers, and an admin kubeconfig made from the two.
struct ControlPlane {
    pki: PathBuf,
    url: String,
    kubeconfig: PathBuf,
}

impl ControlPlane {
    /// `sluice kubeconfig --data-dir <pki> --server <url> [extra]`, as NOTES.txt says.
    fn kubeconfig(pki: &Path, url: &str, extra: &[&str]) -> Vec<u8> {
        let out = Command::new(sluice_bin())
            .args(["kubeconfig", "--data-dir"])
            .arg(pki)
            .args(["--server", url])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        out.stdout
    }
}

/// The control plane's credentials and the tunnel certificates of `cluster`, as Secrets
/// in `sluice-system` of that cluster.
fn secrets_for(k: &Kubectl, control: &ControlPlane, tunnel: &Path, cluster: &str) {
    // Each part's own identity on the control plane.
    let dir = tempfile::tempdir().unwrap();
    for (part, extra) in [
        ("syncer", ["--syncer", cluster]),
        ("dataplane", ["--component", "dataplane"]),
        ("dns", ["--component", "dns"]),
    ] {
        std::fs::write(
            dir.path().join(format!("{part}.kubeconfig")),
            ControlPlane::kubeconfig(&control.pki, &control.url, &extra),
        )
        .unwrap();
    }
    k.ok(&["create", "namespace", "sluice-system"]);
    k.ok(&[
        "-n",
        "sluice-system",
        "create",
        "secret",
        "generic",
        "sluice-control-plane",
        &format!("--from-file={}", dir.path().display()),
    ]);
    k.ok(&[
        "-n",
        "sluice-system",
        "create",
        "secret",
        "generic",
        "sluice-tunnel",
        &format!(
            "--from-file=tls.crt={}",
            tunnel.join(format!("{cluster}.crt")).display()
        ),
        &format!(
            "--from-file=tls.key={}",
            tunnel.join(format!("{cluster}.key")).display()
        ),
        &format!("--from-file=ca.crt={}", tunnel.join("ca.crt").display()),
    ]);
}

/// Register each bare cluster with the control plane, as `dev up` does, with the addresses
/// its charts' parts will answer on.
fn register(control: &Kubectl, state: &Path, clusters: &[&str]) {
    for (i, name) in clusters.iter().enumerate() {
        let d: Value = serde_json::from_slice(
            &std::fs::read(state.join("clusters").join(format!("{name}.json"))).unwrap(),
        )
        .unwrap();
        control.apply_stdin(
            &json!({
                "apiVersion": "sluice.dev/v1alpha1", "kind": "Cluster",
                "metadata": {"name": name, "labels": {"sluice.dev/local": "true", "sluice.dev/index": i.to_string()}},
                "spec": {"api": d["api"], "clusterId": name, "gateways": [d["gateway"]], "ingresses": [d["ingress"]]},
            })
            .to_string(),
        );
    }
}

/// The control plane from its chart, in east's namespace `sluice-control`, on east's node
/// address (host network), with credentials from `sluice pki` and `values` besides.
/// Returns it with the values it was installed with.
fn install_control_plane(
    east: &Kubectl,
    east_kubeconfig: &Path,
    dir: &Path,
    values: Value,
) -> (ControlPlane, Value) {
    let pki = dir.join("pki");
    let made = Command::new(sluice_bin())
        .args(["pki", "--out"])
        .arg(&pki)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    east.ok(&["create", "namespace", "sluice-control"]);
    east.ok(&[
        "-n",
        "sluice-control",
        "create",
        "secret",
        "generic",
        "sluice-control-pki",
        &format!("--from-file={}", pki.display()),
    ]);
    // East's node address (`dev up`: 127.(20+i).0.1), where a host-network Pod listens.
    let node = "127.20.0.1";
    let port = std::net::TcpListener::bind((node, 0))
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let mut values = values;
    values["hostNetwork"] = json!(true);
    values["port"] = json!(port);
    if let Err(e) = helm(&[
        "install",
        east_kubeconfig.to_str().unwrap(),
        "sluice-control",
        "control",
        chart("sluice-control").to_str().unwrap(),
        &values.to_string(),
    ]) {
        let pods = east.run(&["-n", "sluice-control", "get", "pods,pvc", "-o", "yaml"]);
        let logs = east.run(&["-n", "sluice-control", "logs", "deployment/control"]);
        panic!(
            "install the control plane: {e}\n{}\n{}{}",
            String::from_utf8_lossy(&pods.stdout),
            String::from_utf8_lossy(&logs.stdout),
            String::from_utf8_lossy(&logs.stderr)
        );
    }
    let url = format!("https://{node}:{port}");
    let kubeconfig = dir.join("admin.kubeconfig");
    std::fs::write(&kubeconfig, ControlPlane::kubeconfig(&pki, &url, &[])).unwrap();
    (
        ControlPlane {
            pki,
            url,
            kubeconfig,
        },
        values,
    )
}

/// The UIDs of the control plane's pods in east.
fn control_pods(east: &Kubectl) -> String {
    east.ok(&[
        "-n",
        "sluice-control",
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/instance=control",
        "-o",
        "jsonpath={.items[*].metadata.uid}",
    ])
}

/// `helm upgrade` of the control chart with `values`; waits until one new pod replaced
/// the old one.
fn upgrade_control_plane(east: &Kubectl, east_kubeconfig: &Path, values: &Value) {
    let before = control_pods(east);
    helm(&[
        "upgrade",
        east_kubeconfig.to_str().unwrap(),
        "sluice-control",
        "control",
        chart("sluice-control").to_str().unwrap(),
        &values.to_string(),
    ])
    .unwrap();
    assert!(
        eventually(Duration::from_secs(60), || {
            let now = control_pods(east);
            !now.is_empty() && now != before && !now.contains(' ')
        }),
        "the control plane's pod was not replaced"
    );
}

#[test]
fn control_chart_keeps_the_embedded_store_on_its_claim() {
    let (dev, _) = DevUp::start_with("east", &["--bare"]);
    let dir = tempfile::tempdir().unwrap();
    let east = dev.kubectl("east");
    let east_kubeconfig = dev.state.join("clusters").join("east.kubeconfig");
    // The chart's defaults: the embedded store on a PersistentVolumeClaim.
    let (control, values) = install_control_plane(&east, &east_kubeconfig, dir.path(), json!({}));
    assert_eq!(
        east.ok(&[
            "-n",
            "sluice-control",
            "get",
            "pvc",
            "control-data",
            "-o",
            "jsonpath={.status.phase}"
        ]),
        "Bound"
    );
    let kc = Kubectl::new(
        &kubectls().remove(0),
        &control.kubeconfig,
        &dir.path().join("cache-control"),
    );
    kc.ok(&["create", "namespace", "kept"]);
    kc.ok(&[
        "-n",
        "kept",
        "create",
        "configmap",
        "kept",
        "--from-literal=a=b",
    ]);

    // A new pod on the same claim: what the old one stored is there.
    let mut values = values;
    values["auditLog"] = json!({"enabled": true});
    upgrade_control_plane(&east, &east_kubeconfig, &values);
    assert!(
        eventually(Duration::from_secs(60), || kc
            .run(&[
                "-n",
                "kept",
                "get",
                "configmap",
                "kept",
                "-o",
                "jsonpath={.data.a}"
            ])
            .stdout
            == b"b"),
        "the control plane lost what it stored when its pod was replaced"
    );

    // The chart's claim goes with the release.
    helm(&[
        "uninstall",
        east_kubeconfig.to_str().unwrap(),
        "sluice-control",
        "control",
    ])
    .unwrap();
    let left = || {
        east.ok(&[
            "get",
            "deployments,replicasets,pods,services,serviceaccounts,persistentvolumeclaims",
            "-A",
            "-l",
            "app.kubernetes.io/instance=control",
            "-o",
            "name",
        ])
    };
    assert!(
        eventually(Duration::from_secs(60), || left().trim().is_empty()),
        "left behind by the control chart: {}",
        left()
    );
}

#[test]
fn agent_and_mcs_charts_make_a_working_clusterset_on_bare_clusters() {
    let (dev, _) = DevUp::start_with("east,west", &["--bare"]);
    let dir = tempfile::tempdir().unwrap();
    let east = dev.kubectl("east");
    let east_kubeconfig = dev.state.join("clusters").join("east.kubeconfig");

    // The Prometheus Operator's ServiceMonitor kind exists in both clusters, so every
    // chart adds its ServiceMonitor.
    for cluster in ["east", "west"] {
        dev.kubectl(cluster).apply_stdin(SERVICE_MONITOR_CRD);
    }

    // A value the schema refuses never reaches a cluster: Helm's own message says why.
    for (name, bad, says) in [
        ("sluice-agent", json!({"cluster": "East_1"}), "/cluster"),
        (
            "sluice-agent",
            json!({"cluster": "east", "dns": {"port": 70000}}),
            "/dns/port",
        ),
        (
            "sluice-agent",
            json!({"cluster": "east", "tunnel": {"secretName": "t", "transport": "carrier-pigeon"}}),
            "/tunnel/transport",
        ),
        (
            "sluice-agent",
            json!({"cluster": "east", "typo": true}),
            "typo",
        ),
        // Replicas share one store only in etcd.
        ("sluice-control", json!({"replicas": 2}), "/storage/type"),
        (
            "sluice-control",
            json!({"storage": {"type": "etcd"}}),
            "/etcd/endpoints",
        ),
    ] {
        let err = helm(&[
            "install",
            east_kubeconfig.to_str().unwrap(),
            "sluice-system",
            "refused",
            chart(name).to_str().unwrap(),
            &bad.to_string(),
        ])
        .unwrap_err();
        assert!(
            err.contains("values don't meet the specifications of the schema")
                && err.contains(says),
            "{name} {bad}: {err}"
        );
    }
    // Refused before anything was written: no release, no object.
    assert_eq!(
        east.ok(&[
            "get",
            "secrets,serviceaccounts",
            "-A",
            "-l",
            "owner=helm",
            "-o",
            "name"
        ]),
        ""
    );

    // The control plane from its chart, on a real etcd (the chart's etcd option).
    let etcd = Etcd::start_member(
        "charts",
        &dir.path().join("etcd"),
        free_port(),
        free_port(),
        None,
    );
    etcd.wait_healthy(Duration::from_secs(60));
    let (control, control_values) = install_control_plane(
        &east,
        &east_kubeconfig,
        dir.path(),
        json!({
            "storage": {"type": "etcd"},
            "etcd": {"endpoints": [etcd.url], "prefix": "/charts/"},
            "auditLog": {"enabled": true},
        }),
    );
    let tunnel = dir.path().join("tunnel");
    let certs = Command::new(sluice_bin())
        .args([
            "tunnel",
            "certs",
            "--clusterset",
            "sluice",
            "--clusters",
            "east,west",
            "--out",
        ])
        .arg(&tunnel)
        .output()
        .unwrap();
    assert!(certs.status.success(), "{certs:?}");
    let kc = Kubectl::new(
        &kubectls().remove(0),
        &control.kubeconfig,
        &dir.path().join("cache-control"),
    );
    register(&kc, &dev.state, &["east", "west"]);

    for cluster in ["east", "west"] {
        let k = dev.kubectl(cluster);
        secrets_for(&k, &control, &tunnel, cluster);
        let kubeconfig = dev
            .state
            .join("clusters")
            .join(format!("{cluster}.kubeconfig"));
        let out = helm(&[
            "install",
            kubeconfig.to_str().unwrap(),
            "sluice-system",
            "agent",
            chart("sluice-agent").to_str().unwrap(),
            &agent_values(&dev.state, cluster).to_string(),
        ]);
        if let Err(e) = &out {
            let pods = k.run(&["-n", "sluice-system", "get", "pods", "-o", "yaml"]);
            panic!(
                "install on {cluster}: {e}\n{}",
                String::from_utf8_lossy(&pods.stdout)
            );
        }
    }

    // An ordinary Deployment in the logical cluster runs in east, placed by the control
    // plane and carried by the chart's syncer.
    kc.apply_stdin(support::clusterset::APP);
    let east_named = dev.kubectl("east").with_installation(&control.pki);
    assert!(
        eventually(Duration::from_secs(90), || support::clusterset::available(
            &east_named
        ) == 2),
        "web does not run in east"
    );

    // The MCS controller, from its chart, in east: it reaches each member with the
    // identity the agent chart made there, and the control plane with its kubeconfig.
    let members = tempfile::tempdir().unwrap();
    for cluster in ["east", "west"] {
        let token = dev.kubectl(cluster).ok(&[
            "-n",
            "sluice-system",
            "create",
            "token",
            "agent-mcs-member",
            "--duration=48h",
        ]);
        std::fs::write(
            members.path().join(format!("{cluster}.kubeconfig")),
            member_kubeconfig(&dev.state, cluster, token.trim()),
        )
        .unwrap();
    }
    east.ok(&[
        "-n",
        "sluice-system",
        "create",
        "secret",
        "generic",
        "sluice-mcs-members",
        &format!("--from-file={}", members.path().display()),
    ]);
    let mcs = dir.path().join("mcs.kubeconfig");
    std::fs::write(
        &mcs,
        ControlPlane::kubeconfig(&control.pki, &control.url, &["--component", "mcs"]),
    )
    .unwrap();
    east.ok(&[
        "-n",
        "sluice-system",
        "create",
        "secret",
        "generic",
        "sluice-mcs-control-plane",
        &format!("--from-file={}", mcs.display()),
    ]);
    helm(&[
        "install",
        east_kubeconfig.to_str().unwrap(),
        "sluice-system",
        "mcs",
        chart("sluice-mcs").to_str().unwrap(),
        "{}",
    ])
    .unwrap();

    // web, placed in east, answers in west through west's VIP for it and its clusterset
    // DNS name, served by the charts' dataplane and DNS server.
    let west = dev.kubectl("west").with_installation(&control.pki);
    let vip = || support::clusterset::vip_of_web(&west).trim().to_string();
    assert!(
        eventually(Duration::from_secs(90), || !vip().is_empty()
            && support::http_get(&vip(), 80, "/").is_some()),
        "web does not answer through west's VIP"
    );
    let answer = support::http_get(&vip(), 80, "/").unwrap();
    assert_eq!(answer["cluster"], "east", "{answer}");
    let name = format!(
        "web.{}.svc.clusterset.local",
        support::clusterset::downstream_ns(&west)
    );
    let dns = agent_values(&dev.state, "west")["dns"]["port"]
        .as_u64()
        .unwrap();
    let dig = Command::new("dig")
        .args(["+short", "@127.21.0.1", "-p", &dns.to_string(), &name])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&dig.stdout).trim(),
        vip(),
        "{dig:?}"
    );

    // Each chart made its ServiceMonitor, over its metrics Services.
    assert_eq!(
        east.ok(&[
            "get",
            "servicemonitors",
            "-A",
            "-o",
            "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name} {end}",
        ])
        .trim(),
        "sluice-control/control sluice-system/agent sluice-system/mcs"
    );

    // The MCS controller reported on each member with its own identity (a status patch).
    for cluster in ["east", "west"] {
        assert!(
            eventually(Duration::from_secs(60), || kc
                .ok(&[
                    "get",
                    "clusters.sluice.dev",
                    cluster,
                    "-o",
                    "jsonpath={.status.conditions[?(@.type==\"MCSMember\")].status}",
                ])
                .trim()
                == "True"),
            "{cluster} is not an MCS member"
        );
    }
    // Each part spoke to the control plane as itself, and was never refused (its audit
    // log, in the pod's data volume on east's node).
    let volumes = dev.state.join("clusters").join("east").join("volumes");
    let mut audit = String::new();
    for pod in std::fs::read_dir(&volumes).unwrap() {
        let log = pod.unwrap().path().join("data").join("audit.log");
        audit.push_str(&std::fs::read_to_string(&log).unwrap_or_default());
    }
    let audit = Audit::parse(&audit);
    let users = audit.users();
    for user in [
        "system:sluice:syncer:east",
        "system:sluice:syncer:west",
        "system:sluice:component:dataplane",
        "system:sluice:component:dns",
        "system:sluice:component:mcs",
    ] {
        assert!(users.contains(user), "no request as {user}: {users:?}");
    }
    let refused = audit.refused("system:sluice:");
    assert!(
        refused.is_empty(),
        "refused by the control plane: {refused:#?}"
    );
    // And an identity reaches no further than its part needs.
    let dns_kubeconfig = dir.path().join("dns.kubeconfig");
    std::fs::write(
        &dns_kubeconfig,
        ControlPlane::kubeconfig(&control.pki, &control.url, &["--component", "dns"]),
    )
    .unwrap();
    let as_dns = Kubectl::new(
        &kubectls().remove(0),
        &dns_kubeconfig,
        &dir.path().join("cache-dns"),
    );
    for args in [
        &["get", "secrets", "-A"][..],
        &["-n", "shop", "get", "deployments"][..],
        &[
            "patch",
            "clusters.sluice.dev",
            "east",
            "--type=merge",
            "-p",
            r#"{"spec":{"gateways":[]}}"#,
        ][..],
    ] {
        let out = as_dns.run(args);
        assert!(
            !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("Forbidden"),
            "dns {args:?}: {out:?}"
        );
    }
    assert!(as_dns.run(&["get", "clusters.sluice.dev"]).status.success());

    // An upgrade that changes one part's values rolls that part's pods, not the others'.
    let pods = |k: &Kubectl, component: &str| {
        k.ok(&[
            "-n",
            "sluice-system",
            "get",
            "pods",
            "-l",
            &format!("app.kubernetes.io/component={component}"),
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ])
    };
    let (syncer_before, dns_before) = (pods(&west, "syncer"), pods(&west, "dns"));
    let mut values = agent_values(&dev.state, "west");
    values["dns"]["adminPort"] = json!(9154);
    let west_kubeconfig = dev.state.join("clusters").join("west.kubeconfig");
    helm(&[
        "upgrade",
        west_kubeconfig.to_str().unwrap(),
        "sluice-system",
        "agent",
        chart("sluice-agent").to_str().unwrap(),
        &values.to_string(),
    ])
    .unwrap_or_else(|e| {
        let state = west.run(&[
            "-n",
            "sluice-system",
            "get",
            "pods,replicasets",
            "-o",
            "wide",
        ]);
        let logs = west.run(&[
            "-n",
            "sluice-system",
            "logs",
            "-l",
            "app.kubernetes.io/component=dns",
            "--tail=20",
        ]);
        let prev = west.run(&[
            "-n",
            "sluice-system",
            "logs",
            "-l",
            "app.kubernetes.io/component=dns",
            "--previous",
            "--tail=20",
        ]);
        panic!(
            "upgrade: {e}\n{}\n{}{}\n{}{}",
            String::from_utf8_lossy(&state.stdout),
            String::from_utf8_lossy(&logs.stdout),
            String::from_utf8_lossy(&logs.stderr),
            String::from_utf8_lossy(&prev.stdout),
            String::from_utf8_lossy(&prev.stderr),
        )
    });
    assert!(
        eventually(Duration::from_secs(60), || {
            let now = pods(&west, "dns");
            !now.is_empty() && now != dns_before && !now.contains(' ')
        }),
        "the DNS pod was not replaced"
    );
    assert_eq!(
        pods(&west, "syncer"),
        syncer_before,
        "the syncer was rolled for nothing"
    );
    assert!(
        eventually(Duration::from_secs(30), || Command::new("curl")
            .args(["-sf", "-o", "/dev/null", "http://127.21.0.1:9154/readyz"])
            .status()
            .is_ok_and(|s| s.success())),
        "the new DNS pod is not ready on its new admin port"
    );

    // The control plane's upgrade replaces its pod. What it stores is in etcd and stays:
    // the logical cluster still holds web, and web still answers in west.
    let mut values = control_values.clone();
    values["etcd"]["compactionIntervalSeconds"] = json!(600);
    upgrade_control_plane(&east, &east_kubeconfig, &values);
    assert!(
        eventually(Duration::from_secs(60), || kc
            .run(&["-n", "shop", "get", "deployment", "web"])
            .status
            .success()),
        "the logical cluster lost web when the control plane's pod was replaced"
    );
    assert_eq!(
        support::http_get(&vip(), 80, "/").map(|a| a["cluster"].clone()),
        Some(json!("east")),
        "web no longer answers in west"
    );

    // The job itself, done by the charts' parts: east drains, web moves to west, and a
    // consumer in west through west's VIP sees no request fail. (The dataplanes report
    // the shifting traffic on the namespaces: their `patch`.)
    let load = support::clusterset::Load::start("http1", &format!("{}:80", vip()), 3600, None);
    let out = Command::new(sluice_bin())
        .args([
            "drain",
            "east",
            "--wait",
            "--timeout",
            "300",
            "--kubeconfig",
        ])
        .arg(&control.kubeconfig)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "drain: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        eventually(Duration::from_secs(90), || support::http_get(
            &vip(),
            80,
            "/"
        )
        .is_some_and(|a| a["cluster"] == "west")),
        "web is not served from west after the drain"
    );
    let counted = load.stop();
    assert_eq!(counted.failed, 0, "during the drain: {}", counted.failures);
    assert!(counted.ok >= 100, "only {} answered", counted.ok);

    // Every part reached its API server as its own ServiceAccount, and none was ever
    // refused: a permission missing from a chart shows here.
    for cluster in ["east", "west"] {
        let audit = Audit::parse(
            &std::fs::read_to_string(dev.state.join("clusters").join(cluster).join("audit.log"))
                .unwrap(),
        );
        let users = audit.users();
        for part in [
            "agent-syncer",
            "agent-dataplane",
            "agent-dns",
            "agent-mcs-member",
        ] {
            let user = format!("system:serviceaccount:sluice-system:{part}");
            assert!(
                users.contains(user.as_str()),
                "{cluster}: no request as {user}: {users:?}"
            );
        }
        let refused = audit.refused("system:serviceaccount:sluice-system:");
        assert!(refused.is_empty(), "{cluster}: refused: {refused:#?}");
        // The control plane mounts no token: it asks its cluster nothing.
        assert!(
            !users
                .iter()
                .any(|u| u.starts_with("system:serviceaccount:sluice-control:")),
            "{cluster}: the control plane used its ServiceAccount: {users:?}"
        );
    }

    // Uninstalling leaves no object of the charts behind.
    helm(&[
        "uninstall",
        east_kubeconfig.to_str().unwrap(),
        "sluice-system",
        "mcs",
    ])
    .unwrap();
    helm(&[
        "uninstall",
        east_kubeconfig.to_str().unwrap(),
        "sluice-control",
        "control",
    ])
    .unwrap();
    for (k, kubeconfig) in [(&east, &east_kubeconfig), (&west, &west_kubeconfig)] {
        helm(&[
            "uninstall",
            kubeconfig.to_str().unwrap(),
            "sluice-system",
            "agent",
        ])
        .unwrap();
        // ReplicaSets and Pods go after their Deployment, by garbage collection: a busy
        // machine may still show them for a moment.
        for instance in ["agent", "mcs", "control"] {
            let left = || {
                k.ok(&[
                    "get",
                    "deployments,replicasets,pods,services,serviceaccounts,roles,rolebindings,clusterroles,clusterrolebindings,persistentvolumeclaims,servicemonitors",
                    "-A",
                    "-l",
                    &format!("app.kubernetes.io/instance={instance}"),
                    "-o",
                    "name",
                ])
            };
            assert!(
                eventually(Duration::from_secs(60), || left().trim().is_empty()),
                "left behind by {instance}: {}",
                left()
            );
        }
        let releases = k.ok(&["get", "secrets", "-A", "-l", "owner=helm", "-o", "name"]);
        assert_eq!(releases.trim(), "", "release records left behind");
    }
}

/// The Prometheus Operator's ServiceMonitor CRD, its schema left open.
const SERVICE_MONITOR_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: servicemonitors.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  names: {kind: ServiceMonitor, listKind: ServiceMonitorList, plural: servicemonitors, singular: servicemonitor}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"#;

/// An audit log's requests (one JSON object per line, as `--audit-log` writes them).
struct Audit(Vec<Value>);

impl Audit {
    fn parse(text: &str) -> Self {
        Audit(
            text.lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect(),
        )
    }

    /// Every user that made a request.
    fn users(&self) -> std::collections::BTreeSet<&str> {
        self.0.iter().filter_map(|e| e["user"].as_str()).collect()
    }

    /// The requests of users whose names start with `prefix` that were refused (401, 403).
    fn refused(&self, prefix: &str) -> Vec<&Value> {
        self.0
            .iter()
            .filter(|e| {
                e["user"].as_str().is_some_and(|u| u.starts_with(prefix))
                    && (e["code"] == 401 || e["code"] == 403)
            })
            .collect()
    }
}

/// A kubeconfig for the MCS controller's identity in `cluster`: its API server and CA
/// from the admin kubeconfig, and `token`.
fn member_kubeconfig(state: &Path, cluster: &str, token: &str) -> String {
    let admin = state.join("clusters").join(format!("{cluster}.kubeconfig"));
    let view = Command::new(kubectls().remove(0))
        .args(["config", "view", "--raw", "-o", "json", "--kubeconfig"])
        .arg(&admin)
        .output()
        .unwrap();
    let view: Value = serde_json::from_slice(&view.stdout).unwrap();
    let c = &view["clusters"][0]["cluster"];
    json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": c["server"], "certificate-authority-data": c["certificate-authority-data"]}}],
        "users": [{"name": "mcs", "user": {"token": token}}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": "mcs"}}],
        "current-context": cluster,
    })
    .to_string()
}
