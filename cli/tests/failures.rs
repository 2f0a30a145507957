#![allow(clippy::unwrap_used)]
//! Failures under load, every request counted: the control plane killed while consumers in
//! west call the app in east (the dataplanes keep routing with what they have, and once the
//! control plane is back a move completes), and a whole cluster killed — every process of
//! it, its Pods included — while the app runs spread over both clusters (idempotent
//! requests lose nothing; how long west's dataplane took to stop sending to east is
//! measured and printed). The tests share the clusterset's fixed loopback ranges, so they
//! run one at a time.

use crate::support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::clusterset::{
    Load, Restarted, available, deployment_exists, imported_ready, kill9, processes_of, vip_of_web,
};
use support::{DevUp, eventually, processes_with_pid, sluice_bin};

const WITHIN: Duration = Duration::from_secs(120);

/// `web` (echo, HTTP on 80, h2c on 81) in namespace `shop`, placed by `placement`.
fn app(namespace_labels: &str, replicas: u32) -> String {
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata:
  name: shop
  labels: {{{namespace_labels}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: shop}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers:
      - name: echo
        image: sluice/echo
        ports: [{{name: http, containerPort: 8080}}]
        readinessProbe: {{httpGet: {{port: http, path: /ready}}, periodSeconds: 1}}
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: shop}}
spec:
  selector: {{app: web}}
  ports:
  - {{name: http, port: 80, targetPort: http}}
  - {{name: h2c, port: 81, targetPort: http, appProtocol: h2c}}
"#
    )
}

/// The address in the `server:` line of a kubeconfig (`host:port`).
fn server_of(kubeconfig: &std::path::Path) -> String {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let url = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("server:"))
        .expect("server in kubeconfig")
        .trim()
        .trim_matches('"')
        .to_string();
    let rest = url.trim_start_matches("https://");
    rest.split('/').next().unwrap().to_string()
}

#[test]
fn dataplanes_keep_routing_while_the_control_plane_is_down_and_it_reconverges() {
    let (dev, _) = DevUp::start("east,west");
    let control = dev.kubectl_control();
    let (east, west) = (dev.kubectl("east"), dev.kubectl("west"));
    control.apply_stdin(&app("sluice.dev/cluster: east", 2));
    assert!(
        eventually(WITHIN, || available(&east) == 2
            && imported_ready(&west, "east") == 2),
        "the app runs in east and west imports it"
    );
    let vip = vip_of_web(&west);
    let vip = vip.trim();
    let h1 = Load::start("http1", &format!("{vip}:80"), 20, None);
    let h2 = Load::start("h2", &format!("{vip}:81"), 20, None);
    std::thread::sleep(Duration::from_secs(3));

    // The control plane dies (SIGKILL) for 8 s, then comes back on its address and data.
    let state = dev.state.join("control").display().to_string();
    let (pid, _) = processes_with_pid(" control --data-dir ")
        .into_iter()
        .find(|(_, cmd)| cmd.contains(&state))
        .expect("the control plane's process");
    let listen = server_of(&dev.state.join("control.kubeconfig"));
    kill9(pid);
    std::thread::sleep(Duration::from_secs(8));
    let restarted = Restarted(
        Command::new(sluice_bin())
            .args(["control", "--data-dir", &state, "--listen", &listen])
            .env("SLUICE_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    for (name, load) in [("HTTP/1.1", h1), ("HTTP/2", h2)] {
        let c = load.finish();
        eprintln!(
            "{name} through west's VIP with the control plane down: {} ok, {} failed",
            c.ok, c.failed
        );
        assert_eq!(c.failed, 0, "{name}: {}", c.failures);
        assert!(c.ok >= 1_500, "{name}: only {} answered", c.ok);
    }

    // Back: every part reconverges, and a move goes through as before, under load.
    assert!(
        eventually(WITHIN, || control
            .run(&["get", "namespace", "shop"])
            .status
            .success()),
        "the control plane answers again"
    );
    let during = Load::start("http1", &format!("{vip}:80"), 40, None);
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
        "the move after the restart completed: east {} west {}",
        available(&east),
        available(&west)
    );
    let c = during.finish();
    eprintln!(
        "HTTP/1.1 through the move after the restart: {} ok, {} failed",
        c.ok, c.failed
    );
    assert_eq!(c.failed, 0, "{}", c.failures);
    drop(restarted);
}

/// `peer`'s `tunnel_peer_up` gauge in the metrics of the dataplane at `admin`.
fn peer_up(admin: &str, peer: &str) -> Option<bool> {
    let (ip, port) = admin.split_once(':')?;
    let mut s = std::net::TcpStream::connect((ip, port.parse::<u16>().ok()?)).ok()?;
    use std::io::{Read, Write};
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let prefix = format!("sluice_proxy_tunnel_peer_up{{peer=\"{peer}\"");
    out.lines()
        .find(|l| l.starts_with(&prefix))
        .and_then(|l| l.rsplit(' ').next())
        .map(|v| v.trim() == "1")
}

#[test]
fn a_killed_cluster_costs_no_idempotent_request_and_its_workloads_move() {
    let (dev, _) = DevUp::start("east,west");
    let control = dev.kubectl_control();
    let west = dev.kubectl("west");
    control.apply_stdin(
        r#"apiVersion: sluice.dev/v1alpha1
kind: Placement
metadata: {name: both}
spec:
  namespaceSelector: {matchLabels: {team: shop}}
  locationSelector: {matchLabels: {sluice.dev/local: "true"}}
  mode: Spread
"#,
    );
    control.apply_stdin(&app("team: shop", 2));
    assert!(
        eventually(WITHIN, || imported_ready(&west, "east") == 1
            && imported_ready(&west, "west") == 1),
        "one endpoint in each cluster, imported in west"
    );
    let west_admin = "127.21.0.1:15000";
    assert!(
        eventually(WITHIN, || peer_up(west_admin, "east") == Some(true)),
        "west's dataplane reaches east's gateway"
    );
    let vip = vip_of_web(&west);
    let vip = vip.trim();
    let h1 = Load::start("http1", &format!("{vip}:80"), 15, None);
    let h2 = Load::start("h2", &format!("{vip}:81"), 15, None);
    std::thread::sleep(Duration::from_secs(4));

    // Every process of east at once: API server, node agent and its Pods, DNS, dataplane,
    // syncer.
    let doomed = processes_of(&dev.state, "east");
    assert!(doomed.len() >= 6, "east's processes: {doomed:?}");
    let killed = Instant::now();
    for (pid, _) in &doomed {
        kill9(*pid);
    }
    let mut noticed = None;
    while killed.elapsed() < Duration::from_secs(30) {
        if peer_up(west_admin, "east") == Some(false) {
            noticed = Some(killed.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let noticed = noticed.expect("west's dataplane never marked east's gateway down");
    eprintln!(
        "east killed: west's dataplane stopped sending to it after {} ms",
        noticed.as_millis()
    );
    assert!(
        eventually(WITHIN, || imported_ready(&west, "east") == 0),
        "east's endpoint leaves west's import"
    );
    eprintln!(
        "east's endpoints left west's imports within {} ms of the kill",
        killed.elapsed().as_millis()
    );
    for (name, load) in [("HTTP/1.1", h1), ("HTTP/2", h2)] {
        let c = load.finish();
        eprintln!(
            "{name} through west's VIP while east died: {} ok, {} failed",
            c.ok, c.failed
        );
        assert_eq!(c.failed, 0, "{name}: {}", c.failures);
        assert!(c.ok >= 1_000, "{name}: only {} answered", c.ok);
    }
    // Its workloads run elsewhere: west takes both replicas.
    assert!(
        eventually(WITHIN, || available(&west) == 2),
        "west runs what east ran: {}",
        available(&west)
    );
}
