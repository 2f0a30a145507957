//! The sample app of the clusterset tests (`web` in namespace `shop` of the root logical
//! cluster) as the physical clusters see it, and the processes of a local clusterset.

use std::process::{Child, Command, Stdio};

use super::{Kubectl, sluice_bin};

/// The sample app: `web` (two `sluice/echo` replicas and a Service on port 80) in
/// namespace `shop` of the root logical cluster, placed on `east`.
pub const APP: &str = r#"apiVersion: v1
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
"#;

/// The downstream namespace of `shop` in the root logical cluster (of the installation `k`
/// belongs to).
pub fn downstream_ns(k: &Kubectl) -> String {
    ds(k, "shop")
}

/// Available replicas of `web` in a physical cluster (0 when it is not there).
pub fn available(k: &Kubectl) -> i64 {
    let out = k.run(&[
        "-n",
        &downstream_ns(k),
        "get",
        "deployment",
        "web",
        "-o",
        "jsonpath={.status.availableReplicas}",
        "--ignore-not-found",
    ]);
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

pub fn deployment_exists(k: &Kubectl) -> bool {
    let out = k.ok(&["-n", &downstream_ns(k), "get", "deployments", "-o", "name"]);
    out.contains("deployment.apps/web")
}

pub fn condition(control: &Kubectl, field: &str) -> String {
    control.ok(&[
        "get",
        "namespace",
        "shop",
        "-o",
        &format!("jsonpath={{.status.conditions[?(@.type==\"Placed\")].{field}}}"),
    ])
}

/// The downstream namespace of `ns` in the root logical cluster.
pub fn ds(k: &Kubectl, ns: &str) -> String {
    k.downstream("root", ns)
}

pub fn kill9(pid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status();
}

pub fn imported_ready(k: &Kubectl, source: &str) -> usize {
    let out = k.ok(&[
        "-n",
        &downstream_ns(k),
        "get",
        "endpointslices",
        "-l",
        &format!(
            "multicluster.kubernetes.io/service-name=web,multicluster.kubernetes.io/source-cluster={source}"
        ),
        "-o",
        "jsonpath={range .items[*].endpoints[*]}{.conditions.ready} {end}",
    ]);
    out.split_whitespace().filter(|r| *r == "true").count()
}

/// The clusterset VIP of `web` in `k`'s cluster.
pub fn vip_of_web(k: &Kubectl) -> String {
    k.ok(&[
        "-n",
        &downstream_ns(k),
        "get",
        "serviceimport",
        "web",
        "-o",
        "jsonpath={.spec.ips[0]}",
    ])
}

/// The VIP of `web` in namespace `ns` in `k`'s cluster, once it answers there.
pub fn answering_vip(k: &Kubectl, ns: &str) -> String {
    let vip = || {
        k.ok(&[
            "-n",
            &ds(k, ns),
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
        super::eventually(std::time::Duration::from_secs(120), || !vip().is_empty()
            && super::http_get(&vip(), 80, "/").is_some()),
        "{ns}'s web answers through its VIP"
    );
    vip()
}

/// Every process of local cluster `cluster` of the clusterset in `state`: its parts (each
/// names a path under `<state>/clusters/<cluster>`) and their descendants (the node agent's
/// Pods).
pub fn processes_of(state: &std::path::Path, cluster: &str) -> Vec<(u32, String)> {
    let dir = state.join("clusters").display().to_string();
    let (own, kubeconfig) = (
        format!("{dir}/{cluster}/"),
        format!("{dir}/{cluster}.kubeconfig"),
    );
    let mut out: Vec<(u32, String)> = super::processes_with_pid("")
        .into_iter()
        .filter(|(_, cmd)| cmd.contains(&own) || cmd.contains(&kubeconfig))
        .collect();
    // Descendants, until no new one turns up.
    loop {
        let known: Vec<u32> = out.iter().map(|(p, _)| *p).collect();
        let children: Vec<(u32, String)> = super::processes_with_pid("")
            .into_iter()
            .filter(|(pid, _)| !known.contains(pid))
            .filter(|(pid, _)| parent_of(*pid).is_some_and(|pp| known.contains(&pp)))
            .collect();
        if children.is_empty() {
            return out;
        }
        out.extend(children);
    }
}

/// The parent pid of `pid` (`/proc/<pid>/stat`, the field after the command's parentheses).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// A `sluice loadgen` at 100 requests a second, its JSON report read when it ends; killed
/// if dropped before (a failed test leaves no load behind for the next one).
pub struct Load(Option<Child>);

/// What a [`Load`] counted.
#[derive(Debug)]
pub struct Counted {
    pub ok: u64,
    pub failed: u64,
    /// The failures by reason (JSON).
    pub failures: String,
}

impl Load {
    /// `protocol` (http1, h2, grpc, tcp) against `target` for `secs`, its requests naming
    /// `host` (an Ingress host) if given.
    pub fn start(protocol: &str, target: &str, secs: u32, host: Option<&str>) -> Self {
        Self::start_waiting(protocol, target, secs, host, 5)
    }

    /// As [`Load::start`], each request failing only after `timeout_secs` (a client that
    /// waits as long as the proxy may hold its request).
    pub fn start_waiting(
        protocol: &str,
        target: &str,
        secs: u32,
        host: Option<&str>,
        timeout_secs: u32,
    ) -> Self {
        let mut cmd = Command::new(sluice_bin());
        cmd.args(["loadgen", "--protocol", protocol, "--rate", "100"])
            .args(["--duration", &secs.to_string(), "--target", target])
            .args(["--timeout", &timeout_secs.to_string()]);
        if let Some(h) = host {
            cmd.args(["--host", h]);
        }
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn sluice loadgen");
        Load(Some(child))
    }

    /// Wait until it ends by itself.
    pub fn finish(mut self) -> Counted {
        let child = self.0.take().expect("a running loadgen");
        let out = child.wait_with_output().expect("loadgen output");
        let text = String::from_utf8_lossy(&out.stdout);
        let r: serde_json::Value = serde_json::from_str(text.trim())
            .unwrap_or_else(|e| panic!("loadgen report {text:?}: {e}"));
        Counted {
            ok: r["ok"].as_u64().unwrap_or(0),
            failed: r["failed"].as_u64().unwrap_or(u64::MAX),
            failures: r["failures"].to_string(),
        }
    }

    /// End it now (SIGTERM: it still reports what it sent).
    pub fn stop(self) -> Counted {
        if let Some(c) = &self.0 {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
        }
        self.finish()
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A part of the clusterset the test started again itself (after killing dev up's):
/// killed when the test ends.
pub struct Restarted(pub Child);

impl Drop for Restarted {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
