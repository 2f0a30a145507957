//! `sluice dev up`: a whole local clusterset on this machine. Starts the control plane and,
//! per cluster, an API server in single-cluster mode and a node agent (with the cluster's
//! controllers); writes kubeconfigs and descriptors; registers each cluster as a `Cluster`
//! in the control plane; prints `ready`; on SIGINT/SIGTERM stops everything it started.
//! `--bare` starts only the clusters (API server and node agent each), for the charts.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::json;

/// Why the local clusterset did not come up.
#[derive(Debug, thiserror::Error)]
pub enum DevUpError {
    #[error("--clusters needs 1 to 20 names")]
    ClusterCount,
    #[error("cluster name {0:?} is not a DNS label")]
    ClusterName(String),
    #[error("starting {0}: {1}")]
    Spawn(String, std::io::Error),
    #[error("{0} did not start: {1:?}")]
    DidNotStart(String, String),
    #[error("{0} was not ready within {1:?}")]
    NotReady(String, Duration),
    #[error("cluster {0}: the node agent did not register within 30 s")]
    NodeNotRegistered(String),
    #[error("issuing tunnel certificates failed")]
    Certs,
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error(transparent)]
    Client(#[from] sluice_kube::client::ClientError),
    #[error("registering the clusters: {0}")]
    Register(#[from] kube::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// An IO error's context: what was being done.
fn io(what: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> DevUpError {
    move |e| DevUpError::Io(what.to_string(), e)
}

/// What to start.
#[derive(Clone, Debug)]
pub struct DevUpConfig {
    pub state: PathBuf,
    pub clusters: Vec<String>,
    /// The `sluice` binary to run the parts with.
    pub sluice_bin: PathBuf,
    /// Stream every part's log to the terminal instead of `<state>/logs/`.
    pub verbose: bool,
    /// The node agents run only the built-in images (see [`crate::node::NodeConfig`]).
    pub builtin_images_only: bool,
    /// Only the clusters' API servers and node agents: no control plane, syncers, MCS
    /// controller, dataplanes or DNS servers, for installing those with the Helm charts.
    pub bare: bool,
}

/// Where one local cluster's parts answer (`host:port` each).
pub struct Addresses<'a> {
    pub api: &'a str,
    pub dns: &'a str,
    pub gateway: &'a str,
    pub ingress: &'a str,
}

/// The descriptor of one local cluster (`<state>/clusters/<name>.json`).
pub fn descriptor(name: &str, index: u8, a: &Addresses<'_>) -> serde_json::Value {
    json!({
        "name": name,
        "index": index,
        "api": a.api,
        "dns": a.dns,
        "gateway": a.gateway,
        "ingress": a.ingress,
        "podCidr": format!("127.{}.0.0/16", 20 + index),
        "serviceCidr": format!("127.{}.0.0/16", 40 + index),
        "vipCidr": format!("127.{}.0.0/16", 60 + index),
        "node": format!("127.{}.0.1:10250", 20 + index),
    })
}

/// Write cluster `name`'s descriptor, `<state>/clusters/<name>.json`.
fn write_descriptor(
    state: &Path,
    name: &str,
    index: u8,
    a: &Addresses<'_>,
) -> Result<(), DevUpError> {
    std::fs::write(
        state.join("clusters").join(format!("{name}.json")),
        serde_json::to_vec_pretty(&descriptor(name, index, a))?,
    )
    .map_err(io(format!("writing cluster {name}'s descriptor")))
}

/// Where the parts' own output goes: one file per part in `<state>/logs/`, or the
/// terminal with `--verbose`.
struct Logs {
    dir: PathBuf,
    verbose: bool,
}

impl Logs {
    /// The log file of part `what` ("cluster east API server" → `east-api-server.log`).
    fn file(&self, what: &str) -> PathBuf {
        let slug: String = what
            .trim_start_matches("cluster ")
            .to_lowercase()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join("-");
        self.dir.join(format!("{slug}.log"))
    }

    fn stderr(&self, what: &str) -> Result<Stdio, DevUpError> {
        if self.verbose {
            return Ok(Stdio::inherit());
        }
        let path = self.file(what);
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io(path.display()))?;
        Ok(Stdio::from(f))
    }
}

/// Child processes, stopped in reverse order of start.
/// The variable by which each part `dev up` starts knows its parent's pid, to stop itself
/// when `dev up` is gone however it ended (the `sluice` binary watches it).
pub const PARENT_PID_ENV: &str = "SLUICE_PARENT_PID";

struct Children {
    procs: Vec<(String, Child)>,
    logs: Logs,
}

impl Children {
    /// Start part `what`, its stderr to its log.
    fn spawn(&mut self, what: &str, cmd: &mut Command) -> Result<&mut Child, DevUpError> {
        let child = cmd
            .env(PARENT_PID_ENV, std::process::id().to_string())
            .stderr(self.logs.stderr(what)?)
            .spawn()
            .map_err(|e| DevUpError::Spawn(what.to_string(), e))?;
        self.procs.push((what.to_string(), child));
        let last = self.procs.len() - 1;
        Ok(&mut self.procs[last].1)
    }

    /// Stop each child in turn, newest first (a node agent stops its Pods before its API
    /// server goes): SIGTERM, wait up to `grace`, then SIGKILL.
    fn stop(&mut self, grace: Duration) {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        for (what, c) in self.procs.iter_mut().rev() {
            let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGTERM);
            let deadline = Instant::now() + grace;
            loop {
                match c.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() >= deadline => {
                        eprintln!("dev up: {what} did not stop in time; killing it");
                        let _ = c.kill();
                        let _ = c.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        }
        self.procs.clear();
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

/// Start a child and return its first line of stdout without `prefix`.
fn start_announcing(
    children: &mut Children,
    what: &str,
    cmd: &mut Command,
    prefix: &str,
) -> Result<String, DevUpError> {
    let child = children.spawn(what, cmd.stdout(Stdio::piped()))?;
    let mut line = String::new();
    if let Some(stdout) = child.stdout.take() {
        BufReader::new(stdout)
            .read_line(&mut line)
            .map_err(io(format!("reading {what}'s output")))?;
    }
    line.strip_prefix(prefix)
        .map(|l| l.trim().to_string())
        .ok_or_else(|| DevUpError::DidNotStart(what.to_string(), line.clone()))
}

/// The port of every local cluster's ingress: 80 as root (what an external client
/// expects of a name the DNS answers for), else 8080.
fn ingress_port() -> u16 {
    if nix::unistd::geteuid().is_root() {
        80
    } else {
        8080
    }
}

/// Start a cluster's dataplane in cluster mode, its gateway on `127.(20+i).0.1:15443`, its
/// ingress on `127.(20+i).0.1:80` (8080 when not root); returns the gateway, admin and
/// ingress addresses.
fn start_dataplane(
    children: &mut Children,
    bin: &Path,
    state: &Path,
    name: &str,
    index: u8,
    kubeconfig: &Path,
) -> Result<(String, String, String), DevUpError> {
    let mut cmd = Command::new(bin);
    cmd.arg("proxy")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--control")
        .arg(state.join("components").join("dataplane.kubeconfig"))
        .arg("--tunnel-dir")
        .arg(state.join("tunnel"))
        .args([
            "--cluster",
            name,
            "--workers",
            "1",
            "--gateway",
            &format!("127.{}.0.1:15443", 20 + index),
            "--admin",
            &format!("127.{}.0.1:15000", 20 + index),
            "--ingress",
            &format!("127.{}.0.1:{}", 20 + index, ingress_port()),
        ]);
    // "proxy: cluster NAME gateway ADDR admin ADDR ingress ADDR"
    let line = start_announcing(
        children,
        &format!("cluster {name} dataplane"),
        &mut cmd,
        "proxy: cluster ",
    )?;
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        [_, "gateway", gw, "admin", admin, "ingress", ing] => {
            Ok((gw.to_string(), admin.to_string(), ing.to_string()))
        }
        _ => Err(DevUpError::DidNotStart(
            format!("cluster {name} dataplane"),
            line,
        )),
    }
}

/// Wait until `http://addr/readyz` answers 200.
async fn wait_ready(what: &str, addr: &str, within: Duration) -> Result<(), DevUpError> {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(mut s) = tokio::net::TcpStream::connect(addr).await {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let req = format!("GET /readyz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
            let mut out = String::new();
            if s.write_all(req.as_bytes()).await.is_ok()
                && s.read_to_string(&mut out).await.is_ok()
                && out.starts_with("HTTP/1.1 200")
            {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            return Err(DevUpError::NotReady(what.to_string(), within));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Issue an identity of the control plane whose data directory is `control_dir`
/// (`sluice kubeconfig --data-dir <control_dir> <args>`) into `path`, readable by its
/// owner only.
fn issue_identity(
    bin: &Path,
    control_dir: &Path,
    args: &[&str],
    path: &Path,
) -> Result<(), DevUpError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let what = format!("issuing an identity ({})", args.join(" "));
    let out = Command::new(bin)
        .args(["kubeconfig", "--data-dir"])
        .arg(control_dir)
        .args(args)
        .output()
        .map_err(io(what.clone()))?;
    if !out.status.success() {
        return Err(DevUpError::Io(
            what,
            std::io::Error::other(String::from_utf8_lossy(&out.stderr).into_owned()),
        ));
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(&out.stdout))
        .map_err(io(what))
}

/// Start `sluice control ...` and return the URL from its first line.
fn start_api(
    children: &mut Children,
    what: &str,
    bin: &Path,
    args: &[String],
) -> Result<String, DevUpError> {
    let line = start_announcing(
        children,
        what,
        Command::new(bin).arg("control").args(args),
        "serving ",
    )?;
    line.split_whitespace()
        .next()
        .map(str::to_string)
        .ok_or_else(|| DevUpError::DidNotStart(what.to_string(), line.clone()))
}

/// The first nameserver of /etc/resolv.conf: where a local cluster's DNS forwards names
/// outside its zones.
fn system_resolver() -> Option<String> {
    let conf = std::fs::read_to_string("/etc/resolv.conf").ok()?;
    conf.lines().find_map(|l| {
        let ip: std::net::IpAddr = l.strip_prefix("nameserver")?.trim().parse().ok()?;
        Some(std::net::SocketAddr::new(ip, 53).to_string())
    })
}

/// Start a cluster's DNS server on `127.(20+i).0.1:53` (an ephemeral port when not
/// root); its address.
fn start_dns(
    children: &mut Children,
    bin: &Path,
    name: &str,
    index: u8,
    kubeconfig: &Path,
    control: &Path,
) -> Result<String, DevUpError> {
    let port = if nix::unistd::geteuid().is_root() {
        53
    } else {
        0
    };
    let mut cmd = Command::new(bin);
    cmd.arg("dns")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--control")
        .arg(control)
        .args([
            "--cluster-id",
            name,
            "--listen",
            &format!("127.{}.0.1:{port}", 20 + index),
            "--admin",
            &format!("127.{}.0.1:9153", 20 + index),
        ]);
    if let Some(up) = system_resolver() {
        cmd.args(["--forward", &up]);
    }
    let line = start_announcing(
        children,
        &format!("cluster {name} DNS"),
        &mut cmd,
        "dns: listening on ",
    )?;
    line.split_whitespace()
        .next()
        .map(str::to_string)
        .ok_or_else(|| DevUpError::DidNotStart(format!("cluster {name} DNS"), line.clone()))
}

/// Start cluster `name`'s API server (single-cluster mode, on `127.(20+i).0.1`; with an
/// audit log `<state>/clusters/<name>/audit.log` when bare); its URL and the kubeconfig
/// written for it (`<state>/clusters/<name>.kubeconfig`).
fn start_cluster(
    children: &mut Children,
    cfg: &DevUpConfig,
    name: &str,
    index: u8,
) -> Result<(String, PathBuf), DevUpError> {
    let clusters_dir = cfg.state.join("clusters");
    let dir = clusters_dir.join(name);
    let mut args = vec![
        "--single-cluster".into(),
        "--service-cidr".into(),
        format!("127.{}.0.0/16", 40 + index),
        "--data-dir".into(),
        dir.join("api").display().to_string(),
        "--listen".into(),
        format!("127.{}.0.1:0", 20 + index),
        "--pod-logs-dir".into(),
        dir.join("logs").display().to_string(),
        "--node-streaming".into(),
        dir.join("node.sock").display().to_string(),
    ];
    // A bare cluster gets the charts' parts: who asked for what, and what was refused,
    // shows a chart's missing permission.
    if cfg.bare {
        args.push("--audit-log".into());
        args.push(dir.join("audit.log").display().to_string());
    }
    let api = start_api(
        children,
        &format!("cluster {name} API server"),
        &cfg.sluice_bin,
        &args,
    )?;
    let kubeconfig = clusters_dir.join(format!("{name}.kubeconfig"));
    std::fs::copy(dir.join("api").join("admin.kubeconfig"), &kubeconfig)
        .map_err(io(format!("copying cluster {name}'s kubeconfig")))?;
    Ok((api, kubeconfig))
}

/// Start cluster `name`'s node agent; its Pods are told `dns` is their DNS server.
fn start_node_agent(
    children: &mut Children,
    cfg: &DevUpConfig,
    name: &str,
    index: u8,
    kubeconfig: &Path,
    dns: &str,
) -> Result<(), DevUpError> {
    let logs = cfg.state.join("clusters").join(name).join("logs");
    children.spawn(
        &format!("cluster {name} node agent"),
        Command::new(&cfg.sluice_bin)
            .arg("node")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args([
                "--cluster",
                name,
                "--index",
                &index.to_string(),
                "--admin",
                &format!("127.{}.0.1:10250", 20 + index),
            ])
            .arg("--logs-dir")
            .arg(&logs)
            .arg("--streaming-socket")
            .arg(cfg.state.join("clusters").join(name).join("node.sock"))
            .arg("--shared-storage")
            .arg(cfg.state.join("shared-storage"))
            .args(cfg.builtin_images_only.then_some("--builtin-images-only"))
            .args(["--dns", dns])
            .stdout(Stdio::null()),
    )?;
    Ok(())
}

/// Wait until each cluster's node agent has registered its Node.
async fn wait_for_nodes(clusters: &[(String, PathBuf)]) -> Result<(), DevUpError> {
    for (name, kubeconfig) in clusters {
        let c = client(kubeconfig).await?;
        let nodes: Api<Node> = Api::all(c);
        let deadline = Instant::now() + Duration::from_secs(30);
        while nodes
            .list(&Default::default())
            .await
            .map(|l| l.items.is_empty())
            .unwrap_or(true)
        {
            if Instant::now() > deadline {
                return Err(DevUpError::NodeNotRegistered(name.clone()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Ok(())
}

/// Where a bare cluster's parts will answer once the charts install them: the node's
/// address, with the ports a full `dev up` uses.
fn planned_addresses(index: u8) -> (String, String, String) {
    let node = format!("127.{}.0.1", 20 + index);
    let dns_port = if nix::unistd::geteuid().is_root() {
        53
    } else {
        5353
    };
    (
        format!("{node}:{dns_port}"),
        format!("{node}:15443"),
        format!("{node}:{}", ingress_port()),
    )
}

/// `dev up --bare`: the clusters only.
async fn up_bare(cfg: &DevUpConfig, mut children: Children) -> Result<DevUp, DevUpError> {
    let started = Instant::now();
    let mut clusters = Vec::new();
    let mut summary = Vec::new();
    for (i, name) in cfg.clusters.iter().enumerate() {
        let index = i as u8;
        let (api, kubeconfig) = start_cluster(&mut children, cfg, name, index)?;
        let (dns, gateway, ingress) = planned_addresses(index);
        start_node_agent(&mut children, cfg, name, index, &kubeconfig, &dns)?;
        let addr = api.trim_start_matches("https://").to_string();
        write_descriptor(
            &cfg.state,
            name,
            index,
            &Addresses {
                api: &addr,
                dns: &dns,
                gateway: &gateway,
                ingress: &ingress,
            },
        )?;
        summary.push(format!(
            "  {name:<8} API {api}  kubeconfig {}  (DNS to come on {dns}, gateway on {gateway})",
            kubeconfig.display()
        ));
        clusters.push((name.clone(), kubeconfig));
    }
    wait_for_nodes(&clusters).await?;
    eprintln!(
        "sluice dev up --bare: {} cluster(s) up in {:.1} s, API servers and node agents only\n{}\n\nInstall the parts with the charts in charts/ (docs/install.md).",
        clusters.len(),
        started.elapsed().as_secs_f64(),
        summary.join("\n"),
    );
    println!("ready");
    Ok(DevUp { children })
}

async fn client(kubeconfig: &Path) -> Result<kube::Client, DevUpError> {
    Ok(sluice_kube::client::from_kubeconfig(kubeconfig).await?)
}

/// Start everything; return once all parts are up (after printing `ready`). The returned
/// guard stops everything when dropped or when [`DevUp::stop`] is called.
pub async fn up(cfg: &DevUpConfig) -> Result<DevUp, DevUpError> {
    let started = Instant::now();
    let _ = rustls::crypto::ring::default_provider().install_default();
    if cfg.clusters.is_empty() || cfg.clusters.len() > 20 {
        return Err(DevUpError::ClusterCount);
    }
    for name in &cfg.clusters {
        if !sluice_api::logical_cluster::is_dns_label(name) {
            return Err(DevUpError::ClusterName(name.clone()));
        }
    }
    let clusters_dir = cfg.state.join("clusters");
    std::fs::create_dir_all(&clusters_dir).map_err(io(clusters_dir.display()))?;
    let logs_dir = cfg.state.join("logs");
    std::fs::create_dir_all(&logs_dir).map_err(io(logs_dir.display()))?;
    let mut children = Children {
        procs: Vec::new(),
        logs: Logs {
            dir: logs_dir.clone(),
            verbose: cfg.verbose,
        },
    };
    if cfg.bare {
        return up_bare(cfg, children).await;
    }
    let bin = &cfg.sluice_bin;
    let control_dir = cfg.state.join("control");
    let control_url = start_api(
        &mut children,
        "control plane",
        bin,
        &[
            "--data-dir".into(),
            control_dir.display().to_string(),
            "--listen".into(),
            "127.0.0.1:0".into(),
        ],
    )?;
    std::fs::copy(
        control_dir.join("admin.kubeconfig"),
        cfg.state.join("control.kubeconfig"),
    )
    .map_err(io("copying the control plane's kubeconfig"))?;
    // The dataplanes, DNS servers and the MCS controller read the control plane each
    // with an identity of its own, allowed only what that part calls.
    let components = cfg.state.join("components");
    std::fs::create_dir_all(&components).map_err(io("creating the components' directory"))?;
    for part in ["dataplane", "dns", "mcs"] {
        issue_identity(
            bin,
            &control_dir,
            &["--component", part],
            &components.join(format!("{part}.kubeconfig")),
        )?;
    }
    // Tunnel certificates: a clusterset CA and one SPIFFE certificate per cluster.
    let certs = Command::new(bin)
        .args(["tunnel", "certs", "--clusterset", "sluice", "--clusters"])
        .arg(cfg.clusters.join(","))
        .arg("--out")
        .arg(cfg.state.join("tunnel"))
        .stdout(Stdio::null())
        .status()
        .map_err(|e| DevUpError::Spawn("sluice tunnel certs".into(), e))?;
    if !certs.success() {
        return Err(DevUpError::Certs);
    }
    let mut apis = Vec::new();
    let mut admins = Vec::new();
    let mut summary = Vec::new();
    for (i, name) in cfg.clusters.iter().enumerate() {
        let index = i as u8;
        let (api, kubeconfig) = start_cluster(&mut children, cfg, name, index)?;
        let dns = start_dns(
            &mut children,
            bin,
            name,
            index,
            &kubeconfig,
            &components.join("dns.kubeconfig"),
        )?;
        start_node_agent(&mut children, cfg, name, index, &kubeconfig, &dns)?;
        let (gateway, admin, ingress) =
            start_dataplane(&mut children, bin, &cfg.state, name, index, &kubeconfig)?;
        let addr = api.trim_start_matches("https://").to_string();
        write_descriptor(
            &cfg.state,
            name,
            index,
            &Addresses {
                api: &addr,
                dns: &dns,
                gateway: &gateway,
                ingress: &ingress,
            },
        )?;
        summary.push(format!(
            "  {name:<8} API {api}  DNS {dns}  gateway {gateway}  ingress {ingress}  kubeconfig {}",
            kubeconfig.display()
        ));
        let metrics = format!("http://{admin}/metrics");
        admins.push((format!("cluster {name} dataplane"), admin));
        apis.push((
            name.clone(),
            index,
            api,
            kubeconfig,
            gateway,
            ingress,
            metrics,
        ));
    }
    // Register the clusters with the control plane.
    let control = client(&cfg.state.join("control.kubeconfig")).await?;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("sluice.dev", "v1alpha1", "Cluster"),
        "clusters",
    );
    let clusters: Api<DynamicObject> = Api::all_with(control, &ar);
    for (name, index, api, _, gateway, ingress, metrics) in &apis {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "Cluster",
            "metadata": {"name": name, "labels": {"sluice.dev/local": "true", "sluice.dev/index": index.to_string()}},
            "spec": {"api": api, "clusterId": name, "gateways": [gateway], "ingresses": [ingress],
                     "metrics": [metrics]},
        }))?;
        match clusters.create(&PostParams::default(), &obj).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    // The MCS controller, once the clusters are registered.
    let mcs = start_announcing(
        &mut children,
        "MCS controller",
        Command::new(bin)
            .arg("mcs")
            .arg("--control")
            .arg(components.join("mcs.kubeconfig"))
            .arg("--kubeconfigs")
            .arg(cfg.state.join("clusters"))
            .args(["--admin", "127.0.0.1:0"]),
        "mcs: running admin ",
    )?;
    admins.push(("MCS controller".into(), mcs));
    // A syncer per cluster: what is placed on it, from the logical clusters, with an
    // identity of its own that reads nothing else.
    let syncers_dir = cfg.state.join("syncers");
    std::fs::create_dir_all(&syncers_dir).map_err(io("creating the syncers' directory"))?;
    for (name, index, _, kubeconfig, _, _, _) in &apis {
        let what = format!("cluster {name} syncer");
        let identity = syncers_dir.join(format!("{name}.kubeconfig"));
        issue_identity(bin, &control_dir, &["--syncer", name], &identity)?;
        let line = start_announcing(
            &mut children,
            &what,
            Command::new(bin)
                .arg("syncer")
                .arg("--control")
                .arg(&identity)
                .args(["--cluster", name])
                .arg("--downstream")
                .arg(kubeconfig)
                .args(["--admin", &format!("127.{}.0.1:0", 20 + index)])
                .args(["--logs", &format!("127.{}.0.1:0", 20 + index)]),
            &format!("syncer: cluster {name} admin "),
        )?;
        admins.push((what, line));
    }
    for (what, admin) in &admins {
        wait_ready(what, admin, Duration::from_secs(30)).await?;
    }
    // Ready once every node agent has registered its Node.
    let nodes: Vec<(String, PathBuf)> = apis
        .iter()
        .map(|(name, _, _, kubeconfig, _, _, _)| (name.clone(), kubeconfig.clone()))
        .collect();
    wait_for_nodes(&nodes).await?;
    let control_kubeconfig = cfg.state.join("control.kubeconfig");
    // The console, with the admin's identity: its URL carries its access token.
    let console = start_announcing(
        &mut children,
        "console",
        Command::new(bin)
            .arg("console")
            .arg("--kubeconfig")
            .arg(&control_kubeconfig)
            .args(["--listen", "127.0.0.1:0"]),
        "console: ",
    )?;
    std::fs::write(cfg.state.join("console.url"), format!("{console}\n"))
        .map_err(io("writing console.url"))?;
    eprintln!(
        "sluice dev up: {} cluster(s) up in {:.1} s\n  control  API {control_url}  kubeconfig {}\n{}\n  console  {console}\n  logs     {}/ (--verbose streams them here)\n\nTry:\n  export KUBECONFIG={}\n  kubectl create namespace shop && kubectl label namespace shop sluice.dev/cluster={}\n  kubectl -n shop create deployment web --image=sluice/echo --replicas=2\n  kubectl -n shop rollout status deployment web && kubectl -n shop get pods -o wide",
        apis.len(),
        started.elapsed().as_secs_f64(),
        control_kubeconfig.display(),
        summary.join("\n"),
        logs_dir.display(),
        control_kubeconfig.display(),
        cfg.clusters[0],
    );
    println!("ready");
    Ok(DevUp { children })
}

/// A running clusterset.
pub struct DevUp {
    children: Children,
}

impl DevUp {
    pub fn stop(mut self) {
        self.children.stop(Duration::from_secs(20));
    }
}
