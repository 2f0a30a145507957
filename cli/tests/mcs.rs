#![allow(clippy::unwrap_used)]
//! Multi-Cluster Services on a three-cluster local clusterset (`sluice dev up` with east,
//! west and north): the real kubectl writes Services and ServiceExports, the MCS
//! controller writes ServiceImports and EndpointSlices, and real HTTP goes from each
//! cluster's dataplane (its VIP for the import) to `sluice/echo` pods, whose answers name
//! the cluster that served them.
//!
//! A cluster switched to derived Services (as a real cluster with kube-proxy runs) is
//! covered too.
//!
//! One test, in sections, because every dev up takes the same fixed loopback ranges.

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use support::{DevUp, Kubectl, eventually, http_get};

const CLUSTERS: [&str; 3] = ["east", "west", "north"];
const WAIT: Duration = Duration::from_secs(20);

fn echo(ns: &str, name: &str, replicas: u32) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: {ns}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers:
      - name: echo
        image: sluice/echo
        ports: [{{name: http, containerPort: 8080}}]
        readinessProbe: {{httpGet: {{port: http, path: /ready}}, periodSeconds: 1}}
"#
    )
}

fn service(ns: &str, name: &str, extra_spec: &str, ports: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {ns}}}
spec:
  selector: {{app: {name}}}
  ports: {ports}
{extra_spec}"#
    )
}

const HTTP_PORT: &str = "[{name: http, port: 8080, targetPort: http}]";

fn export(ns: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceExport\nmetadata: {{name: {name}, namespace: {ns}}}\n{spec}"
    )
}

fn jsonpath(k: &Kubectl, kind: &str, ns: &str, name: &str, path: &str) -> String {
    let out = k.run(&[
        "get",
        kind,
        "-n",
        ns,
        name,
        "-o",
        &format!("jsonpath={path}"),
    ]);
    if out.status.success() {
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    } else {
        String::new()
    }
}

fn vip(k: &Kubectl, ns: &str, name: &str) -> String {
    jsonpath(k, "serviceimport", ns, name, "{.spec.ips[0]}")
}

fn condition(k: &Kubectl, ns: &str, name: &str, type_: &str) -> (String, String, String) {
    let get = |field: &str| {
        jsonpath(
            k,
            "serviceexport",
            ns,
            name,
            &format!("{{.status.conditions[?(@.type==\"{type_}\")].{field}}}"),
        )
    };
    (get("status"), get("reason"), get("message"))
}

/// The clusters that answered `n` GETs to `ip:port`.
fn answering(ip: &str, port: u16, n: usize) -> BTreeSet<String> {
    (0..n)
        .filter_map(|_| http_get(ip, port, "/"))
        .filter_map(|v| v["cluster"].as_str().map(str::to_string))
        .collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// Every cluster's VIP for `ns/name` eventually reaches exactly `expected` on `port`.
fn reaches_from_everywhere(dev: &DevUp, ns: &str, name: &str, port: u16, expected: &[&str]) {
    for c in CLUSTERS {
        let k = dev.kubectl(c);
        let mut last = BTreeSet::new();
        let ok = eventually(WAIT, || {
            let ip = vip(&k, ns, name);
            if ip.is_empty() {
                return false;
            }
            last = answering(&ip, port, 30);
            last == set(expected)
        });
        assert!(
            ok,
            "{ns}/{name}:{port} from {c}: answered by {last:?}, expected {expected:?}"
        );
    }
}

#[test]
fn multi_cluster_services_across_three_clusters() {
    let (mut dev, took) = DevUp::start("east,west,north");
    eprintln!("dev up (3 clusters) ready in {:.2} s", took.as_secs_f64());
    let k: Vec<Kubectl> = CLUSTERS.iter().map(|c| dev.kubectl(c)).collect();
    for kc in &k {
        kc.ok(&["create", "namespace", "shop"]);
    }

    // --- A Service in east and west, exported from east only: reaches only east.
    for kc in k.iter().take(2) {
        kc.apply_stdin(&echo("shop", "web", 2));
        kc.apply_stdin(&service("shop", "web", "", HTTP_PORT));
    }
    k[0].apply_stdin(&export("shop", "web", ""));
    reaches_from_everywhere(&dev, "shop", "web", 8080, &["east"]);
    for (c, kc) in CLUSTERS.iter().zip(&k) {
        let ip = vip(kc, "shop", "web");
        let index = CLUSTERS.iter().position(|x| x == c).unwrap();
        assert!(
            ip.starts_with(&format!("127.{}.", 60 + index)),
            "{c}: VIP {ip} outside its range"
        );
        assert_eq!(
            jsonpath(kc, "serviceimport", "shop", "web", "{.spec.type}"),
            "ClusterSetIP"
        );
    }
    assert_eq!(condition(&k[0], "shop", "web", "Valid").0, "True");
    assert_eq!(condition(&k[0], "shop", "web", "Ready").1, "Exported");
    assert_eq!(condition(&k[0], "shop", "web", "Conflict").1, "NoConflicts");
    let east_vip = vip(&k[1], "shop", "web");

    // --- Exported from west as well: both serve, the VIP stays the same.
    k[1].apply_stdin(&export("shop", "web", ""));
    reaches_from_everywhere(&dev, "shop", "web", 8080, &["east", "west"]);
    assert_eq!(vip(&k[1], "shop", "web"), east_vip, "the VIP changed");
    assert_eq!(
        jsonpath(
            &k[2],
            "serviceimport",
            "shop",
            "web",
            "{.status.clusters[*].cluster}"
        ),
        "east west"
    );

    // --- Unexported from east: only west; then from west too: the import goes everywhere
    // and the service is no longer reachable through the clusterset.
    k[0].ok(&["delete", "serviceexport", "-n", "shop", "web"]);
    reaches_from_everywhere(&dev, "shop", "web", 8080, &["west"]);
    k[1].ok(&["delete", "serviceexport", "-n", "shop", "web"]);
    for (c, kc) in CLUSTERS.iter().zip(&k) {
        assert!(
            eventually(WAIT, || vip(kc, "shop", "web").is_empty()),
            "{c}: the import outlived the last export"
        );
    }
    assert!(
        eventually(WAIT, || http_get(&east_vip, 8080, "/").is_none()),
        "an unexported service still answers on its old VIP"
    );

    // --- Headless, exported from north: an import without VIP, north's pod IPs in the
    // MCS slices of every cluster.
    k[2].apply_stdin(&echo("shop", "db", 2));
    k[2].apply_stdin(&service("shop", "db", "  clusterIP: None\n", HTTP_PORT));
    k[2].apply_stdin(&export("shop", "db", ""));
    for (c, kc) in CLUSTERS.iter().zip(&k) {
        assert!(
            eventually(WAIT, || jsonpath(
                kc,
                "serviceimport",
                "shop",
                "db",
                "{.spec.type}"
            ) == "Headless"),
            "{c}: no headless import"
        );
        assert!(vip(kc, "shop", "db").is_empty());
        assert!(
            eventually(WAIT, || {
                let out = kc.ok(&[
                    "get", "endpointslices", "-n", "shop", "-l",
                    "multicluster.kubernetes.io/service-name=db,multicluster.kubernetes.io/source-cluster=north,endpointslice.kubernetes.io/managed-by=sluice-mcs",
                    "-o", "jsonpath={.items[*].endpoints[*].addresses[0]}",
                ]);
                out.split_whitespace()
                    .filter(|a| a.starts_with("127.22."))
                    .count()
                    == 2
            }),
            "{c}: north's headless endpoints missing"
        );
    }

    // --- Invalid exports: ExternalName, and no Service at all.
    k[0].apply_stdin(
        "apiVersion: v1\nkind: Service\nmetadata: {name: ext, namespace: shop}\nspec: {type: ExternalName, externalName: example.com}\n",
    );
    k[0].apply_stdin(&export("shop", "ext", ""));
    k[0].apply_stdin(&export("shop", "ghost", ""));
    assert!(eventually(WAIT, || condition(
        &k[0], "shop", "ext", "Valid"
    ) == (
        "False".into(),
        "InvalidServiceType".into(),
        condition(&k[0], "shop", "ext", "Valid").2
    )));
    assert!(eventually(WAIT, || condition(
        &k[0], "shop", "ghost", "Valid"
    )
    .1 == "NoService"));
    for kc in &k {
        assert!(vip(kc, "shop", "ext").is_empty() && vip(kc, "shop", "ghost").is_empty());
    }

    // --- Conflicts: east's export is the oldest and wins; every export says Conflict,
    // naming the field and the winner.
    // (name, east's spec, west's spec, west's ports, west's export, reason)
    let kinds: [(&str, &str, &str, &str, &str, &str); 9] = [
        (
            "c-affinity",
            "  sessionAffinity: ClientIP\n",
            "  sessionAffinity: None\n",
            HTTP_PORT,
            "",
            "SessionAffinityConflict",
        ),
        (
            "c-affinity-config",
            "  sessionAffinity: ClientIP\n  sessionAffinityConfig: {clientIP: {timeoutSeconds: 600}}\n",
            "  sessionAffinity: ClientIP\n  sessionAffinityConfig: {clientIP: {timeoutSeconds: 60}}\n",
            HTTP_PORT,
            "",
            "SessionAffinityConfigConflict",
        ),
        (
            "c-policy",
            "  internalTrafficPolicy: Cluster\n",
            "  internalTrafficPolicy: Local\n",
            HTTP_PORT,
            "",
            "InternalTrafficPolicyConflict",
        ),
        (
            "c-distribution",
            "  trafficDistribution: PreferClose\n",
            "",
            HTTP_PORT,
            "",
            "TrafficDistributionConflict",
        ),
        (
            "c-type",
            "",
            "  clusterIP: None\n",
            HTTP_PORT,
            "",
            "TypeConflict",
        ),
        (
            "c-ports",
            "",
            "",
            "[{name: http, port: 9090, targetPort: http}]",
            "",
            "PortConflict",
        ),
        (
            "c-families",
            "  clusterIP: None\n  ipFamilyPolicy: SingleStack\n  ipFamilies: [IPv4]\n",
            "  clusterIP: None\n  ipFamilyPolicy: SingleStack\n  ipFamilies: [IPv6]\n",
            HTTP_PORT,
            "",
            "IPFamilyConflict",
        ),
        (
            "c-labels",
            "",
            "",
            HTTP_PORT,
            "spec: {exportedLabels: {tier: gold}}\n",
            "LabelsConflict",
        ),
        (
            "c-annotations",
            "",
            "",
            HTTP_PORT,
            "spec: {exportedAnnotations: {owner: team-b}}\n",
            "AnnotationsConflict",
        ),
    ];
    for (name, east_spec, _, _, _, _) in kinds {
        k[0].apply_stdin(&service("shop", name, east_spec, HTTP_PORT));
        k[0].apply_stdin(&export("shop", name, ""));
    }
    std::thread::sleep(Duration::from_millis(1100));
    for (name, _, west_spec, west_ports, west_export, _) in kinds {
        k[1].apply_stdin(&service("shop", name, west_spec, west_ports));
        k[1].apply_stdin(&export("shop", name, west_export));
    }
    for (name, _, _, _, _, reason) in kinds {
        for (c, kc) in CLUSTERS.iter().zip(&k).take(2) {
            let mut last = Default::default();
            let ok = eventually(WAIT, || {
                last = condition(kc, "shop", name, "Conflict");
                last.0 == "True" && last.1.contains(reason)
            });
            assert!(ok, "{name} in {c}: Conflict is {last:?}, expected {reason}");
            assert!(
                last.2.contains("east"),
                "{name}: the message names no winner: {}",
                last.2
            );
        }
    }
    assert_eq!(
        jsonpath(
            &k[2],
            "serviceimport",
            "shop",
            "c-affinity",
            "{.spec.sessionAffinity}"
        ),
        "ClientIP",
        "the oldest export's affinity wins"
    );
    assert_eq!(
        jsonpath(&k[2], "serviceimport", "shop", "c-type", "{.spec.type}"),
        "ClusterSetIP"
    );
    assert_eq!(
        jsonpath(
            &k[2],
            "serviceimport",
            "shop",
            "c-labels",
            "{.metadata.labels.tier}"
        ),
        ""
    );
    for (name, path, winner) in [
        (
            "c-affinity-config",
            "{.spec.sessionAffinityConfig.clientIP.timeoutSeconds}",
            "600",
        ),
        ("c-ports", "{.spec.ports[*].port}", "8080"),
        ("c-families", "{.spec.ipFamilies[*]}", "IPv4"),
    ] {
        let mut last = String::new();
        let ok = eventually(WAIT, || {
            last = jsonpath(&k[2], "serviceimport", "shop", name, path);
            last == winner
        });
        assert!(
            ok,
            "{name}: {path} is {last:?}, the oldest export's is {winner}"
        );
    }

    // --- Ports: the union, and a port only west exposes reaches only west.
    for kc in k.iter().take(2) {
        kc.apply_stdin(&echo("shop", "api", 1));
    }
    k[0].apply_stdin(&service("shop", "api", "", HTTP_PORT));
    k[0].apply_stdin(&export("shop", "api", ""));
    k[1].apply_stdin(&service(
        "shop",
        "api",
        "",
        "[{name: http, port: 8080, targetPort: http}, {name: alt, port: 8081, targetPort: http}]",
    ));
    k[1].apply_stdin(&export("shop", "api", ""));
    assert!(eventually(WAIT, || jsonpath(
        &k[2],
        "serviceimport",
        "shop",
        "api",
        "{.spec.ports[*].port}"
    ) == "8080 8081"));
    reaches_from_everywhere(&dev, "shop", "api", 8080, &["east", "west"]);
    reaches_from_everywhere(&dev, "shop", "api", 8081, &["west"]);

    // --- Names at the limits: a 63-character namespace and service.
    let long_ns = format!("ns-{}", "n".repeat(60));
    let long_svc = format!("svc-{}", "s".repeat(59));
    for kc in &k {
        kc.ok(&["create", "namespace", &long_ns]);
    }
    k[0].apply_stdin(&echo(&long_ns, &long_svc, 1));
    k[0].apply_stdin(&service(&long_ns, &long_svc, "", HTTP_PORT));
    k[0].apply_stdin(&export(&long_ns, &long_svc, ""));
    reaches_from_everywhere(&dev, &long_ns, &long_svc, 8080, &["east"]);

    // A ServiceExport named at the 253-character object name limit (no Service can have
    // that name): NoService, nothing else disturbed. One character more is refused.
    let at_limit = format!("{}.x", "e".repeat(251));
    k[0].apply_stdin(&export("shop", &at_limit, ""));
    let mut last = Default::default();
    let ok = eventually(WAIT, || {
        last = condition(&k[0], "shop", &at_limit, "Valid");
        last.0 == "False" && last.1 == "NoService"
    });
    assert!(ok, "a 253-character export: Valid is {last:?}");
    let too_long = std::env::temp_dir().join(format!("sluice-mcs-254-{}.yaml", std::process::id()));
    std::fs::write(
        &too_long,
        export("shop", &format!("{}.x", "e".repeat(252)), ""),
    )
    .expect("write manifest");
    let err = k[0].fails(&["apply", "-f", &too_long.to_string_lossy()]);
    let _ = std::fs::remove_file(&too_long);
    assert!(err.contains("253"), "a 254-character name: {err}");
    reaches_from_everywhere(&dev, &long_ns, &long_svc, 8080, &["east"]);

    // --- A second Cluster object claiming east's id is rejected and changes nothing.
    let control = Kubectl::new(
        &support::kubectls().remove(0),
        &dev.state.join("control.kubeconfig"),
        &dev.state.join("cache-control"),
    );
    std::fs::copy(
        dev.state.join("clusters/east.kubeconfig"),
        dev.state.join("clusters/zz-east-copy.kubeconfig"),
    )
    .unwrap();
    control.apply_stdin(
        "apiVersion: sluice.dev/v1alpha1\nkind: Cluster\nmetadata: {name: zz-east-copy, labels: {sluice.dev/index: \"9\"}}\nspec: {clusterId: east}\n",
    );
    let member = |name: &str, field: &str| {
        let out = control.run(&[
            "get",
            "cluster",
            name,
            "-o",
            &format!("jsonpath={{.status.conditions[?(@.type==\"MCSMember\")].{field}}}"),
        ]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert!(
        eventually(WAIT, || member("zz-east-copy", "status") == "False"),
        "the duplicate was not rejected"
    );
    assert!(
        member("zz-east-copy", "message").contains("east"),
        "{}",
        member("zz-east-copy", "message")
    );
    assert_eq!(member("east", "status"), "True");
    reaches_from_everywhere(&dev, "shop", "api", 8081, &["west"]);
    control.ok(&["delete", "cluster", "zz-east-copy"]);

    // --- west as a cluster whose kube-proxy serves VIPs: each import gets a derived
    // Service; the ClusterIP west's API server gives it (its service range, 127.41/16) is
    // the import's VIP, and the MCS slices name it for kube-proxy. Traffic is unchanged.
    control.ok(&[
        "patch",
        "cluster",
        "west",
        "--type=merge",
        "-p",
        r#"{"spec":{"importVips":"DerivedService"}}"#,
    ]);
    let derived_of = |kc: &Kubectl| {
        jsonpath(
            kc,
            "serviceimport",
            "shop",
            "api",
            "{.metadata.annotations.multicluster\\.kubernetes\\.io/derived-service}",
        )
    };
    assert!(
        eventually(WAIT, || !derived_of(&k[1]).is_empty()
            && vip(&k[1], "shop", "api").starts_with("127.41.")),
        "west's import has no derived Service: {:?} {:?}",
        derived_of(&k[1]),
        vip(&k[1], "shop", "api")
    );
    let derived = derived_of(&k[1]);
    assert!(derived.starts_with("derived-"), "{derived}");
    assert_eq!(
        jsonpath(&k[1], "service", "shop", &derived, "{.spec.clusterIP}"),
        vip(&k[1], "shop", "api")
    );
    assert_eq!(
        jsonpath(&k[1], "service", "shop", &derived, "{.spec.ports[*].port}"),
        "8080 8081"
    );
    assert!(derived_of(&k[0]).is_empty(), "east keeps Sluice's VIPs");
    assert!(vip(&k[0], "shop", "api").starts_with("127.60."));
    let for_kube_proxy = k[1].ok(&[
        "get",
        "endpointslices",
        "-n",
        "shop",
        "-l",
        &format!("kubernetes.io/service-name={derived}"),
        "-o",
        "jsonpath={.items[*].metadata.labels.multicluster\\.kubernetes\\.io/source-cluster}",
    ]);
    let sources: BTreeSet<&str> = for_kube_proxy.split_whitespace().collect();
    assert_eq!(sources, BTreeSet::from(["east", "west"]));
    assert!(
        k[1].ok(&["get", "serviceimport", "-n", "shop", "-o", "name"])
            .lines()
            .all(|l| !l.contains("derived-")),
        "a derived Service was exported"
    );
    reaches_from_everywhere(&dev, "shop", "api", 8080, &["east", "west"]);
    reaches_from_everywhere(&dev, "shop", "api", 8081, &["west"]);
    // Back to Sluice's VIPs: the derived Service goes.
    control.ok(&[
        "patch",
        "cluster",
        "west",
        "--type=merge",
        "-p",
        r#"{"spec":{"importVips":"Sluice"}}"#,
    ]);
    assert!(
        eventually(WAIT, || vip(&k[1], "shop", "api").starts_with("127.61.")),
        "west's VIP did not return to its range"
    );
    assert!(
        eventually(WAIT, || jsonpath(
            &k[1],
            "service",
            "shop",
            &derived,
            "{.metadata.name}"
        )
        .is_empty()),
        "the derived Service outlived its use"
    );
    reaches_from_everywhere(&dev, "shop", "api", 8081, &["west"]);

    // --- A cluster that stops renewing its lease (its agent hangs) leaves every import;
    // it comes back when it renews again.
    k[2].apply_stdin(&echo("shop", "web", 1));
    k[2].apply_stdin(&service("shop", "web", "", HTTP_PORT));
    k[2].apply_stdin(&export("shop", "web", ""));
    k[0].apply_stdin(&export("shop", "web", ""));
    reaches_from_everywhere(&dev, "shop", "web", 8080, &["east", "north"]);
    let pid = support::processes_with_pid("proxy --kubeconfig")
        .into_iter()
        .find(|(_, cmd)| cmd.contains("north.kubeconfig"))
        .map(|(pid, _)| pid)
        .expect("north's dataplane");
    let signal = |sig: &str| {
        std::process::Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .unwrap();
    };
    signal("-STOP");
    let stopped = std::time::Instant::now();
    let gone = eventually(WAIT, || {
        jsonpath(
            &k[0],
            "serviceimport",
            "shop",
            "web",
            "{.status.clusters[*].cluster}",
        ) == "east"
            && jsonpath(
                &k[1],
                "serviceimport",
                "shop",
                "web",
                "{.status.clusters[*].cluster}",
            ) == "east"
    });
    let took = stopped.elapsed();
    signal("-CONT");
    assert!(gone, "north stayed in the imports after its lease ran out");
    eprintln!(
        "north left every import {:.2} s after its agent stopped",
        took.as_secs_f64()
    );
    assert!(took < Duration::from_secs(6), "took {took:?}");
    reaches_from_everywhere(&dev, "shop", "web", 8080, &["east", "north"]);

    assert!(dev.stop(), "dev up did not exit cleanly");
}
