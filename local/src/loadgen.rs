//! `sluice/loadgen` (`sluice loadgen`): constant-rate HTTP/1.1, HTTP/2 (h2c), gRPC or TCP
//! load against fixed targets or the ready endpoints of a Service's EndpointSlices (followed
//! live), counting every failed request with its reason; a live line per second and a JSON
//! report with the latency histogram's percentiles.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use http::{Request, header};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::echo::{GRPC_METHOD, grpc_frame};
use crate::resolve::Resolver;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    H2,
    Grpc,
    Tcp,
}

impl std::str::FromStr for Protocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "http1" | "http" => Ok(Protocol::Http1),
            "h2" | "h2c" | "http2" => Ok(Protocol::H2),
            "grpc" => Ok(Protocol::Grpc),
            "tcp" => Ok(Protocol::Tcp),
            other => Err(format!(
                "unknown protocol {other:?}: use http1, h2, grpc or tcp"
            )),
        }
    }
}

/// Where requests go.
pub enum Targets {
    Fixed(Vec<SocketAddr>),
    /// Ready endpoints of a Service, on `port`, followed through its EndpointSlices.
    Service {
        client: kube::Client,
        namespace: String,
        name: String,
        port: u16,
    },
    /// Names (`name`, `port`), resolved as a Pod resolves them and again every few seconds
    /// (the answers' TTL), so a client follows what the DNS says.
    Names {
        names: Vec<(String, u16)>,
        resolver: Resolver,
    },
}

/// How often [`Targets::Names`] are resolved again (the clusterset DNS's TTL).
const RESOLVE_EVERY: Duration = Duration::from_secs(5);

async fn follow_names(names: Vec<(String, u16)>, resolver: Resolver, out: Endpoints) {
    loop {
        let mut found = Vec::new();
        for (name, port) in &names {
            match resolver.lookup(name).await {
                Ok(ips) => found.extend(ips.into_iter().map(|ip| SocketAddr::new(ip, *port))),
                Err(e) => tracing::warn!(error = %e, "resolving a target"),
            }
        }
        // A failed lookup keeps what the last one found.
        if !found.is_empty() {
            found.sort();
            *out.write().unwrap_or_else(|p| p.into_inner()) = found;
        }
        tokio::time::sleep(RESOLVE_EVERY).await;
    }
}

pub struct LoadgenConfig {
    pub targets: Targets,
    pub protocol: Protocol,
    pub rate: u32,
    pub duration: Duration,
    pub path: String,
    /// The Host / `:authority` requests carry; `None`: the target's address.
    pub host: Option<String>,
    pub timeout: Duration,
    /// Print a line per second to stderr.
    pub live: bool,
    /// Every request's outcome, as it comes (for a caller that shows or plots them).
    pub observe: Option<mpsc::UnboundedSender<Sample>>,
    /// Stop early when this turns true.
    pub stop: Option<tokio::sync::watch::Receiver<bool>>,
}

/// One request's outcome: its latency and, when it succeeded, the cluster that answered
/// (from the echo server's body), or why it failed.
#[derive(Clone, Debug)]
pub struct Sample {
    pub protocol: Protocol,
    pub latency: Duration,
    pub outcome: Result<Option<String>, String>,
}

/// The `cluster` an echo answer names (HTTP JSON body, or the JSON inside a gRPC reply).
fn answered_by(body: &[u8]) -> Option<String> {
    const KEY: &[u8] = b"\"cluster\":\"";
    let at = body.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let rest = &body[at..];
    let end = rest.iter().position(|b| *b == b'"')?;
    String::from_utf8(rest[..end].to_vec()).ok()
}

/// What happened, for the report.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Report {
    pub protocol: String,
    pub rate: u32,
    pub seconds: f64,
    pub sent: u64,
    pub ok: u64,
    pub failed: u64,
    pub failures: BTreeMap<String, u64>,
    pub latency_ms: BTreeMap<String, f64>,
}

type Endpoints = Arc<RwLock<Vec<SocketAddr>>>;

async fn follow_service(
    client: kube::Client,
    namespace: String,
    name: String,
    port: u16,
    out: Endpoints,
) {
    let api: Api<EndpointSlice> = Api::namespaced(client, &namespace);
    let cfg = watcher::Config::default().labels(&format!("kubernetes.io/service-name={name}"));
    let (reader, writer) = reflector::store::<EndpointSlice>();
    let mut stream = Box::pin(
        reflector::reflector(writer, watcher(api, cfg))
            .default_backoff()
            .touched_objects(),
    );
    while stream.next().await.is_some() {
        let mut ready = Vec::new();
        for slice in reader.state() {
            for e in slice.endpoints.iter().flatten() {
                let ok = e
                    .conditions
                    .as_ref()
                    .is_some_and(|c| c.ready == Some(true) && c.terminating != Some(true));
                if ok {
                    ready.extend(
                        e.addresses
                            .iter()
                            .filter_map(|a| a.parse().ok())
                            .map(|ip| SocketAddr::new(ip, port)),
                    );
                }
            }
        }
        ready.sort();
        *out.write().unwrap_or_else(|p| p.into_inner()) = ready;
    }
}

/// Wait up to 10 s for a follower's first endpoints.
async fn first_endpoints(endpoints: &Endpoints) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while endpoints
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .is_empty()
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Reusable connections per target.
#[derive(Default)]
struct Pools {
    h1: Mutex<HashMap<SocketAddr, Vec<http1::SendRequest<Full<Bytes>>>>>,
    h2: Mutex<HashMap<SocketAddr, http2::SendRequest<Full<Bytes>>>>,
}

async fn connect(addr: SocketAddr) -> Result<tokio::net::TcpStream, String> {
    let s = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {}", e.kind()))?;
    let _ = s.set_nodelay(true);
    Ok(s)
}

async fn h1_sender(
    pools: &Pools,
    addr: SocketAddr,
) -> Result<http1::SendRequest<Full<Bytes>>, String> {
    loop {
        let idle = pools
            .h1
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(&addr)
            .and_then(Vec::pop);
        match idle {
            Some(mut s) if !s.is_closed() => {
                if s.ready().await.is_ok() {
                    return Ok(s);
                }
            }
            Some(_) => continue,
            None => break,
        }
    }
    let (s, conn) = http1::handshake(TokioIo::new(connect(addr).await?))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(conn);
    Ok(s)
}

async fn h2_sender(
    pools: &Pools,
    addr: SocketAddr,
) -> Result<http2::SendRequest<Full<Bytes>>, String> {
    let existing = pools
        .h2
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&addr)
        .cloned();
    if let Some(s) = existing.filter(|s| !s.is_closed()) {
        return Ok(s);
    }
    let (s, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(connect(addr).await?))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(conn);
    pools
        .h2
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(addr, s.clone());
    Ok(s)
}

async fn one(
    protocol: Protocol,
    pools: &Pools,
    addr: SocketAddr,
    path: &str,
    host: Option<&str>,
) -> Result<Option<String>, String> {
    let authority = host.map_or_else(|| addr.to_string(), str::to_string);
    match protocol {
        Protocol::Tcp => {
            let mut s = connect(addr).await?;
            s.write_all(b"ping\n")
                .await
                .map_err(|e| format!("write: {}", e.kind()))?;
            let mut buf = [0u8; 5];
            s.read_exact(&mut buf)
                .await
                .map_err(|e| format!("read: {}", e.kind()))?;
            if &buf != b"ping\n" {
                return Err("tcp: wrong echo".into());
            }
            Ok(None)
        }
        Protocol::Http1 => {
            let mut s = h1_sender(pools, addr).await?;
            let req = Request::get(path)
                .header(header::HOST, authority)
                .body(Full::new(Bytes::new()))
                .map_err(|e| e.to_string())?;
            let resp = s.send_request(req).await.map_err(|e| {
                format!(
                    "http: {}",
                    if e.is_canceled() {
                        "canceled".to_string()
                    } else {
                        e.to_string()
                    }
                )
            })?;
            let why = failed_status(&resp);
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| format!("body: {e}"))?
                .to_bytes();
            if !s.is_closed() {
                pools
                    .h1
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(addr)
                    .or_default()
                    .push(s);
            }
            if let Some(why) = why {
                return Err(why);
            }
            Ok(answered_by(&body))
        }
        Protocol::H2 | Protocol::Grpc => {
            let mut s = h2_sender(pools, addr).await?;
            let req = if protocol == Protocol::Grpc {
                Request::post(format!("http://{authority}{GRPC_METHOD}"))
                    .header(header::CONTENT_TYPE, "application/grpc")
                    .header(header::TE, "trailers")
                    .body(Full::new(grpc_frame(&[])))
            } else {
                Request::get(format!("http://{authority}{path}")).body(Full::new(Bytes::new()))
            }
            .map_err(|e| e.to_string())?;
            let resp = s.send_request(req).await.map_err(|e| format!("h2: {e}"))?;
            let why = failed_status(&resp);
            let header_status = resp.headers().get("grpc-status").cloned();
            let collected = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| format!("body: {e}"))?;
            if let Some(why) = why {
                return Err(why);
            }
            if protocol == Protocol::Grpc {
                let code = collected
                    .trailers()
                    .and_then(|t| t.get("grpc-status").cloned())
                    .or(header_status);
                match code.as_ref().and_then(|c| c.to_str().ok()) {
                    Some("0") => {}
                    Some(c) => return Err(format!("grpc-status {c}")),
                    None => return Err("grpc: no status".into()),
                }
            }
            Ok(answered_by(&collected.to_bytes()))
        }
    }
}

/// The failure a response not 2xx counts as: its status, and the reason a Sluice proxy
/// gave in `x-sluice-error` when it made the response itself ("status 502 reset"), so a
/// failed run says which hop failed and why.
fn failed_status<B>(resp: &http::Response<B>) -> Option<String> {
    let status = resp.status();
    if status.is_success() {
        return None;
    }
    Some(
        match resp
            .headers()
            .get("x-sluice-error")
            .and_then(|v| v.to_str().ok())
        {
            Some(reason) => format!("status {} {reason}", status.as_u16()),
            None => format!("status {}", status.as_u16()),
        },
    )
}

/// The `p` quantile (0..=1) of `sorted` microseconds, in milliseconds.
pub fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1000.0
}

/// Run the load; return the report.
pub async fn run(cfg: LoadgenConfig) -> Report {
    let endpoints: Endpoints = Arc::new(RwLock::new(Vec::new()));
    let follower = match cfg.targets {
        Targets::Fixed(t) => {
            *endpoints.write().unwrap_or_else(|p| p.into_inner()) = t;
            None
        }
        Targets::Service {
            client,
            namespace,
            name,
            port,
        } => {
            let f = tokio::spawn(follow_service(
                client,
                namespace,
                name,
                port,
                endpoints.clone(),
            ));
            first_endpoints(&endpoints).await;
            Some(f)
        }
        Targets::Names { names, resolver } => {
            let f = tokio::spawn(follow_names(names, resolver, endpoints.clone()));
            first_endpoints(&endpoints).await;
            Some(f)
        }
    };
    let pools = Arc::new(Pools::default());
    let (tx, mut rx) = mpsc::unbounded_channel::<Result<Duration, String>>();
    let mut stop = cfg.stop.clone();
    let start = Instant::now();
    let interval = Duration::from_secs_f64(1.0 / f64::from(cfg.rate.max(1)));
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut report = Report {
        protocol: format!("{:?}", cfg.protocol),
        rate: cfg.rate,
        ..Default::default()
    };
    let mut latencies: Vec<u64> = Vec::new();
    let mut n = 0usize;
    let mut second = Instant::now();
    let (mut sec_ok, mut sec_failed) = (0u64, 0u64);
    let tally = |r: Result<Duration, String>,
                 report: &mut Report,
                 latencies: &mut Vec<u64>,
                 sec_ok: &mut u64,
                 sec_failed: &mut u64| match r {
        Ok(d) => {
            report.ok += 1;
            *sec_ok += 1;
            latencies.push(d.as_micros() as u64);
        }
        Err(reason) => {
            report.failed += 1;
            *sec_failed += 1;
            *report.failures.entry(reason).or_default() += 1;
        }
    };
    while start.elapsed() < cfg.duration && !stop.as_ref().is_some_and(|s| *s.borrow()) {
        tokio::select! {
            _ = async { stop.as_mut()?.changed().await.ok() }, if stop.is_some() => {}
            _ = ticker.tick() => {
                report.sent += 1;
                let targets = endpoints.read().unwrap_or_else(|p| p.into_inner()).clone();
                let tx = tx.clone();
                if targets.is_empty() {
                    let reason = "no ready endpoints".to_string();
                    if let Some(o) = &cfg.observe {
                        let _ = o.send(Sample { protocol: cfg.protocol, latency: Duration::ZERO, outcome: Err(reason.clone()) });
                    }
                    let _ = tx.send(Err(reason));
                    continue;
                }
                let addr = targets[n % targets.len()];
                n += 1;
                let (pools, path, host, protocol, timeout) = (pools.clone(), cfg.path.clone(), cfg.host.clone(), cfg.protocol, cfg.timeout);
                let observe = cfg.observe.clone();
                tokio::spawn(async move {
                    let t = Instant::now();
                    let r = match tokio::time::timeout(timeout, one(protocol, &pools, addr, &path, host.as_deref())).await {
                        Ok(r) => r,
                        Err(_) => Err("timeout".into()),
                    };
                    let latency = t.elapsed();
                    if let Some(o) = observe {
                        let _ = o.send(Sample { protocol, latency, outcome: r.clone() });
                    }
                    let _ = tx.send(r.map(|_| latency));
                });
            }
            Some(r) = rx.recv() => tally(r, &mut report, &mut latencies, &mut sec_ok, &mut sec_failed),
        }
        if cfg.live && second.elapsed() >= Duration::from_secs(1) {
            eprintln!(
                "loadgen t={:>4.0}s sent={} ok/s={} failed/s={} failed total={}",
                start.elapsed().as_secs_f64(),
                report.sent,
                sec_ok,
                sec_failed,
                report.failed
            );
            second = Instant::now();
            sec_ok = 0;
            sec_failed = 0;
        }
    }
    drop(tx);
    let drain = tokio::time::timeout(cfg.timeout + Duration::from_secs(1), async {
        while let Some(r) = rx.recv().await {
            tally(r, &mut report, &mut latencies, &mut sec_ok, &mut sec_failed);
        }
    });
    let _ = drain.await;
    let unanswered = report.sent - report.ok - report.failed;
    if unanswered > 0 {
        report.failed += unanswered;
        *report.failures.entry("no answer".into()).or_default() += unanswered;
    }
    if let Some(f) = follower {
        f.abort();
    }
    latencies.sort_unstable();
    report.seconds = start.elapsed().as_secs_f64();
    for (name, p) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0)] {
        report
            .latency_ms
            .insert(name.into(), percentile(&latencies, p));
    }
    report
}

impl Report {
    pub fn to_json(&self) -> serde_json::Value {
        json!(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::echo::{EchoConfig, build};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_protocol_against_echo() {
        let echo = build(EchoConfig::on([127, 0, 0, 1].into(), "c", "p", "n"))
            .await
            .unwrap();
        for protocol in [Protocol::Http1, Protocol::H2, Protocol::Grpc, Protocol::Tcp] {
            let target = if protocol == Protocol::Tcp {
                echo.tcp
            } else {
                echo.http
            };
            let (observe, mut samples) = mpsc::unbounded_channel();
            let report = run(LoadgenConfig {
                targets: Targets::Fixed(vec![target]),
                protocol,
                rate: 200,
                duration: Duration::from_millis(500),
                path: "/".into(),
                host: None,
                timeout: Duration::from_secs(2),
                live: false,
                observe: Some(observe),
                stop: None,
            })
            .await;
            assert!(report.ok >= 80, "{protocol:?}: {report:?}");
            assert_eq!(report.failed, 0, "{protocol:?}: {report:?}");
            // Every request is observed, with the cluster that answered (TCP: none).
            let mut n = 0;
            while let Ok(s) = samples.try_recv() {
                let want = (protocol != Protocol::Tcp).then(|| "c".to_string());
                assert_eq!(s.outcome, Ok(want), "{protocol:?}");
                n += 1;
            }
            assert_eq!(n, report.ok, "{protocol:?}");
        }
        // Nothing listening: every request fails, with its reason.
        let report = run(LoadgenConfig {
            targets: Targets::Fixed(vec!["127.0.0.1:1".parse().unwrap()]),
            protocol: Protocol::Http1,
            rate: 100,
            duration: Duration::from_millis(200),
            path: "/".into(),
            host: None,
            timeout: Duration::from_secs(1),
            live: false,
            observe: None,
            stop: None,
        })
        .await;
        assert_eq!(report.ok, 0);
        assert!(
            report.failures.keys().any(|k| k.starts_with("connect")),
            "{report:?}"
        );
        echo.shutdown().await;
    }
}
