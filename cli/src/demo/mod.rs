//! `sluice demo`: the promise in one run. Brings up a local clusterset (`east`, `west`),
//! applies a sample app to logical cluster `root:shop` as `kubectl apply` would (server-side
//! apply): namespace `shop` pinned to `east` by its label, and namespace `cart` placed on
//! `east` by a Placement. Consumers load both through `west`'s clusterset VIPs — the name
//! resolved through `west`'s clusterset DNS — over HTTP/1.1, HTTP/2 and gRPC, with chains
//! of long-lived TCP and gRPC streams; a Pod in `west` loads `shop` by its ordinary name
//! (`echo.shop`); an external client reaches `shop` by its Ingress host (the clusterset
//! DNS answers it with a cluster's ingress). Then `shop` moves to `west` by changing its
//! one label, and `east` is drained. Live progress each second; at the end a report
//! (requests, failures, p50/p99 and duration per phase; how long until all of an app's
//! traffic was on `west`) and a plot in the state directory. Succeeds only if no request
//! failed and no stream broke.

mod plot;
mod pod_consumer;
mod report;
mod traffic;

use std::io::IsTerminal;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use plotters::style::RGBColor;
use serde_json::{Value, json};
use sluice_api::sync::{ANNOTATION_DOWNSTREAM_NAMESPACE, state_label};
use sluice_api::{ClusterName, LogicalClusterPath};
use sluice_kube::Roots;
use sluice_local::devup::{DevUpConfig, up};
use sluice_local::loadgen::Protocol;
use sluice_placement::drain;

use traffic::{Consumer, Record, StreamKind, Traffic};

/// What the demo runs with.
pub struct DemoConfig {
    /// The clusterset's state directory (emptied first when it holds an earlier run).
    pub state: PathBuf,
    /// Leave the clusterset running after the report, until Ctrl-C.
    pub keep: bool,
    /// Requests per second of each consumer.
    pub rate: u32,
    /// How long each steady phase lasts.
    pub steady: Duration,
}

const WORKSPACE: &str = "shop";
/// The host external clients of `shop` use (its Ingress).
const SHOP_HOST: &str = "shop.example";
const FIELD_MANAGER: &str = "kubectl";
/// How long a move or a drain may take before the demo gives up.
const PHASE_LIMIT: Duration = Duration::from_secs(120);

/// Run the demo; true when no request failed and no stream broke.
pub async fn run(cfg: DemoConfig) -> anyhow::Result<bool> {
    fresh_state(&cfg.state)?;
    let east = ClusterName::new("east");
    let west = ClusterName::new("west");
    let step = Step::new();
    step.say("bringing up the clusterset: control plane, clusters east and west");
    let dev = up(&DevUpConfig {
        state: cfg.state.clone(),
        clusters: vec![east.to_string(), west.to_string()],
        sluice_bin: std::env::current_exe().context("locating the sluice binary")?,
        verbose: false,
        builtin_images_only: true,
        bare: false,
    })
    .await
    .context("starting the local clusterset")?;

    let config =
        sluice_kube::client::config_from_kubeconfig(&cfg.state.join("control.kubeconfig"), None)
            .await?;
    let roots = Roots::new(config, "/clusters/");
    let root = roots.at("/clusters/root")?;
    step.say("creating workspace root:shop and applying the app");
    apply(&root, &workspace()).await?;
    wait_for(
        "workspace root:shop to be Ready",
        Duration::from_secs(60),
        || {
            let root = root.clone();
            async move {
                let ws = get(&root, &workspace()).await?;
                Some(ws["status"]["phase"] == "Ready")
            }
        },
    )
    .await?;
    let path: LogicalClusterPath = format!("root:{WORKSPACE}").parse()?;
    let shop = roots.at(&format!("/clusters/{path}"))?;
    // `cart` first: on an empty clusterset its Placement picks east (fewest namespaces,
    // then by name); then `shop`, pinned to east.
    for obj in [cart_placement(), namespace("cart", json!({"app": "cart"}))] {
        apply(&shop, &obj).await?;
    }
    for obj in [namespace("shop", json!({"sluice.dev/cluster": "east"}))]
        .into_iter()
        .chain(app("shop"))
        .chain([ingress("shop", SHOP_HOST)])
        .chain(app("cart"))
    {
        apply(&shop, &obj).await?;
    }
    step.say("waiting for the app to run on east and to be imported in west");
    for ns in ["shop", "cart"] {
        wait_for(
            &format!("deployment {ns}/echo to be available"),
            Duration::from_secs(120),
            || {
                let shop = shop.clone();
                async move {
                    let d = get(&shop, &deployment(ns)).await?;
                    Some(d["status"]["availableReplicas"].as_i64() == Some(2))
                }
            },
        )
        .await?;
    }
    let west_dns = descriptor(&cfg.state, "west")?["dns"]
        .as_str()
        .and_then(|a| a.parse::<SocketAddr>().ok())
        .context("west's DNS address in its descriptor")?;
    let mut vips = Vec::new();
    for ns in ["shop", "cart"] {
        let name = format!(
            "echo.{}.svc.clusterset.local",
            downstream_of(&shop, ns).await?
        );
        let vip = wait_for(
            &format!("{name} to resolve in west"),
            Duration::from_secs(60),
            || resolve(west_dns, name.clone()),
        )
        .await?;
        wait_for(
            &format!("{ns}'s VIP {vip} to answer in west"),
            Duration::from_secs(60),
            || answers(SocketAddr::new(vip, 80)),
        )
        .await?;
        step.say(&format!("{ns}: {name} → {vip} (west's clusterset VIP)"));
        vips.push(vip);
    }
    let (shop_vip, cart_vip) = (vips[0], vips[1]);
    // The external client: shop.example as the clusterset DNS answers it (an ingress of a
    // cluster that takes clients), on the ingresses' port.
    let ingress_port = descriptor(&cfg.state, "west")?["ingress"]
        .as_str()
        .and_then(|a| a.parse::<SocketAddr>().ok())
        .context("west's ingress address in its descriptor")?
        .port();
    let ingress_ip = wait_for(
        &format!("{SHOP_HOST} to resolve"),
        Duration::from_secs(60),
        || resolve(west_dns, SHOP_HOST.to_string()),
    )
    .await?;
    let external = SocketAddr::new(ingress_ip, ingress_port);
    wait_for(
        &format!("{SHOP_HOST} to answer at {external}"),
        Duration::from_secs(60),
        || answers_as(external, SHOP_HOST),
    )
    .await?;
    step.say(&format!(
        "external client: {SHOP_HOST} → {external} (an ingress)"
    ));

    // A consumer written for one cluster: a Pod in west asking for `echo.shop`.
    for obj in pod_consumer::objects(cfg.rate) {
        apply(&shop, &obj).await?;
    }
    let pod_logs = pod_consumer::logs_dir(
        &cfg.state,
        &downstream_of(&shop, pod_consumer::NAMESPACE).await?,
    );
    let pod_log = wait_for(
        "the consumer Pod in west to start",
        Duration::from_secs(120),
        || {
            let dir = pod_logs.clone();
            async move { pod_consumer::log_file(&dir) }
        },
    )
    .await?;
    step.say("consumer Pod in west: HTTP/1.1 to echo.shop:80, its ordinary cluster.local name");

    let consumers = vec![
        consumer("shop", Protocol::Http1, shop_vip, 80),
        consumer("shop", Protocol::H2, shop_vip, 81),
        consumer("shop", Protocol::Grpc, shop_vip, 82),
        Consumer {
            host: Some(SHOP_HOST.to_string()),
            ..consumer("shop", Protocol::Http1, ingress_ip, ingress_port)
        },
        consumer("cart", Protocol::Http1, cart_vip, 80),
    ];
    step.say(&format!(
        "consumers in west: shop over HTTP/1.1, HTTP/2 and gRPC, cart over HTTP/1.1; an external client of {SHOP_HOST} through the ingress; {} requests/s each; TCP and gRPC streams to shop",
        cfg.rate
    ));
    let traffic = Traffic::start(
        consumers,
        cfg.rate,
        vec![
            (StreamKind::Tcp, SocketAddr::new(shop_vip, 9000)),
            (StreamKind::Grpc, SocketAddr::new(shop_vip, 82)),
        ],
        "steady on east",
    );
    let mut live = Live::new();
    live.run_for(&traffic, cfg.steady).await;

    // The move: one label.
    traffic.phase("move shop to west");
    live.line(
        &traffic,
        "label sluice.dev/cluster=west on namespace shop (what `kubectl label` does)",
    );
    let moved_at = traffic.started.elapsed();
    patch_labels(&shop, "shop", json!({"sluice.dev/cluster": "west"})).await?;
    let shop_ns = shop.clone();
    live.run_until(&traffic, PHASE_LIMIT, "shop to run on west only", || {
        let shop = shop_ns.clone();
        let (east, west) = (east.clone(), west.clone());
        async move {
            let ns = get(&shop, &namespace("shop", json!({}))).await?;
            Some(placed_only_on(&ns, &west, &east))
        }
    })
    .await?;
    let move_took = traffic.started.elapsed() - moved_at;
    traffic.phase("steady on west");
    live.run_for(&traffic, cfg.steady).await;

    // The drain.
    traffic.phase("drain east");
    live.line(
        &traffic,
        "cordon and drain east (what `sluice drain east` does)",
    );
    let drained_at = traffic.started.elapsed();
    drain::set(&roots, &east, true, true).await?;
    live.run_until(&traffic, PHASE_LIMIT, "east to be empty", || {
        let roots = &roots;
        let east = east.clone();
        async move { drain::left(roots, &east).await.ok().map(|l| l.is_empty()) }
    })
    .await?;
    let drain_took = traffic.started.elapsed() - drained_at;
    traffic.phase("after the drain");
    live.run_for(&traffic, cfg.steady).await;
    live.finish();
    let record = traffic.stop().await;
    // Stop the Pod consumer (SIGTERM: it reports what it sent) and read its report.
    delete(&shop, &namespace(pod_consumer::NAMESPACE, json!({}))).await?;
    let in_pod = pod_consumer::report(&pod_log, Duration::from_secs(60)).await?;

    let figures = report::phases(&record);
    let shop_on_west = report::all_on(&record, "shop", "west", moved_at);
    let cart_on_west = report::all_on(&record, "cart", "west", drained_at);
    let failed: u64 = figures.iter().map(|f| f.failed).sum();
    let ok = failed == 0 && in_pod.failed == 0 && record.broken_streams() == 0;
    println!("\n{}", report::table(&figures, &record));
    println!(
        "consumer Pod in west (echo.shop:80 by its cluster.local name, whole run): {} requests, {} failed",
        in_pod.ok + in_pod.failed,
        in_pod.failed
    );
    if in_pod.failed > 0 {
        println!("  failed: {}", in_pod.failures);
    }
    let secs = |x: Option<f64>| x.map_or("never".to_string(), |s| format!("{s:.0} s"));
    println!(
        "move of shop: {:.1} s from the label change until east left; all of shop's traffic on west after {}",
        move_took.as_secs_f64(),
        secs(shop_on_west)
    );
    println!(
        "drain of east: {:.1} s until empty; all of cart's traffic on west after {}",
        drain_took.as_secs_f64(),
        secs(cart_on_west)
    );
    let facts = json!({
        "moveSeconds": move_took.as_secs_f64(),
        "shopAllOnWestAfterSeconds": shop_on_west,
        "drainSeconds": drain_took.as_secs_f64(),
        "cartAllOnWestAfterSeconds": cart_on_west,
        "podConsumer": {"ok": in_pod.ok, "failed": in_pod.failed, "failures": in_pod.failures},
    });
    let json_path = cfg.state.join("demo.json");
    std::fs::write(
        &json_path,
        serde_json::to_vec_pretty(&report::json(&figures, &record, facts))?,
    )
    .with_context(|| format!("writing {}", json_path.display()))?;
    let layout = plot::Layout {
        apps: &["shop", "cart"],
        clusters: &[
            ("east", RGBColor(214, 39, 40)),
            ("west", RGBColor(31, 119, 180)),
        ],
    };
    let mut outputs = vec![json_path];
    match plot::write(&cfg.state.join("demo"), &record, &layout) {
        Ok(files) => outputs.extend(files),
        Err(e) => eprintln!("demo: the plot could not be drawn: {e}"),
    }
    println!(
        "written: {}",
        outputs
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "{}",
        if ok {
            "result: 0 failed requests, 0 broken streams"
        } else {
            "result: FAILED — requests failed or streams broke (see above)"
        }
    );
    if cfg.keep {
        let console = std::fs::read_to_string(cfg.state.join("console.url")).unwrap_or_default();
        println!(
            "\nWatch the next move live in the console: {}\n(the Move buttons, or `kubectl label namespace shop sluice.dev/cluster=east --overwrite` in root:shop;\nuncordon east first: it stays cordoned after the drain)",
            console.trim()
        );
        println!(
            "\nThe clusterset keeps running (Ctrl-C stops it). Try:\n  cargo run --release -- kubeconfig --data-dir {} --workspace root:shop > shop.kubeconfig\n  kubectl --kubeconfig shop.kubeconfig get namespaces -o wide\n  kubectl --kubeconfig {}/clusters/west.kubeconfig get pods -A\n  cargo run --release -- uncordon east --kubeconfig {}",
            cfg.state.join("control").display(),
            cfg.state.display(),
            cfg.state.join("control.kubeconfig").display(),
        );
        tokio::signal::ctrl_c().await?;
    }
    dev.stop();
    Ok(ok)
}

/// Start from an empty state directory: one that holds an earlier clusterset is emptied;
/// anything else is not touched.
fn fresh_state(state: &Path) -> anyhow::Result<()> {
    let Ok(mut entries) = std::fs::read_dir(state) else {
        return Ok(());
    };
    if entries.next().is_none() {
        return Ok(());
    }
    if !state.join("control.kubeconfig").exists() && !state.join("clusters").exists() {
        bail!(
            "{} is not empty and holds no earlier clusterset: choose another --state",
            state.display()
        );
    }
    std::fs::remove_dir_all(state).with_context(|| format!("emptying {}", state.display()))
}

fn descriptor(state: &Path, cluster: &str) -> anyhow::Result<Value> {
    let path = state.join("clusters").join(format!("{cluster}.json"));
    let text = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(serde_json::from_slice(&text)?)
}

fn consumer(app: &'static str, protocol: Protocol, vip: IpAddr, port: u16) -> Consumer {
    Consumer {
        app,
        protocol,
        target: SocketAddr::new(vip, port),
        host: None,
    }
}

/// Whether a namespace runs on `on` and no longer on `off`, and says it is placed.
fn placed_only_on(ns: &Value, on: &ClusterName, off: &ClusterName) -> bool {
    let labels = &ns["metadata"]["labels"];
    let placed = ns["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Placed" && c["status"] == "True");
    labels.get(state_label(on)).is_some() && labels.get(state_label(off)).is_none() && placed
}

// --- the objects, as a user would write them ---

/// The team's workspace; the platform admin delegates it the shop's host, which its
/// Ingress then owns.
fn workspace() -> Value {
    json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "Workspace",
           "metadata": {"name": WORKSPACE},
           "spec": {"policy": {"ingressDomains": [SHOP_HOST]}}})
}

fn namespace(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
           "metadata": {"name": name, "labels": labels}})
}

fn cart_placement() -> Value {
    json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "Placement",
           "metadata": {"name": "cart"},
           "spec": {"namespaceSelector": {"matchLabels": {"app": "cart"}}, "mode": "Single"}})
}

fn deployment(ns: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "echo", "namespace": ns}})
}

/// The `sluice/echo` Deployment and its Service: HTTP/1.1 on 80, h2c on 81, gRPC on 82 (all
/// the pod's 8080), and a TCP echo on 9000.
/// An Ingress sending every request for `host` to the app's HTTP port.
fn ingress(ns: &str, host: &str) -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "echo", "namespace": ns},
        "spec": {"rules": [{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": "echo", "port": {"name": "http"}}}}]}}]}})
}

fn app(ns: &str) -> [Value; 2] {
    [
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "echo", "namespace": ns},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "echo"}},
                "template": {"metadata": {"labels": {"app": "echo"}},
                    "spec": {"containers": [{"name": "echo", "image": "sluice/echo",
                        "ports": [{"name": "http", "containerPort": 8080},
                                  {"name": "stream", "containerPort": 9000}],
                        "readinessProbe": {"httpGet": {"port": "http", "path": "/ready"},
                                           "periodSeconds": 1}}]}}}}),
        json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "echo", "namespace": ns},
            "spec": {"selector": {"app": "echo"}, "ports": [
                {"name": "http", "port": 80, "targetPort": "http"},
                {"name": "h2c", "port": 81, "targetPort": "http"},
                {"name": "grpc", "port": 82, "targetPort": "http"},
                {"name": "tcp-stream", "port": 9000, "targetPort": "stream"}]}}),
    ]
}

// --- talking to the API and the clusterset ---

/// The resource of `obj` (the kinds the demo uses).
fn resource(obj: &Value) -> anyhow::Result<(ApiResource, bool)> {
    let api_version = obj["apiVersion"].as_str().unwrap_or_default();
    let kind = obj["kind"].as_str().unwrap_or_default();
    let (plural, namespaced) = match kind {
        "Namespace" => ("namespaces", false),
        "Workspace" => ("workspaces", false),
        "Placement" => ("placements", false),
        "Deployment" => ("deployments", true),
        "Service" => ("services", true),
        "Ingress" => ("ingresses", true),
        "Job" => ("jobs", true),
        other => bail!("the demo does not apply {other}"),
    };
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    Ok((ApiResource::from_gvk_with_plural(&gvk, plural), namespaced))
}

fn api_for(client: &kube::Client, obj: &Value) -> anyhow::Result<Api<DynamicObject>> {
    let (ar, namespaced) = resource(obj)?;
    Ok(match obj["metadata"]["namespace"].as_str() {
        Some(ns) if namespaced => Api::namespaced_with(client.clone(), ns, &ar),
        _ => Api::all_with(client.clone(), &ar),
    })
}

fn name_of(obj: &Value) -> &str {
    obj["metadata"]["name"].as_str().unwrap_or_default()
}

/// Server-side apply, as `kubectl apply --server-side` does.
/// The name namespace `ns` of `client`'s logical cluster has in the physical clusters (the
/// control plane stamped it when it created the namespace).
async fn downstream_of(client: &kube::Client, ns: &str) -> anyhow::Result<String> {
    let namespace = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .get(ns)
        .await
        .with_context(|| format!("namespace {ns}"))?;
    namespace
        .metadata
        .annotations
        .and_then(|mut a| a.remove(ANNOTATION_DOWNSTREAM_NAMESPACE))
        .with_context(|| format!("namespace {ns} has no downstream name"))
}

async fn apply(client: &kube::Client, obj: &Value) -> anyhow::Result<()> {
    let api = api_for(client, obj)?;
    api.patch(
        name_of(obj),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(obj),
    )
    .await
    .with_context(|| format!("applying {} {}", obj["kind"], name_of(obj)))?;
    Ok(())
}

/// The object `obj` names, as JSON; none if it cannot be read.
async fn get(client: &kube::Client, obj: &Value) -> Option<Value> {
    let api = api_for(client, obj).ok()?;
    let o = api.get(name_of(obj)).await.ok()?;
    serde_json::to_value(o).ok()
}

async fn delete(client: &kube::Client, obj: &Value) -> anyhow::Result<()> {
    let api = api_for(client, obj)?;
    api.delete(name_of(obj), &Default::default())
        .await
        .with_context(|| format!("deleting {} {}", obj["kind"], name_of(obj)))?;
    Ok(())
}

async fn patch_labels(client: &kube::Client, ns: &str, labels: Value) -> anyhow::Result<()> {
    let api = api_for(client, &namespace(ns, json!({})))?;
    api.patch(
        ns,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": labels}})),
    )
    .await
    .with_context(|| format!("labelling namespace {ns}"))?;
    Ok(())
}

/// The first A record of `name` from the DNS server at `server`.
async fn resolve(server: SocketAddr, name: String) -> Option<IpAddr> {
    let found = sluice_local::resolve::Resolver::new(server)
        .lookup(&name)
        .await
        .ok()?;
    found.first().copied()
}

/// Whether an HTTP GET to `addr` answers 200.
async fn answers(addr: SocketAddr) -> Option<bool> {
    answers_as(addr, "demo").await
}

/// Whether `GET /` for `host` at `addr` answers 200 within 3 s.
async fn answers_as(addr: SocketAddr, host: &str) -> Option<bool> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        let request = format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        s.write_all(request.as_bytes()).await.ok()?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.ok()?;
        Some(out.starts_with(b"HTTP/1.1 200"))
    };
    tokio::time::timeout(Duration::from_secs(3), attempt)
        .await
        .ok()
        .flatten()
        .filter(|ok| *ok)
}

/// Poll `check` until it gives `Some(truthy)`: `true` for a bool, the value otherwise.
async fn wait_for<T, F, Fut>(what: &str, within: Duration, mut check: F) -> anyhow::Result<T>
where
    T: Truthy,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check().await.filter(Truthy::truthy) {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("gave up after {} s waiting for {what}", within.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A poll's answer that means "done".
trait Truthy {
    fn truthy(&self) -> bool;
}

impl Truthy for bool {
    fn truthy(&self) -> bool {
        *self
    }
}

impl Truthy for PathBuf {
    fn truthy(&self) -> bool {
        true
    }
}

impl Truthy for IpAddr {
    fn truthy(&self) -> bool {
        true
    }
}

// --- what the user sees ---

/// Setup steps, before traffic runs.
struct Step {
    started: Instant,
}

impl Step {
    fn new() -> Self {
        Self {
            started: Instant::now(),
        }
    }

    fn say(&self, what: &str) {
        println!("[{:>5.1} s] {what}", self.started.elapsed().as_secs_f64());
    }
}

/// Live progress while traffic runs: a line per second (on a terminal, a spinner with the
/// current second and a line per phase).
struct Live {
    bar: Option<ProgressBar>,
    shown: usize,
}

impl Live {
    fn new() -> Self {
        let bar = std::io::stdout().is_terminal().then(|| {
            let b = ProgressBar::new_spinner();
            b.set_style(
                ProgressStyle::with_template("{spinner} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            b.enable_steady_tick(Duration::from_millis(120));
            b
        });
        Self { bar, shown: 0 }
    }

    /// A line above the progress.
    fn line(&self, traffic: &Traffic, text: &str) {
        let line = format!("{:>5} s  > {text}", traffic.started.elapsed().as_secs());
        match &self.bar {
            Some(b) => b.println(line),
            None => println!("{line}"),
        }
    }

    /// Show every second completed since the last call.
    fn show(&mut self, traffic: &Traffic) {
        let r = traffic.record.lock().unwrap_or_else(|p| p.into_inner());
        let complete = traffic.started.elapsed().as_secs() as usize;
        while self.shown < complete.min(r.seconds.len()) {
            let line = second_line(&r, self.shown);
            match &self.bar {
                Some(b) => {
                    if r.seconds[self.shown].phase != r.seconds[self.shown.saturating_sub(1)].phase
                        || self.shown == 0
                    {
                        b.println(line.clone());
                    }
                    b.set_message(line);
                }
                None => println!("{line}"),
            }
            self.shown += 1;
        }
    }

    async fn run_for(&mut self, traffic: &Traffic, d: Duration) {
        let end = Instant::now() + d;
        while Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(250)).await;
            self.show(traffic);
        }
    }

    async fn run_until<F, Fut>(
        &mut self,
        traffic: &Traffic,
        within: Duration,
        what: &str,
        mut done: F,
    ) -> anyhow::Result<()>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<bool>>,
    {
        let deadline = Instant::now() + within;
        loop {
            if done().await == Some(true) {
                self.show(traffic);
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("gave up after {} s waiting for {what}", within.as_secs());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
            self.show(traffic);
        }
    }

    fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// One second as a line: phase, requests, failures, where each app was answered, p99.
fn second_line(r: &Record, i: usize) -> String {
    let s = &r.seconds[i];
    let share = |app: &str| {
        ["east", "west"]
            .iter()
            .filter_map(|c| Some(format!("{c} {:>3.0}%", s.share(app, c)? * 100.0)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut lat = s.latencies.clone();
    format!(
        "{i:>5} s  {:<18} {:>5} req/s  {:>3} failed  shop: {:<18} cart: {:<18} p99 {:.1} ms",
        s.phase,
        s.ok + s.failed,
        s.failed,
        share("shop"),
        share("cart"),
        traffic::quantile(&mut lat, 0.99)
    )
}
