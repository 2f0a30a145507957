#![allow(clippy::unwrap_used)]
//! The Helm charts (`charts/`), installed with real Helm (Helm v4's Go SDK through PyPI
//! `helm-python-sdk`, `tests/python/helm.py`) onto the clusters of `sluice dev up --bare`,
//! whose node agents run the `sluice` image as this binary (issue: Helm charts).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};
use support::{Control, DevUp, Kubectl, eventually, kubectls, sluice_bin};

/// `dev up` uses fixed addresses: one clusterset at a time.
static SERIAL: Mutex<()> = Mutex::new(());

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
    // `helm lint --strict`: only the "icon is recommended" kind of note (severity info).
    for (name, values) in [
        ("sluice-agent", json!({"cluster": "east"})),
        ("sluice-mcs", json!({})),
    ] {
        let report = helm(&["lint", chart(name).to_str().unwrap(), &values.to_string()])
            .unwrap_or_else(|e| panic!("lint {name}: {e}"));
        let report: Value = serde_json::from_str(&report).unwrap();
        let problems: Vec<&Value> = report["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["severity"].as_i64().unwrap_or(0) > 1)
            .collect();
        assert!(problems.is_empty(), "lint {name}: {report}");
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

/// The control plane's credentials and the tunnel certificates of `cluster`, as Secrets
/// in `sluice-system` of that cluster.
fn secrets_for(k: &Kubectl, control: &Control, tunnel: &Path, cluster: &str) {
    let syncer = Command::new(sluice_bin())
        .args(["kubeconfig", "--data-dir"])
        .arg(&control.dir)
        .args(["--syncer", cluster])
        .output()
        .unwrap();
    assert!(syncer.status.success());
    let dir = tempfile::tempdir().unwrap();
    let syncer_path = dir.path().join("syncer.kubeconfig");
    std::fs::write(&syncer_path, &syncer.stdout).unwrap();
    k.ok(&["create", "namespace", "sluice-system"]);
    k.ok(&[
        "-n",
        "sluice-system",
        "create",
        "secret",
        "generic",
        "sluice-control-plane",
        &format!("--from-file=syncer.kubeconfig={}", syncer_path.display()),
        &format!(
            "--from-file=control.kubeconfig={}",
            control.kubeconfig.display()
        ),
        &format!(
            "--from-file=logs.token={}",
            control.dir.join("syncer-logs.token").display()
        ),
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

#[test]
fn agent_and_mcs_charts_make_a_working_clusterset_on_bare_clusters() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (dev, _) = DevUp::start_with("east,west", &["--bare"]);
    let dir = tempfile::tempdir().unwrap();
    let control = Control::start(&dir.path().join("control"), &[]);
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

    // A value the schema refuses never reaches a cluster: Helm's own message says why.
    let kubeconfig = dev.state.join("clusters").join("east.kubeconfig");
    for (bad, says) in [
        (json!({"cluster": "East_1"}), "/cluster"),
        (
            json!({"cluster": "east", "dns": {"port": 70000}}),
            "/dns/port",
        ),
        (
            json!({"cluster": "east", "tunnel": {"secretName": "t", "transport": "carrier-pigeon"}}),
            "/tunnel/transport",
        ),
        (json!({"cluster": "east", "typo": true}), "typo"),
    ] {
        let err = helm(&[
            "install",
            kubeconfig.to_str().unwrap(),
            "sluice-system",
            "agent",
            chart("sluice-agent").to_str().unwrap(),
            &bad.to_string(),
        ])
        .unwrap_err();
        assert!(
            err.contains("values don't meet the specifications of the schema")
                && err.contains(says),
            "{bad}: {err}"
        );
    }
    // Refused before anything was written: no release, no object.
    let east = dev.kubectl("east");
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
    let east = dev.kubectl("east");
    assert!(
        eventually(Duration::from_secs(90), || support::clusterset::available(
            &east
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
    let east_kubeconfig = dev.state.join("clusters").join("east.kubeconfig");
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
    let west = dev.kubectl("west");
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
        support::clusterset::downstream_ns()
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

    // Every part reached its API server as its own ServiceAccount, and none was ever
    // refused: a permission missing from a chart shows here.
    for cluster in ["east", "west"] {
        let log =
            std::fs::read_to_string(dev.state.join("clusters").join(cluster).join("audit.log"))
                .unwrap();
        let events: Vec<Value> = log
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let users: std::collections::BTreeSet<&str> =
            events.iter().filter_map(|e| e["user"].as_str()).collect();
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
        let refused: Vec<&Value> = events
            .iter()
            .filter(|e| {
                e["user"]
                    .as_str()
                    .is_some_and(|u| u.starts_with("system:serviceaccount:sluice-system:"))
                    && (e["code"] == 401 || e["code"] == 403)
            })
            .collect();
        assert!(refused.is_empty(), "{cluster}: refused: {refused:#?}");
    }

    // Uninstalling leaves no object of the charts behind.
    helm(&[
        "uninstall",
        east_kubeconfig.to_str().unwrap(),
        "sluice-system",
        "mcs",
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
        for instance in ["agent", "mcs"] {
            let left = k.ok(&[
                "get",
                "deployments,replicasets,pods,services,serviceaccounts,roles,rolebindings,clusterroles,clusterrolebindings",
                "-A",
                "-l",
                &format!("app.kubernetes.io/instance={instance}"),
                "-o",
                "name",
            ]);
            assert_eq!(left.trim(), "", "left behind by {instance}");
        }
        let releases = k.ok(&[
            "-n",
            "sluice-system",
            "get",
            "secrets",
            "-l",
            "owner=helm",
            "-o",
            "name",
        ]);
        assert_eq!(releases.trim(), "", "release records left behind");
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
