#![allow(clippy::unwrap_used)]
//! The upstream MCS API conformance suite (kubernetes-sigs/mcs-api `conformance/`, tag
//! v0.5.0), all 27 cases (Required and Optional), run against a two-cluster `sluice dev up`.
//! `east` is upstream's `clients[0]`, the cluster that exports. `west` is the second
//! cluster of the two-cluster cases.
//!
//! Each upstream case runs in its own namespace `mcs-conformance-<case>`. It uses upstream's
//! objects (the `hello` Service, Deployment and ServiceExport, and the `hello-ss`
//! StatefulSet) and makes upstream's assertions. The timeouts are upstream's: 20 s with
//! 100 ms polls for API objects, 20 s with 1 s probes for DNS and connections (20 s × n for
//! n probes in a row), and 5 s for Consistently. Pods and EndpointSlices get 60 s, as on
//! upstream's master (20 s in v0.5.0). The cases are grouped into four tests, each with one
//! clusterset. The tests run one at a time, since every dev up takes the same fixed
//! loopback ranges. Every case is labelled below with its id (SI-n: service_import.go,
//! DNS-Cn / DNS-Hn: clusterip_ / headless_service_dns.go, EPS-1: endpoint_slice.go, CONN-n:
//! connectivity.go), its upstream labels and its exact upstream spec text.
//!
//! Sluice differs from upstream's harness (not from its assertions):
//! - Sluice differs: local Pods are processes without `exec`, so there is no `request` Pod
//!   (netshoot) to run `nslookup` and `nc` in. A lookup instead asks the querying
//!   cluster's DNS server directly (`dns` in `<state>/clusters/<name>.json`, the server its
//!   Pods use). A connection goes from the host to the address that server gave, and that
//!   cluster's dataplane serves that address, as it would for a Pod's connection.
//! - Sluice differs: there are no container images. Upstream's `hello` Pods run two socat
//!   containers that answer any TCP connection on port 42 with `pod ip <ip>`. Here one
//!   `sluice/echo` container serves HTTP on port 42 (`ECHO_HTTP_PORT`), and its JSON answer
//!   names its cluster, Pod and namespace. Upstream's "output contains `pod ip <ip of P>`"
//!   becomes "answered by Pod P of its cluster". Its "output contains `pod ip`" becomes
//!   "answered by a Pod of the case's namespace". Nothing listens on UDP 42, but upstream
//!   never sends UDP either.
//! - Sluice differs: local clusters are single-stack IPv4. A Service's `PreferDualStack`
//!   gets `ipFamilies: [IPv4]`, so every per-family loop below runs for IPv4 only. The
//!   AAAA / IPv6 paths are kept, as upstream has them, but dev up never exercises them.
//! - Sluice differs: Pods share the host's network stack, so port 42 (below 1024) is bound
//!   on the host. The echo Pods and each dataplane's VIP listener bind it, so these tests
//!   need root (or CAP_NET_BIND_SERVICE).

use crate::support;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{DevUp, Kubectl, http_get};

/// Upstream's `clients`: `CLUSTERS[0]` exports.
const CLUSTERS: [&str; 2] = ["east", "west"];
/// Upstream's Eventually timeout (ServiceImports, conditions, lookups, connections).
const WAIT: Duration = Duration::from_secs(20);
/// Pods and EndpointSlices: upstream's master (v0.5.0: 20 s).
const WAIT_PODS: Duration = Duration::from_secs(60);
/// Upstream's Consistently.
const ENSURE: Duration = Duration::from_secs(5);
/// Upstream's polling of API objects.
const POLL: Duration = Duration::from_millis(100);
/// Upstream's probing with commands in the request Pod (lookups, connections).
const PROBE: Duration = Duration::from_secs(1);

const MCS_SERVICE_NAME: &str = "multicluster.kubernetes.io/service-name";
const MCS_SOURCE_CLUSTER: &str = "multicluster.kubernetes.io/source-cluster";
const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
const K8S_MANAGED_BY: &str = "endpointslice-controller.k8s.io";

// ------------------------------------------------------------------------------------------
// Polling, as gomega's Eventually / MustPassRepeatedly / Consistently.

/// `Eventually(f).Within(timeout).ProbeEvery(every).MustPassRepeatedly(n)`: `f` passes on
/// `n` probes in a row before `timeout` (a failed probe starts the count again). Returns
/// the last value, or the last failure.
fn eventually_repeatedly<T>(
    timeout: Duration,
    every: Duration,
    n: u32,
    mut f: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    let start = Instant::now();
    let mut run = 0;
    let mut last = String::from("never probed");
    loop {
        match f() {
            Ok(v) => {
                run += 1;
                if run >= n {
                    return Ok(v);
                }
            }
            Err(e) => {
                run = 0;
                last = e;
            }
        }
        if start.elapsed() >= timeout {
            return Err(format!(
                "not passed {n} time(s) in a row within {timeout:?} ({run} at the end); last failure: {last}"
            ));
        }
        std::thread::sleep(every);
    }
}

/// `Eventually(f).Within(timeout).ProbeEvery(every)`.
fn eventually_ok<T>(
    timeout: Duration,
    every: Duration,
    f: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    eventually_repeatedly(timeout, every, 1, f)
}

/// `Consistently(f).Within(duration).ProbeEvery(every)`: every probe passes.
fn consistently(
    duration: Duration,
    every: Duration,
    mut f: impl FnMut() -> Result<(), String>,
) -> Result<(), String> {
    let start = Instant::now();
    loop {
        f()?;
        if start.elapsed() >= duration {
            return Ok(());
        }
        std::thread::sleep(every);
    }
}

fn check(ok: bool, msg: impl FnOnce() -> String) -> Result<(), String> {
    if ok { Ok(()) } else { Err(msg()) }
}

// ------------------------------------------------------------------------------------------
// kubectl.

/// `kubectl get KIND NAME -n NS -o json`: `Ok(None)` when it does not exist.
fn get(k: &Kubectl, kind: &str, ns: &str, name: &str) -> Result<Option<Value>, String> {
    let out = k.run(&["get", kind, "-n", ns, name, "-o", "json"]);
    if out.status.success() {
        return serde_json::from_slice(&out.stdout)
            .map(Some)
            .map_err(|e| format!("{kind} {ns}/{name}: {e}"));
    }
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("(NotFound)") {
        Ok(None)
    } else {
        Err(format!("kubectl get {kind} {ns}/{name}: {}", err.trim()))
    }
}

/// `kubectl get KIND -n NS [-l SELECTOR] -o json`: the items.
fn list(k: &Kubectl, kind: &str, ns: &str, selector: &str) -> Result<Vec<Value>, String> {
    let mut args = vec!["get", kind, "-n", ns, "-o", "json"];
    if !selector.is_empty() {
        args.extend(["-l", selector]);
    }
    let out = k.run(&args);
    if !out.status.success() {
        return Err(format!(
            "kubectl get {kind} -n {ns}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let list: Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
    Ok(list["items"].as_array().cloned().unwrap_or_default())
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// Upstream's `ipFamilyOf`.
fn family_of(ip: IpAddr) -> &'static str {
    if ip.is_ipv4() { "IPv4" } else { "IPv6" }
}

// ------------------------------------------------------------------------------------------
// Upstream's objects (k8s_objects.go). The namespace is set when they are applied.

/// `newHelloService()`.
fn hello_service() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "hello",
            "annotations": {"dummy-svc": "dummy"},
            "labels": {"dummy-svc": "dummy"},
        },
        "spec": {
            "selector": {"app": "hello"},
            "ports": [
                {"name": "tcp", "port": 42, "protocol": "TCP"},
                {"name": "udp", "port": 42, "protocol": "UDP"},
            ],
            "sessionAffinity": "ClientIP",
            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10}},
            "ipFamilyPolicy": "PreferDualStack",
        },
    })
}

/// `newHelloService()` with `clusterIP: None`, as the headless cases make it.
fn headless_service() -> Value {
    let mut s = hello_service();
    s["spec"]["clusterIP"] = json!("None");
    s
}

/// `newHelloServiceExport()`.
fn hello_export() -> Value {
    json!({
        "apiVersion": "multicluster.x-k8s.io/v1beta1",
        "kind": "ServiceExport",
        "metadata": {
            "name": "hello",
            "annotations": {"dummy-svcexport": "dummy"},
            "labels": {"dummy-svcexport": "dummy"},
        },
    })
}

/// `newHelloServiceExport()` exporting these labels and annotations.
fn hello_export_with(labels: Value, annotations: Value) -> Value {
    let mut se = hello_export();
    se["spec"] = json!({"exportedLabels": labels, "exportedAnnotations": annotations});
    se
}

/// The `hello` Pod template. Sluice differs: one `sluice/echo` container serving HTTP on
/// 42 (its JSON names cluster, Pod and namespace) instead of upstream's two socat
/// containers answering `pod ip <ip>` on TCP and UDP 42.
fn hello_pod_template() -> Value {
    json!({
        "metadata": {"labels": {"app": "hello"}},
        "spec": {
            "restartPolicy": "Always",
            "containers": [{
                "name": "hello",
                "image": "sluice/echo",
                "env": [{"name": "ECHO_HTTP_PORT", "value": "42"}],
            }],
        },
    })
}

/// `newHelloDeployment()` (no readiness probe, as upstream).
fn hello_deployment(replicas: u32) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "hello"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "hello"}},
            "template": hello_pod_template(),
        },
    })
}

/// `newStatefulSet(replicas)`: Pods `hello-ss-<i>` with hostnames, governed by `hello`.
fn hello_stateful_set(replicas: u32) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "hello-ss"},
        "spec": {
            "serviceName": "hello",
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "hello"}},
            "template": hello_pod_template(),
        },
    })
}

/// A port as upstream's `toMCSPorts` keeps it.
#[derive(Debug, PartialEq)]
struct McsPort {
    name: String,
    protocol: String,
    port: i64,
    app_protocol: Option<String>,
}

fn port(name: &str, protocol: &str, port: i64) -> McsPort {
    McsPort {
        name: name.into(),
        protocol: protocol.into(),
        port,
        app_protocol: None,
    }
}

/// `sortMCSPorts(toMCSPorts(ports))`: name, protocol, port, appProtocol, by lower-cased name.
fn mcs_ports(ports: &Value) -> Vec<McsPort> {
    let s = |p: &Value, k: &str| p[k].as_str().unwrap_or_default().to_string();
    let mut out: Vec<McsPort> = ports
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| McsPort {
            name: s(p, "name"),
            protocol: s(p, "protocol"),
            port: p["port"].as_i64().unwrap_or(0),
            app_protocol: p["appProtocol"].as_str().map(str::to_string),
        })
        .collect();
    out.sort_by_key(|p| p.name.to_lowercase());
    out
}

// ------------------------------------------------------------------------------------------
// DNS: what upstream's `nslookup -type=T NAME.` in a Pod of the cluster asks.

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;
const TYPE_SRV: u16 = 33;

/// An SRV record as upstream parses nslookup's output: port and target (no trailing dot).
#[derive(Debug, Clone, PartialEq)]
struct Srv {
    port: u16,
    target: String,
}

/// The answer section of a response: its A/AAAA and SRV records.
#[derive(Debug, Default)]
struct Answers {
    addresses: Vec<IpAddr>,
    srv: Vec<Srv>,
}

/// One query for the absolute `name` (no search domains, as upstream's trailing dot) of
/// `qtype` to `server`: over UDP, and again over TCP when the answer is truncated.
fn dns_query(server: SocketAddr, name: &str, qtype: u16) -> Result<Answers, String> {
    static NEXT_ID: AtomicU16 = AtomicU16::new(1);
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let mut query = id.to_be_bytes().to_vec();
    query.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]); // RD; one question
    for label in name.trim_end_matches('.').split('.') {
        query.push(label.len() as u8);
        query.extend_from_slice(label.as_bytes());
    }
    query.push(0);
    query.extend_from_slice(&qtype.to_be_bytes());
    query.extend_from_slice(&1u16.to_be_bytes()); // IN
    let io = |e: std::io::Error| format!("DNS query {name} type {qtype} to {server}: {e}");
    let timeout = Some(Duration::from_secs(2));
    let local = if server.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let local: SocketAddr = local.parse().unwrap();
    let udp = UdpSocket::bind(local).map_err(io)?;
    udp.set_read_timeout(timeout).map_err(io)?;
    udp.connect(server).map_err(io)?;
    udp.send(&query).map_err(io)?;
    let mut buf = vec![0u8; 65535];
    let mut response = loop {
        let n = udp.recv(&mut buf).map_err(io)?;
        if n >= 12 && buf[..2] == id.to_be_bytes() {
            break buf[..n].to_vec();
        }
    };
    if response[2] & 0x02 != 0 {
        // Truncated: the same query over TCP, length-prefixed.
        let mut tcp = TcpStream::connect_timeout(&server, Duration::from_secs(2)).map_err(io)?;
        tcp.set_read_timeout(timeout).map_err(io)?;
        let mut framed = (query.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&query);
        tcp.write_all(&framed).map_err(io)?;
        let mut len = [0u8; 2];
        tcp.read_exact(&mut len).map_err(io)?;
        response = vec![0u8; usize::from(u16::from_be_bytes(len))];
        tcp.read_exact(&mut response).map_err(io)?;
    }
    parse_answers(&response).ok_or_else(|| format!("DNS {name}: malformed response {response:?}"))
}

/// The name at `pos` (following compression pointers) and the position after it.
fn read_name(msg: &[u8], mut pos: usize) -> Option<(String, usize)> {
    let mut labels = Vec::new();
    let mut end = None;
    for _ in 0..128 {
        let len = usize::from(*msg.get(pos)?);
        if len & 0xc0 == 0xc0 {
            if end.is_none() {
                end = Some(pos + 2);
            }
            pos = ((len & 0x3f) << 8) | usize::from(*msg.get(pos + 1)?);
        } else if len == 0 {
            return Some((labels.join("."), end.unwrap_or(pos + 1)));
        } else {
            labels.push(String::from_utf8_lossy(msg.get(pos + 1..pos + 1 + len)?).into_owned());
            pos += 1 + len;
        }
    }
    None
}

fn parse_answers(msg: &[u8]) -> Option<Answers> {
    let u16_at =
        |i: usize| -> Option<u16> { Some(u16::from_be_bytes([*msg.get(i)?, *msg.get(i + 1)?])) };
    let questions = u16_at(4)?;
    let answers = u16_at(6)?;
    let mut pos = 12;
    for _ in 0..questions {
        pos = read_name(msg, pos)?.1 + 4;
    }
    let mut out = Answers::default();
    for _ in 0..answers {
        let p = read_name(msg, pos)?.1;
        let rtype = u16_at(p)?;
        let len = usize::from(u16_at(p + 8)?);
        let rdata = msg.get(p + 10..p + 10 + len)?;
        match (rtype, len) {
            (TYPE_A, 4) => out
                .addresses
                .push(IpAddr::from(<[u8; 4]>::try_from(rdata).ok()?)),
            (TYPE_AAAA, 16) => out
                .addresses
                .push(IpAddr::from(<[u8; 16]>::try_from(rdata).ok()?)),
            // priority, weight, port, target
            (TYPE_SRV, _) => out.srv.push(Srv {
                port: u16_at(p + 14)?,
                target: read_name(msg, p + 16)?.0,
            }),
            _ => {}
        }
        pos = p + 10 + len;
    }
    Some(out)
}

/// Upstream's `ContainSubstring(ip)` on nslookup's output: the answer includes `ip`.
fn includes(ip: IpAddr) -> impl Fn(&[IpAddr]) -> Result<(), String> {
    move |got: &[IpAddr]| check(got.contains(&ip), || format!("answer {got:?} lacks {ip}"))
}

/// Upstream's `HaveAddresses(want)`: exactly these addresses, no more, no duplicates.
fn exactly(mut want: Vec<IpAddr>) -> impl Fn(&[IpAddr]) -> Result<(), String> {
    want.sort();
    move |got: &[IpAddr]| {
        let mut got = got.to_vec();
        got.sort();
        check(got == want, || {
            format!("answer {got:?}, want exactly {want:?}")
        })
    }
}

// ------------------------------------------------------------------------------------------
// The clusterset and upstream's test driver.

/// A `hello` Pod: its cluster, name and IP.
#[derive(Debug)]
struct HelloPod {
    cluster: String,
    name: String,
    ip: String,
}

/// Who must answer a connection: upstream's `pod ip` (any `hello` Pod of the case) or
/// `pod ip <ip of P>` (Pod P).
#[derive(Debug)]
enum Answerer<'a> {
    AnyHello,
    Pod(&'a HelloPod),
}

/// A two-cluster `sluice dev up` (upstream's `clients`).
struct Clusterset {
    k: Vec<Kubectl>,
    /// Each cluster's DNS server: the one its Pods use.
    dns: Vec<SocketAddr>,
    _dev: DevUp,
}

impl Clusterset {
    fn start() -> Self {
        let (dev, took) = DevUp::start(&CLUSTERS.join(","));
        eprintln!("dev up (2 clusters) ready in {:.2} s", took.as_secs_f64());
        let k: Vec<Kubectl> = CLUSTERS.iter().map(|c| dev.kubectl(c)).collect();
        let dns: Vec<SocketAddr> = CLUSTERS
            .iter()
            .map(|c| {
                let path = dev.state.join(format!("clusters/{c}.json"));
                let d: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
                d["dns"].as_str().unwrap().parse::<SocketAddr>().unwrap()
            })
            .collect();
        Self { k, dns, _dev: dev }
    }

    /// Upstream's `JustBeforeEach`: the namespace in every cluster, then in cluster 0 the
    /// `hello` Deployment (if any), the Service and (upstream's `autoExportService`,
    /// when `export` is given) the ServiceExport. Sluice differs: there are no request
    /// Pods to create and await (see the file's comment).
    fn case(
        &self,
        id: &'static str,
        service: Value,
        deployment: Option<Value>,
        export: Option<Value>,
    ) -> Case<'_> {
        eprintln!("--- {id}");
        let ns = format!("mcs-conformance-{}", id.to_lowercase());
        for k in &self.k {
            k.ok(&["create", "namespace", &ns]);
        }
        let replicas = deployment
            .as_ref()
            .and_then(|d| d["spec"]["replicas"].as_u64())
            .unwrap_or(1) as usize;
        let mut case = Case {
            cs: self,
            id,
            ns,
            service: Value::Null,
            replicas,
        };
        case.service = case.deploy(0, &service, deployment.as_ref());
        if let Some(export) = export {
            case.export(0, &export);
        }
        case
    }

    /// The base setup: a ClusterIP `hello` with one Pod, exported from cluster 0.
    fn base_case(&self, id: &'static str) -> Case<'_> {
        self.case(
            id,
            hello_service(),
            Some(hello_deployment(1)),
            Some(hello_export()),
        )
    }

    /// Upstream's `newTwoClusterTestDriver`. Cluster 0's `hello` is exported with
    /// `export` and its import awaited, then 1.1 s pass so that it is strictly the oldest
    /// export. Then `service` (with the Deployment) is exported with `export2` from
    /// cluster 1.
    fn two_cluster_case(
        &self,
        id: &'static str,
        export: Value,
        service: Value,
        export2: Value,
    ) -> Case<'_> {
        let case = self.case(id, hello_service(), Some(hello_deployment(1)), None);
        case.export(0, &export);
        case.await_si(0, |_| Ok(()));
        std::thread::sleep(Duration::from_millis(1100));
        case.deploy(1, &service, Some(&hello_deployment(1)));
        case.export(1, &export2);
        case
    }
}

/// One upstream spec. Its namespace goes from every cluster at the end, as upstream's
/// AfterEach does.
struct Case<'a> {
    cs: &'a Clusterset,
    id: &'static str,
    ns: String,
    /// The `hello` Service as cluster 0's API server stored it (upstream's `t.helloService`).
    service: Value,
    /// Replicas of the `hello` Deployment: how many endpoints `await_k8s_endpoints` wants.
    replicas: usize,
}

impl Drop for Case<'_> {
    fn drop(&mut self) {
        for k in &self.cs.k {
            let _ = k.run(&["delete", "namespace", &self.ns, "--wait=false"]);
        }
    }
}

impl Case<'_> {
    /// Cluster 0's ServiceImport comes to hold the stored Service's `spec.<field>`.
    fn await_si_field_as_service(&self, field: &str) {
        let want = self.service["spec"][field].clone();
        self.await_si(0, |si| {
            check(si["spec"][field] == want, || {
                format!("{field} {}, the Service's {want}", si["spec"][field])
            })
        });
    }

    fn name(&self, c: usize) -> &'static str {
        CLUSTERS[c]
    }

    fn fqdn(&self) -> String {
        format!("hello.{}.svc.clusterset.local", self.ns)
    }

    fn must<T>(&self, r: Result<T, String>, what: &str) -> T {
        r.unwrap_or_else(|e| panic!("{}: {what}: {e}", self.id))
    }

    fn apply(&self, c: usize, obj: &Value) {
        let mut obj = obj.clone();
        obj["metadata"]["namespace"] = json!(self.ns);
        self.cs.k[c].apply_stdin(&obj.to_string());
    }

    /// Upstream's `deployHelloService`: the Deployment (if any), then the Service, in
    /// cluster `c`. Returns the Service as stored.
    fn deploy(&self, c: usize, service: &Value, deployment: Option<&Value>) -> Value {
        if let Some(d) = deployment {
            self.apply(c, d);
        }
        self.apply(c, service);
        let stored = get(&self.cs.k[c], "service", &self.ns, "hello")
            .and_then(|s| s.ok_or_else(|| "not found".to_string()));
        self.must(stored, "reading back the hello Service")
    }

    /// Upstream's `createServiceExport`.
    fn export(&self, c: usize, se: &Value) {
        self.apply(c, se);
    }

    /// Upstream's `deleteServiceExport`.
    fn unexport(&self, c: usize) {
        self.cs.k[c].ok(&["delete", "serviceexport", "-n", &self.ns, "hello"]);
    }

    /// Upstream's `getServiceImport`.
    fn si(&self, c: usize) -> Result<Option<Value>, String> {
        get(&self.cs.k[c], "serviceimport", &self.ns, "hello")
    }

    /// Upstream's `awaitServiceImport`: the import exists in cluster `c` and passes
    /// `verify` (retried) within 20 s. Other GET errors are retried too (upstream fails
    /// on them at once, except for deadlines and rate limits).
    fn await_si(&self, c: usize, verify: impl Fn(&Value) -> Result<(), String>) -> Value {
        let r = eventually_ok(WAIT, POLL, || match self.si(c)? {
            Some(si) => verify(&si).map(|()| si),
            None => Err(format!(
                "ServiceImport was not found on cluster {:?}",
                self.name(c)
            )),
        });
        self.must(
            r,
            &format!("awaiting the ServiceImport in cluster {}", self.name(c)),
        )
    }

    /// Upstream's `awaitServiceImportIPFamilies`: the `ipFamilies` of cluster `c`'s import.
    fn await_si_families(&self, c: usize) -> Vec<String> {
        let si = self.await_si(c, |si| {
            check(!strings(&si["spec"]["ipFamilies"]).is_empty(), || {
                "the ServiceImport has no ipFamilies".into()
            })
        });
        strings(&si["spec"]["ipFamilies"])
    }

    /// Upstream's `awaitNoServiceImport`.
    fn await_no_si(&self, c: usize, msg: &str) {
        let r = eventually_ok(WAIT, POLL, || match self.si(c)? {
            None => Ok(()),
            Some(si) => Err(format!("it still exists: {}", si["spec"])),
        });
        self.must(r, msg);
    }

    /// Upstream's `ensureServiceImport`: every GET for 5 s finds it.
    fn ensure_si(&self, c: usize, msg: &str) {
        let r = consistently(ENSURE, POLL, || {
            self.si(c)?
                .map(|_| ())
                .ok_or_else(|| "the ServiceImport is gone".to_string())
        });
        self.must(r, msg);
    }

    /// Upstream's `ensureNoServiceImport`: every GET for 5 s is NotFound.
    fn ensure_no_si(&self, c: usize, msg: &str) {
        let r = consistently(ENSURE, POLL, || match self.si(c)? {
            None => Ok(()),
            Some(si) => Err(format!("a ServiceImport exists: {}", si["spec"])),
        });
        self.must(r, msg);
    }

    /// Upstream's `awaitServiceExportCondition`: only `type` and `status` are checked.
    fn await_export_condition(&self, c: usize, type_: &str, status: &str) {
        let r = eventually_ok(WAIT, POLL, || {
            let se = get(&self.cs.k[c], "serviceexport", &self.ns, "hello")?
                .ok_or("the ServiceExport does not exist")?;
            let cond = se["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|x| x["type"] == type_);
            match cond {
                Some(x) if x["status"] == status => Ok(()),
                other => Err(format!("condition {type_}: {other:?}")),
            }
        });
        self.must(
            r,
            &format!(
                "the {type_} condition was not set to {status} on the ServiceExport in cluster {}",
                self.name(c)
            ),
        );
    }

    /// Upstream's `awaitServicePodIP`: the first `app=hello` Pod of cluster `c`, with IP.
    fn await_service_pod(&self, c: usize) -> HelloPod {
        let r = eventually_ok(WAIT_PODS, POLL, || {
            let pods = list(&self.cs.k[c], "pods", &self.ns, "app=hello")?;
            let pod = pods.first().ok_or("no hello Pod")?;
            let ip = pod["status"]["podIP"].as_str().unwrap_or_default();
            check(!ip.is_empty(), || "the hello Pod has no IP".into())?;
            Ok(HelloPod {
                cluster: self.name(c).to_string(),
                name: pod["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                ip: ip.to_string(),
            })
        });
        self.must(
            r,
            &format!("awaiting the hello Pod's IP in cluster {}", self.name(c)),
        )
    }

    /// Not upstream: a precondition for the connectivity cases. The `hello` Pod of cluster
    /// `c` answers on its own IP, so a check that something is *not* reached cannot pass
    /// merely because nothing runs yet. (Upstream's setup waits for its request Pods
    /// meanwhile.)
    fn await_answering_pod(&self, c: usize) -> HelloPod {
        let pod = self.await_service_pod(c);
        let r = eventually_ok(WAIT_PODS, PROBE, || {
            let reply = http_get(&pod.ip, 42, "/").ok_or("no answer")?;
            self.answered_by(&reply, &Answerer::Pod(&pod))
        });
        self.must(
            r,
            &format!("the hello Pod {pod:?} does not answer on its IP"),
        );
        pod
    }

    /// Upstream's `awaitMCSEndpointSlice`. These are the EndpointSlices in the namespace of
    /// cluster `c` with both MCS label keys, `address_type` and some endpoints. `verify`
    /// must hold for every one of them, and the last one is returned.
    fn await_mcs_slice(
        &self,
        c: usize,
        address_type: &str,
        verify: impl Fn(&Value) -> Result<(), String>,
    ) -> Value {
        let r = eventually_ok(WAIT_PODS, POLL, || {
            let slices = list(&self.cs.k[c], "endpointslices", &self.ns, "")?;
            let candidates: Vec<&Value> = slices
                .iter()
                .filter(|s| {
                    let labels = &s["metadata"]["labels"];
                    labels.get(MCS_SERVICE_NAME).is_some()
                        && labels.get(MCS_SOURCE_CLUSTER).is_some()
                        && s["addressType"] == address_type
                        && s["endpoints"].as_array().is_some_and(|e| !e.is_empty())
                })
                .collect();
            for s in candidates.iter().copied() {
                verify(s)?;
            }
            candidates.last().map(|s| (*s).clone()).ok_or_else(|| {
                format!("no MCS EndpointSlice of address type {address_type} with endpoints")
            })
        });
        self.must(
            r,
            &format!(
                "awaiting the MCS EndpointSlice ({address_type}) in cluster {}",
                self.name(c)
            ),
        )
    }

    /// Upstream's `awaitK8sEndpoints`. These are the endpoints of `address_type` in
    /// cluster 0's own EndpointSlices for `hello`. All must be ready (no `ready` counts as
    /// ready), and there must be as many as the Deployment has replicas. Each comes as
    /// (address, hostname, or else the address with dashes).
    fn await_k8s_endpoints(&self, address_type: &str) -> Vec<(String, String)> {
        let r = eventually_ok(WAIT_PODS, POLL, || {
            let slices = list(
                &self.cs.k[0],
                "endpointslices",
                &self.ns,
                "kubernetes.io/service-name=hello",
            )?;
            let mut out = Vec::new();
            for s in slices.iter().filter(|s| s["addressType"] == address_type) {
                for ep in s["endpoints"].as_array().into_iter().flatten() {
                    check(ep["conditions"]["ready"].as_bool().unwrap_or(true), || {
                        format!("endpoint {ep} is not ready")
                    })?;
                    for a in strings(&ep["addresses"]) {
                        let host = match ep["hostname"].as_str() {
                            Some(h) if !h.is_empty() => h.to_string(),
                            _ => a.replace(['.', ':'], "-"),
                        };
                        out.push((a, host));
                    }
                }
            }
            check(out.len() == self.replicas, || {
                format!("{} endpoints, want {}: {out:?}", out.len(), self.replicas)
            })?;
            Ok(out)
        });
        self.must(
            r,
            &format!("awaiting the hello endpoints ({address_type}) in cluster east"),
        )
    }

    /// A/AAAA lookup of `name` by cluster `c`'s DNS server.
    fn lookup(&self, c: usize, name: &str, family: &str) -> Result<Vec<IpAddr>, String> {
        let qtype = if family == "IPv4" { TYPE_A } else { TYPE_AAAA };
        Ok(dns_query(self.cs.dns[c], name, qtype)?.addresses)
    }

    /// Upstream's `awaitCmdOutputMatches` for `nslookup -type=A|AAAA name.` in cluster `c`:
    /// the answer passes `matches` within 20 s (1 s probes).
    fn await_lookup(
        &self,
        c: usize,
        name: &str,
        family: &str,
        matches: impl Fn(&[IpAddr]) -> Result<(), String>,
    ) {
        let r = eventually_ok(WAIT, PROBE, || matches(&self.lookup(c, name, family)?));
        self.must(
            r,
            &format!("{family} lookup of {name} in cluster {}", self.name(c)),
        );
    }

    /// Upstream's `expectSRVRecords`: exactly `n` SRV records for `name` in cluster `c`
    /// within 20 s (1 s probes).
    fn expect_srv(&self, c: usize, name: &str, n: usize) -> Vec<Srv> {
        let r = eventually_ok(WAIT, PROBE, || {
            let srv = dns_query(self.cs.dns[c], name, TYPE_SRV)?.srv;
            check(srv.len() == n, || {
                format!("{} SRV records, want {n}: {srv:?}", srv.len())
            })?;
            Ok(srv)
        });
        self.must(
            r,
            &format!("SRV query of {name} in cluster {}", self.name(c)),
        )
    }

    /// Upstream's `ncCommand` from a client in cluster `c`. `<svc>.<ns>.svc.clusterset.local`
    /// is resolved in `family` by `c`'s DNS server and connected to on `port` from the host
    /// (the address is one `c`'s dataplane serves). Returns what answered.
    fn probe(&self, c: usize, family: &str, port: u16) -> Result<Value, String> {
        let addrs = self.lookup(c, &self.fqdn(), family)?;
        let addr = addrs
            .first()
            .ok_or_else(|| format!("{} does not resolve ({family})", self.fqdn()))?;
        let host = match addr {
            IpAddr::V4(a) => a.to_string(),
            IpAddr::V6(a) => format!("[{a}]"),
        };
        http_get(&host, port, "/").ok_or_else(|| format!("nothing answered on {host}:{port}"))
    }

    /// Whether `reply` comes from `who`: upstream's match on `pod ip` / `pod ip <ip>`.
    fn answered_by(&self, reply: &Value, who: &Answerer) -> Result<(), String> {
        let ok = reply["namespace"] == self.ns.as_str()
            && match who {
                Answerer::AnyHello => true,
                Answerer::Pod(p) => {
                    reply["cluster"] == p.cluster.as_str() && reply["pod"] == p.name.as_str()
                }
            };
        check(ok, || format!("answered by {reply}, expected {who:?}"))
    }

    /// Upstream's `execPortConnectivityCommand`. From every cluster, and for each IP family
    /// of its ServiceImport, a connection to `<fqdn>:port` is answered by `who` on `n`
    /// probes in a row (1 s apart, within 20 s × n).
    fn await_connectivity(&self, port: u16, who: &Answerer, n: u32) {
        for c in 0..CLUSTERS.len() {
            for family in self.await_si_families(c) {
                let r = eventually_repeatedly(WAIT * n, PROBE, n, || {
                    self.answered_by(&self.probe(c, &family, port)?, who)
                });
                self.must(
                    r,
                    &format!(
                        "connecting from cluster {} to {}:{port} over {family}",
                        self.name(c),
                        self.fqdn()
                    ),
                );
            }
        }
    }
}

// ------------------------------------------------------------------------------------------
// service_import.go, the cases with one exporting cluster.

#[test]
fn conformance_service_imports() {
    let cs = Clusterset::start();

    // SI-2 [Optional, ExportedLabels] "Only labels and annotations specified as exported in
    // the ServiceExport should be propagated to the ServiceImport"
    {
        let se = hello_export_with(
            json!({"dummy-label": "true"}),
            json!({"dummy-annotation": "true"}),
        );
        let t = cs.case("SI-2", hello_service(), Some(hello_deployment(1)), Some(se));
        t.await_si(0, |si| {
            let (a, l) = (&si["metadata"]["annotations"], &si["metadata"]["labels"]);
            check(a["dummy-annotation"] == "true", || {
                format!("annotations {a} lack dummy-annotation=true")
            })?;
            check(a["dummy-svc"] != "dummy", || {
                format!("annotations {a} have the Service's dummy-svc=dummy")
            })?;
            check(l["dummy-label"] == "true", || {
                format!("labels {l} lack dummy-label=true")
            })?;
            check(l["dummy-svc"] != "dummy", || {
                format!("labels {l} have the Service's dummy-svc=dummy")
            })
        });
    }

    // SI-4 [ClusterIP, Required] "Exporting a ClusterIP service should create a
    // ServiceImport of type ClusterSetIP in the service's namespace in each cluster.
    // Unexporting should delete the ServiceImport"
    {
        let t = cs.base_case("SI-4");
        t.await_export_condition(0, "Valid", "True");
        for c in 0..CLUSTERS.len() {
            let si = t.await_si(c, |_| Ok(()));
            assert_eq!(
                si["spec"]["type"],
                "ClusterSetIP",
                "SI-4: ServiceImport on cluster {:?} has type {}",
                t.name(c),
                si["spec"]["type"]
            );
        }
        t.unexport(0);
        for c in 0..CLUSTERS.len() {
            t.await_no_si(
                c,
                &format!(
                    "the ServiceImport in cluster {} was not deleted on unexport",
                    t.name(c)
                ),
            );
        }
    }

    // SI-5 [ClusterIP, Required] "The SessionAffinity for a ClusterSetIP ServiceImport
    // should match the exported service's SessionAffinity"
    {
        let t = cs.base_case("SI-5");
        let config = t.service["spec"]["sessionAffinityConfig"].clone();
        t.await_si(0, |si| {
            check(si["spec"]["sessionAffinity"] == "ClientIP", || {
                format!("sessionAffinity {}", si["spec"]["sessionAffinity"])
            })?;
            check(si["spec"]["sessionAffinityConfig"] == config, || {
                format!(
                    "sessionAffinityConfig {}, the Service's {config}",
                    si["spec"]["sessionAffinityConfig"]
                )
            })
        });
    }

    // SI-6 [ClusterIP, Required] "The InternalTrafficPolicy for a ClusterSetIP
    // ServiceImport should match the exported service's InternalTrafficPolicy"
    {
        let mut svc = hello_service();
        svc["spec"]["internalTrafficPolicy"] = json!("Cluster");
        let t = cs.case("SI-6", svc, Some(hello_deployment(1)), Some(hello_export()));
        t.await_si_field_as_service("internalTrafficPolicy");
    }

    // SI-7 [ClusterIP, Required] "The TrafficDistribution for a ClusterSetIP ServiceImport
    // should match the exported service's TrafficDistribution"
    {
        let mut svc = hello_service();
        svc["spec"]["trafficDistribution"] = json!("PreferClose");
        let t = cs.case("SI-7", svc, Some(hello_deployment(1)), Some(hello_export()));
        // As upstream: the value the API server stored is the expectation.
        t.await_si_field_as_service("trafficDistribution");
    }

    // SI-8 [ClusterIP, Required] "An IP should be allocated for a ClusterSetIP
    // ServiceImport for each IP family"
    {
        let t = cs.base_case("SI-8");
        let si = t.await_si(0, |si| {
            check(!strings(&si["spec"]["ips"]).is_empty(), || {
                "the ServiceImport has no ips".into()
            })
        });
        let (ips, families) = (
            strings(&si["spec"]["ips"]),
            strings(&si["spec"]["ipFamilies"]),
        );
        assert_eq!(
            ips.len(),
            families.len(),
            "SI-8: ips {ips:?} and ipFamilies {families:?}"
        );
        for (ip, family) in ips.iter().zip(&families) {
            let parsed: IpAddr = ip
                .parse()
                .unwrap_or_else(|_| panic!("SI-8: {ip:?} is not an IP"));
            assert_eq!(
                family_of(parsed),
                family.as_str(),
                "SI-8: ips {ips:?} and ipFamilies {families:?}"
            );
        }
    }

    // SI-9 [ClusterIP, Required] "The ports for a ClusterSetIP ServiceImport should match
    // those of the exported service"
    {
        let t = cs.base_case("SI-9");
        t.await_si(0, |si| {
            let got = mcs_ports(&si["spec"]["ports"]);
            let want = vec![port("tcp", "TCP", 42), port("udp", "UDP", 42)];
            check(got == want, || format!("ports {got:?}, want {want:?}"))
        });
    }

    // SI-12 [Headless, Required] "Exporting a headless service should create a
    // ServiceImport of type Headless in the service's namespace in each cluster.
    // Unexporting should delete the ServiceImport"
    {
        let t = cs.case(
            "SI-12",
            headless_service(),
            Some(hello_deployment(1)),
            Some(hello_export()),
        );
        for c in 0..CLUSTERS.len() {
            let si = t.await_si(c, |_| Ok(()));
            assert_eq!(
                si["spec"]["type"],
                "Headless",
                "SI-12: ServiceImport on cluster {:?} has type {}",
                t.name(c),
                si["spec"]["type"]
            );
        }
        t.unexport(0);
        for c in 0..CLUSTERS.len() {
            t.await_no_si(
                c,
                &format!(
                    "the ServiceImport in cluster {} was not deleted on unexport",
                    t.name(c)
                ),
            );
        }
    }

    // SI-13 [Headless, Required] "No clusterset IP should be allocated for a Headless
    // ServiceImport"
    {
        let t = cs.case(
            "SI-13",
            headless_service(),
            Some(hello_deployment(1)),
            Some(hello_export()),
        );
        t.await_si(0, |_| Ok(()));
        // Upstream passes the fetched `si.Spec.IPs` to Consistently (one value, checked
        // for 5 s). This reads the import again on each 1 s probe, which includes that check.
        let r = consistently(ENSURE, PROBE, || {
            let si = t.si(0)?.ok_or("the ServiceImport is gone")?;
            check(strings(&si["spec"]["ips"]).is_empty(), || {
                format!("a clusterset IP was allocated: {}", si["spec"]["ips"])
            })
        });
        t.must(r, "the Headless ServiceImport must have no ips");
    }

    // SI-14 [ExternalName, Required] "Exporting an ExternalName service should set
    // ServiceExport Valid condition to False"
    {
        let mut svc = hello_service();
        svc["spec"]["type"] = json!("ExternalName");
        svc["spec"]["externalName"] = json!("example.com");
        svc["spec"]
            .as_object_mut()
            .unwrap()
            .remove("ipFamilyPolicy");
        let t = cs.case(
            "SI-14",
            svc,
            Some(hello_deployment(1)),
            Some(hello_export()),
        );
        t.await_export_condition(0, "Valid", "False");
        t.ensure_no_si(0, "a ServiceImport exists for an ExternalName service");
    }
}

// ------------------------------------------------------------------------------------------
// service_import.go, the cases with two exporting clusters.

#[test]
fn conformance_service_imports_from_two_clusters() {
    let cs = Clusterset::start();

    // SI-1 [Required] "A ServiceImport should only exist as long as there's at least one
    // exporting cluster"
    {
        let t = cs.base_case("SI-1");
        t.await_si(0, |_| Ok(()));
        t.deploy(1, &hello_service(), Some(&hello_deployment(1)));
        t.export(1, &hello_export());
        t.ensure_si(
            0,
            "the ServiceImport no longer exists after exporting on cluster west",
        );
        t.unexport(0);
        t.ensure_si(
            0,
            "the ServiceImport no longer exists after unexporting the service on cluster east \
             while still exported on cluster west",
        );
        t.unexport(1);
        t.await_no_si(
            0,
            "the ServiceImport still exists after unexporting the service on all clusters",
        );
    }

    // SI-3 [Optional, ExportedLabels] "A service exported on two clusters with conflicting
    // annotations and labels should apply the conflict resolution policy and report a
    // Conflict condition on each ServiceExport"
    {
        let t = cs.two_cluster_case(
            "SI-3",
            hello_export_with(
                json!({"dummy-label": "true"}),
                json!({"dummy-annotation": "true"}),
            ),
            hello_service(),
            hello_export_with(
                json!({"dummy-label2": "true"}),
                json!({"dummy-annotation2": "true"}),
            ),
        );
        t.await_export_condition(0, "Conflict", "True");
        t.await_export_condition(1, "Conflict", "True");
        t.await_si(0, |si| {
            let (a, l) = (&si["metadata"]["annotations"], &si["metadata"]["labels"]);
            check(a["dummy-annotation"] == "true", || {
                format!("annotations {a} lack the oldest export's dummy-annotation=true")
            })?;
            check(a["dummy-annotation2"] != "true", || {
                format!("annotations {a} have the newer export's dummy-annotation2=true")
            })?;
            check(l["dummy-label"] == "true", || {
                format!("labels {l} lack the oldest export's dummy-label=true")
            })?;
            check(l["dummy-label2"] != "true", || {
                format!("labels {l} have the newer export's dummy-label2=true")
            })
        });
    }

    // SI-10 [ClusterIP, Required] "A ClusterIP service exported on two clusters should
    // expose the union of the constituent service ports and raise a conflict"
    {
        let mut svc2 = hello_service();
        svc2["spec"]["ports"] = json!([
            {"name": "tcp", "port": 42, "protocol": "TCP"},
            {"name": "stcp", "port": 142, "protocol": "SCTP"},
        ]);
        let t = cs.two_cluster_case("SI-10", hello_export(), svc2, hello_export());
        t.await_export_condition(0, "Conflict", "True");
        t.await_export_condition(1, "Conflict", "True");
        t.await_si(0, |si| {
            let got = mcs_ports(&si["spec"]["ports"]);
            let want = vec![
                port("stcp", "SCTP", 142),
                port("tcp", "TCP", 42),
                port("udp", "UDP", 42),
            ];
            check(got == want, || format!("ports {got:?}, want {want:?}"))
        });
    }

    // SI-11 [ClusterIP, Required] "A ClusterIP service exported on two clusters with
    // conflicting ports should apply the conflict resolution policy and report a Conflict
    // condition on each ServiceExport"
    {
        let mut svc2 = hello_service();
        svc2["spec"]["ports"] = json!([{"name": "tcp", "port": 43, "protocol": "TCP"}]);
        let t = cs.two_cluster_case("SI-11", hello_export(), svc2, hello_export());
        t.await_export_condition(0, "Conflict", "True");
        t.await_export_condition(1, "Conflict", "True");
        t.await_si(0, |si| {
            let got = mcs_ports(&si["spec"]["ports"]);
            let want = vec![port("tcp", "TCP", 42), port("udp", "UDP", 42)];
            check(got == want, || {
                format!("the service ports were not resolved correctly: {got:?}, want {want:?}")
            })
        });
    }

    // SI-15 [Required] "A service exported on two clusters with conflicting headlessness
    // should apply the conflict resolution policy and report a Conflict condition on the
    // ServiceExport"
    {
        let t = cs.two_cluster_case("SI-15", hello_export(), headless_service(), hello_export());
        t.await_export_condition(0, "Conflict", "True");
        t.await_export_condition(1, "Conflict", "True");
        for c in 0..CLUSTERS.len() {
            let si = t.await_si(c, |_| Ok(()));
            assert_eq!(
                si["spec"]["type"],
                "ClusterSetIP",
                "SI-15: ServiceImport on cluster {:?} has type {} (the oldest export's type wins)",
                t.name(c),
                si["spec"]["type"]
            );
        }
    }
}

// ------------------------------------------------------------------------------------------
// clusterip_service_dns.go and headless_service_dns.go.

#[test]
fn conformance_dns() {
    let cs = Clusterset::start();

    // DNS-C1 [Optional, DNS, ClusterIP] "A DNS lookup of the
    // <service>.<ns>.svc.clusterset.local domain for a ClusterIP service should resolve to
    // the clusterset IP"
    {
        let t = cs.base_case("DNS-C1");
        for c in 0..CLUSTERS.len() {
            let si = t.await_si(c, |si| {
                check(!strings(&si["spec"]["ips"]).is_empty(), || {
                    "the ServiceImport has no ips".into()
                })
            });
            for ip in strings(&si["spec"]["ips"]) {
                let ip: IpAddr = ip
                    .parse()
                    .unwrap_or_else(|_| panic!("DNS-C1: {ip:?} is not an IP"));
                t.await_lookup(c, &t.fqdn(), family_of(ip), includes(ip));
            }
        }
    }

    // DNS-C2 [Optional, DNS, ClusterIP] "A DNS SRV query of the
    // <service>.<ns>.svc.clusterset.local domain for a ClusterIP service should return
    // valid SRV records"
    {
        let t = cs.base_case("DNS-C2");
        for c in 0..CLUSTERS.len() {
            let srv = t.expect_srv(c, &t.fqdn(), 1);
            assert_eq!(
                srv,
                vec![Srv {
                    port: 42,
                    target: t.fqdn()
                }],
                "DNS-C2: SRV records in cluster {}",
                t.name(c)
            );
        }
    }

    // DNS-C3 [Optional, DNS, ClusterIP] "DNS lookups of the <service>.<ns>.svc.cluster.local
    // domain for a ClusterIP service should only resolve local services"
    // (Sluice's DNS server answers cluster.local too: local clusters run no CoreDNS.)
    {
        let t = cs.base_case("DNS-C3");
        let r = eventually_ok(WAIT, PROBE, || {
            let svc = get(&cs.k[0], "service", &t.ns, "hello")?.ok_or("no Service")?;
            let ip = svc["spec"]["clusterIP"].as_str().unwrap_or_default();
            check(!ip.is_empty(), || "no clusterIP".into())?;
            Ok(ip.to_string())
        });
        let ip: IpAddr = t
            .must(r, "awaiting the Service's clusterIP")
            .parse()
            .unwrap();
        let local = format!("hello.{}.svc.cluster.local", t.ns);
        t.await_lookup(0, &local, family_of(ip), includes(ip));
    }

    // DNS-H1 [Optional, DNS, Headless] "A DNS query of the
    // <service>.<ns>.svc.clusterset.local domain for a headless service should return the
    // ready endpoint addresses of all the backing pods"
    {
        let t = cs.case(
            "DNS-H1",
            headless_service(),
            Some(hello_deployment(2)),
            Some(hello_export()),
        );
        for c in 0..CLUSTERS.len() {
            for family in t.await_si_families(c) {
                let want: Vec<IpAddr> = t
                    .await_k8s_endpoints(&family)
                    .iter()
                    .map(|(a, _)| a.parse().unwrap())
                    .collect();
                t.await_lookup(c, &t.fqdn(), &family, exactly(want));
            }
        }
    }

    // DNS-H2 [Optional, DNS, Headless, EndpointSlice] "A DNS query of the
    // <hostname>.<clusterid>.<service>.<ns>.svc.clusterset.local domain for a headless
    // StatefulSet service should return the requested pod's endpoint address"
    {
        let t = cs.case("DNS-H2", headless_service(), None, Some(hello_export()));
        t.apply(0, &hello_stateful_set(2));
        for c in 0..CLUSTERS.len() {
            for family in t.await_si_families(c) {
                let eps = t.await_mcs_slice(c, &family, |s| {
                    let eps = s["endpoints"].as_array().cloned().unwrap_or_default();
                    check(eps.len() == 2, || {
                        format!("{} endpoints, want 2: {}", eps.len(), s["endpoints"])
                    })?;
                    for ep in &eps {
                        check(ep["conditions"]["ready"].as_bool().unwrap_or(true), || {
                            format!("endpoint {ep} is not ready")
                        })?;
                        check(
                            ep["hostname"].as_str().is_some_and(|h| !h.is_empty()),
                            || format!("endpoint {ep} has no hostname"),
                        )?;
                    }
                    Ok(())
                });
                let cluster_id = eps["metadata"]["labels"][MCS_SOURCE_CLUSTER]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                for ep in eps["endpoints"].as_array().unwrap() {
                    let name = format!(
                        "{}.{cluster_id}.hello.{}.svc.clusterset.local",
                        ep["hostname"].as_str().unwrap(),
                        t.ns
                    );
                    let want: Vec<IpAddr> = strings(&ep["addresses"])
                        .iter()
                        .map(|a| a.parse().unwrap())
                        .collect();
                    t.await_lookup(c, &name, &family, exactly(want));
                }
            }
        }
    }

    // DNS-H3 [Optional, DNS, Headless] "A DNS SRV query of the
    // <service>.<ns>.svc.clusterset.local domain for a headless service should return valid
    // SRV records"
    {
        let t = cs.case(
            "DNS-H3",
            headless_service(),
            Some(hello_deployment(2)),
            Some(hello_export()),
        );
        let mut all = Vec::new();
        for family in strings(&t.service["spec"]["ipFamilies"]) {
            all.extend(t.await_k8s_endpoints(&family));
        }
        let port = t.service["spec"]["ports"][0]["port"].as_u64().unwrap() as u16;
        for c in 0..CLUSTERS.len() {
            let srv = t.expect_srv(c, &t.fqdn(), all.len());
            for (_, host) in &all {
                let record = srv
                    .iter()
                    .find(|r| r.target.starts_with(host.as_str()))
                    .unwrap_or_else(|| {
                        panic!(
                            "DNS-H3: cluster {}: SRV record for endpoint host name {host:?} \
                             not received. Actual records received: {srv:?}",
                            t.name(c)
                        )
                    });
                assert_eq!(
                    record.port,
                    port,
                    "DNS-H3: cluster {}: {record:?}",
                    t.name(c)
                );
            }
        }
    }
}

// ------------------------------------------------------------------------------------------
// endpoint_slice.go and connectivity.go.

#[test]
fn conformance_endpoint_slices_and_connectivity() {
    let cs = Clusterset::start();

    // EPS-1 [Optional, EndpointSlice] "Exporting a service should create an MCS
    // EndpointSlice in the service's namespace in each cluster with the required MCS
    // labels. Unexporting should delete the EndpointSlice."
    // (Upstream's --skip-verify-eps-managed-by is off: the managed-by value is checked.)
    {
        let t = cs.base_case("EPS-1");
        let mut names = Vec::new();
        for c in 0..CLUSTERS.len() {
            for family in t.await_si_families(c) {
                let eps = t.await_mcs_slice(c, &family, |_| Ok(()));
                let labels = &eps["metadata"]["labels"];
                names.push((c, eps["metadata"]["name"].as_str().unwrap().to_string()));
                assert_eq!(
                    labels[MCS_SERVICE_NAME],
                    "hello",
                    "EPS-1: cluster {}: labels {labels}",
                    t.name(c)
                );
                assert!(
                    labels.get(MANAGED_BY).is_some(),
                    "EPS-1: cluster {}: no {MANAGED_BY} label: {labels}",
                    t.name(c)
                );
                assert_ne!(
                    labels[MANAGED_BY],
                    K8S_MANAGED_BY,
                    "EPS-1: cluster {}: labels {labels}",
                    t.name(c)
                );
            }
        }
        t.unexport(0);
        for (c, name) in names {
            let r = eventually_ok(WAIT, POLL, || {
                match get(&cs.k[c], "endpointslices", &t.ns, &name)? {
                    None => Ok(()),
                    Some(_) => Err("it still exists".to_string()),
                }
            });
            t.must(
                r,
                &format!(
                    "the EndpointSlice {name:?} was not deleted on unexport from cluster {:?}",
                    t.name(c)
                ),
            );
        }
    }

    // CONN-1 [Required] "Connectivity to a service that is not exported should be
    // inaccessible"
    {
        let t = cs.case("CONN-1", hello_service(), Some(hello_deployment(1)), None);
        t.await_answering_pod(0);
        for family in strings(&t.service["spec"]["ipFamilies"]) {
            for c in 0..CLUSTERS.len() {
                for attempt in 1..=20 {
                    // Upstream: nc's output does not contain `pod ip`. Here: no hello Pod
                    // answers (usually the name does not resolve at all).
                    if let Ok(reply) = t.probe(c, &family, 42) {
                        assert!(
                            t.answered_by(&reply, &Answerer::AnyHello).is_err(),
                            "CONN-1: attempt {attempt} from cluster {} ({family}): a service \
                             that is not exported answered: {reply}",
                            t.name(c)
                        );
                    }
                }
            }
        }
    }

    // CONN-2 [Optional, Connectivity, ClusterIP] "Connectivity to an exported ClusterIP
    // service should be accessible through DNS"
    {
        let t = cs.case("CONN-2", hello_service(), Some(hello_deployment(1)), None);
        t.export(0, &hello_export());
        t.await_connectivity(42, &Answerer::AnyHello, 1);
    }

    // CONN-3 [Optional, Connectivity, ClusterIP] "Connectivity to a ClusterIP service
    // existing in two clusters but exported from one should only access the exporting
    // cluster"
    {
        let t = cs.case("CONN-3", hello_service(), Some(hello_deployment(1)), None);
        t.deploy(1, &hello_service(), Some(&hello_deployment(1)));
        t.export(0, &hello_export());
        let pod = t.await_service_pod(0);
        t.await_answering_pod(1);
        t.await_connectivity(42, &Answerer::Pod(&pod), 10);
    }

    // CONN-4 [Optional, Connectivity, ClusterIP, StrictPortConflict] "Connectivity to
    // exported services with same port name but different port numbers on each cluster
    // should only route traffic to the cluster that exposes the port"
    {
        let mut svc2 = hello_service();
        svc2["spec"]["ports"] =
            json!([{"name": "tcp", "port": 4242, "protocol": "TCP", "targetPort": 42}]);
        let t = cs.two_cluster_case("CONN-4", hello_export(), svc2, hello_export());
        let pod = t.await_service_pod(0);
        t.await_answering_pod(1);
        t.await_connectivity(42, &Answerer::Pod(&pod), 10);
    }

    // CONN-5 [Optional, Connectivity, ClusterIP, StrictPortConflict] "Connectivity to
    // exported services with different port name on each cluster should route traffic to
    // each port only to the cluster that exposes it"
    {
        let mut svc2 = hello_service();
        svc2["spec"]["ports"] =
            json!([{"name": "tcp2", "port": 4242, "protocol": "TCP", "targetPort": 42}]);
        let t = cs.two_cluster_case("CONN-5", hello_export(), svc2, hello_export());
        let pod0 = t.await_service_pod(0);
        let pod1 = t.await_service_pod(1);
        t.await_connectivity(42, &Answerer::Pod(&pod0), 10);
        t.await_connectivity(4242, &Answerer::Pod(&pod1), 10);
    }
}
