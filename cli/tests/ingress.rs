#![allow(clippy::unwrap_used)]
//! External traffic: an `Ingress` applied to a logical cluster is served by every cluster's
//! ingress, each forwarding to wherever the backend runs; the clusterset DNS answers the
//! Ingress host with the ingress addresses of the clusters that take clients; a move under
//! load through both clusters' ingresses loses no request; a cluster being drained leaves
//! the DNS answer while its ingress keeps serving. The tests share the clusterset's fixed
//! loopback ranges, so they run one at a time.

use crate::support;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use support::clusterset::{Load, available, deployment_exists, ds, imported_ready};
use support::{DevUp, eventually};

const WITHIN: Duration = Duration::from_secs(120);

const HOST: &str = "shop.example";

/// `web` (echo) in namespace `shop` on `east`, with an Ingress for `shop.example`.
const APP: &str = r#"apiVersion: v1
kind: Namespace
metadata:
  name: shop
  labels: {sluice.dev/cluster: east}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: echo
        image: sluice/echo
        ports: [{name: http, containerPort: 8080}]
        readinessProbe: {httpGet: {port: http, path: /ready}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web, namespace: shop}
spec:
  rules:
  - host: shop.example
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
"#;

/// A Job in namespace `clients` (on west) whose Pod loads `web.shop:80` — the name an app
/// written for one cluster uses — for 30 s, resolved through its cluster's DNS.
const SHOPPER: &str = r#"apiVersion: v1
kind: Namespace
metadata:
  name: clients
  labels: {sluice.dev/cluster: west}
---
apiVersion: batch/v1
kind: Job
metadata: {name: shopper, namespace: clients}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: loadgen
        image: sluice/loadgen
        args: [--protocol, http1, --rate, "100", --duration, "30", --target, "web.shop:80"]
"#;

/// The JSON report of the shopper Job's Pod in west, once it finished.
fn shopper_report(west: &support::Kubectl) -> serde_json::Value {
    let ns = ds(west, "clients");
    let phase = || {
        west.ok(&[
            "-n",
            &ns,
            "get",
            "pods",
            "-l",
            "job-name=shopper",
            "-o",
            "jsonpath={.items[0].status.phase}",
        ])
    };
    assert!(
        eventually(WITHIN, || matches!(
            phase().as_str(),
            "Succeeded" | "Failed"
        )),
        "the shopper finished: {}",
        phase()
    );
    let pod = west.ok(&[
        "-n",
        &ns,
        "get",
        "pods",
        "-l",
        "job-name=shopper",
        "-o",
        "jsonpath={.items[0].metadata.name}",
    ]);
    let logs = west.ok(&["-n", &ns, "logs", pod.trim()]);
    let report = logs
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .unwrap_or_else(|| panic!("no report in the shopper's log:\n{logs}"));
    serde_json::from_str(report).unwrap_or_else(|e| panic!("{report}: {e}"))
}

/// `GET /` with `Host: shop.example` through the ingress at `addr`: the status line and
/// the cluster that answered.
fn get(addr: &str) -> Option<(String, String)> {
    use std::io::{Read, Write};
    let addr: SocketAddr = addr.parse().ok()?;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(
        format!("GET /cart HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.lines().next()?.to_string();
    let cluster = out
        .split("\"cluster\":\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or("")
        .to_string();
    Some((status, cluster))
}

/// The A records `dig` gets for `shop.example` from the DNS server at `dns`, sorted.
fn dig(dns: &str) -> Vec<String> {
    let (ip, port) = dns.rsplit_once(':').unwrap();
    let out = Command::new("dig")
        .args(["+short", "+tries=1", "+time=2", "-p", port])
        .arg(format!("@{ip}"))
        .args([HOST, "A"])
        .output()
        .unwrap();
    let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    v.sort();
    v
}

#[test]
fn every_clusters_ingress_serves_the_app_through_moves_and_dns_follows_drains() {
    let (dev, _) = DevUp::start("east,west");
    let control = dev.kubectl_control();
    let (east, west) = (dev.kubectl("east"), dev.kubectl("west"));
    let (east_in, west_in) = (
        dev.described("east", "ingress"),
        dev.described("west", "ingress"),
    );
    let east_ip = east_in.rsplit_once(':').unwrap().0.to_string();
    let west_ip = west_in.rsplit_once(':').unwrap().0.to_string();
    control.apply_stdin(APP);
    assert!(
        eventually(WITHIN, || available(&east) == 2
            && imported_ready(&west, "east") == 2),
        "the app runs in east and west imports it"
    );

    // Both clusters' ingresses serve it; west's forwards to east through the gateway.
    for ingress in [&east_in, &west_in] {
        assert!(
            eventually(WITHIN, || get(ingress)
                .is_some_and(|(s, c)| s.starts_with("HTTP/1.1 200") && c == "east")),
            "{ingress}: {:?}",
            get(ingress)
        );
    }
    // Hosts no Ingress names get 404 from the ingress.
    let other = {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(west_in.as_str()).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: other.example\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    assert!(other.starts_with("HTTP/1.1 404"), "{other}");

    // The clusterset DNS answers the host with both ingresses, in each cluster.
    let both = {
        let mut v = vec![east_ip.clone(), west_ip.clone()];
        v.sort();
        v
    };
    for cluster in ["east", "west"] {
        let dns = dev.described(cluster, "dns");
        assert!(
            eventually(WITHIN, || dig(&dns) == both),
            "{cluster}'s DNS: {:?}",
            dig(&dns)
        );
    }

    // A consumer in west written for one cluster: a Pod asking for `web.shop` by its
    // ordinary name (search path, cluster.local), from its own address.
    control.apply_stdin(SHOPPER);
    // A move under load through both ingresses, HTTP/1.1 and HTTP/2, and from that Pod
    // inside: nothing fails.
    let loads = [
        Load::start("http1", &east_in, 30, Some(HOST)),
        Load::start("h2", &west_in, 30, Some(HOST)),
        Load::start("http1", &west_in, 30, Some(HOST)),
    ];
    std::thread::sleep(Duration::from_secs(3));
    control.ok(&[
        "label",
        "namespace",
        "shop",
        "sluice.dev/cluster=west",
        "--overwrite",
    ]);
    assert!(
        eventually(WITHIN, || !deployment_exists(&east)
            && available(&west) == 2),
        "moved to west"
    );
    for (i, l) in loads.into_iter().enumerate() {
        let c = l.finish();
        eprintln!(
            "ingress load {i} through the move: {} ok, {} failed",
            c.ok, c.failed
        );
        assert_eq!(c.failed, 0, "load {i}: {}", c.failures);
        assert!(c.ok >= 2_000, "load {i}: only {} answered", c.ok);
    }
    assert!(get(&east_in).is_some_and(|(_, c)| c == "west"));
    let shopper = shopper_report(&west);
    let (ok, failed) = (
        shopper["ok"].as_u64().unwrap(),
        shopper["failed"].as_u64().unwrap(),
    );
    eprintln!(
        "the Pod in west through web.shop (cluster.local) during the move: {ok} ok, {failed} failed"
    );
    assert_eq!(failed, 0, "{shopper}");
    assert!(ok >= 2_000, "{shopper}");

    // East is drained: it leaves the DNS answers first, and its ingress keeps serving.
    control.ok(&[
        "patch",
        "cluster",
        "east",
        "--type=merge",
        "-p",
        r#"{"spec":{"unschedulable":true,"drain":true}}"#,
    ]);
    let west_dns = dev.described("west", "dns");
    assert!(
        eventually(WITHIN, || dig(&west_dns) == [west_ip.clone()]),
        "east left the answer: {:?}",
        dig(&west_dns)
    );
    let (status, cluster) = get(&east_in).expect("east's ingress answers");
    assert!(
        status.starts_with("HTTP/1.1 200") && cluster == "west",
        "{status} {cluster}"
    );
}
