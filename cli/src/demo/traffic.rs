//! The demo's consumers and what they saw: constant-rate HTTP/1.1, HTTP/2 and gRPC load
//! (`sluice_local::loadgen`) through the consumers' cluster's clusterset VIPs, long-lived TCP
//! and gRPC streams, and every outcome recorded by second and by phase.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_local::grpc_stream::EchoStream;
use sluice_local::loadgen::{self, LoadgenConfig, Protocol, Sample, Targets};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// One second of traffic.
#[derive(Clone, Debug, Default)]
pub struct Second {
    pub phase: String,
    pub ok: u64,
    pub failed: u64,
    /// Successful answers by app and answering cluster.
    pub answered: BTreeMap<(String, String), u64>,
    /// Latencies of successful requests, in microseconds.
    pub latencies: Vec<u64>,
}

impl Second {
    /// The share (0..=1) of `app`'s answers that came from `cluster`.
    pub fn share(&self, app: &str, cluster: &str) -> Option<f64> {
        let total: u64 = self
            .answered
            .iter()
            .filter(|((a, _), _)| a == app)
            .map(|(_, n)| n)
            .sum();
        let from = self
            .answered
            .get(&(app.to_string(), cluster.to_string()))
            .copied()
            .unwrap_or(0);
        (total > 0).then(|| from as f64 / total as f64)
    }
}

/// A phase of the demo: what it was, when, and the requests answered while it ran.
#[derive(Clone, Debug, Default)]
pub struct PhaseSpan {
    pub name: String,
    pub start: Duration,
    pub end: Option<Duration>,
    pub ok: u64,
    pub failed: u64,
    /// Latencies of successful requests, in microseconds.
    pub latencies: Vec<u64>,
}

/// Everything recorded.
#[derive(Debug, Default)]
pub struct Record {
    pub seconds: Vec<Second>,
    pub phases: Vec<PhaseSpan>,
    pub failures: BTreeMap<String, u64>,
    pub streams: BTreeMap<StreamKind, Streams>,
}

impl Record {
    /// Streams of every kind that broke.
    pub fn broken_streams(&self) -> u64 {
        self.streams.values().map(|s| s.broken).sum()
    }

    fn second(&mut self, at: Duration) -> &mut Second {
        let i = at.as_secs() as usize;
        while self.seconds.len() <= i {
            let phase = self
                .phases
                .last()
                .map(|p| p.name.clone())
                .unwrap_or_default();
            self.seconds.push(Second {
                phase,
                ..Default::default()
            });
        }
        &mut self.seconds[i]
    }
}

/// What a long-lived stream carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum StreamKind {
    /// Bytes echoed on a TCP connection.
    Tcp,
    /// Messages of a bidirectional gRPC call (`sluice/echo`'s `Stream` method).
    Grpc,
}

impl StreamKind {
    pub fn label(self) -> &'static str {
        match self {
            StreamKind::Tcp => "tcp",
            StreamKind::Grpc => "grpc",
        }
    }
}

/// A kind of long-lived streams' tally.
#[derive(Clone, Debug, Default)]
pub struct Streams {
    pub opened: u64,
    pub round_trips: u64,
    pub broken: u64,
    pub reasons: BTreeMap<String, u64>,
}

/// What one consumer sends, where.
pub struct Consumer {
    pub app: &'static str,
    pub protocol: Protocol,
    pub target: SocketAddr,
    /// The Host its requests name (an external client of an Ingress host); `None`: the
    /// target's address.
    pub host: Option<String>,
}

/// Running consumers.
pub struct Traffic {
    pub record: Arc<Mutex<Record>>,
    pub started: Instant,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

/// How long each stream lives before it closes (and the next one opens).
const STREAM_LIFE: Duration = Duration::from_secs(12);
/// A round trip on a stream every so often.
const STREAM_PING: Duration = Duration::from_millis(100);

impl Traffic {
    /// Start `consumers` at `rate` requests per second each, and a chain of streams to
    /// each of `streams`, in phase `phase`.
    pub fn start(
        consumers: Vec<Consumer>,
        rate: u32,
        streams: Vec<(StreamKind, SocketAddr)>,
        phase: &str,
    ) -> Traffic {
        let started = Instant::now();
        let record = Arc::new(Mutex::new(Record::default()));
        lock(&record).phases.push(PhaseSpan {
            name: phase.to_string(),
            ..Default::default()
        });
        let (stop, stopped) = watch::channel(false);
        let (samples, mut rx) = mpsc::unbounded_channel::<(&'static str, Sample)>();
        let mut tasks = Vec::new();
        for c in consumers {
            let (observe, mut from) = mpsc::unbounded_channel::<Sample>();
            let to = samples.clone();
            tasks.push(tokio::spawn(async move {
                while let Some(s) = from.recv().await {
                    let _ = to.send((c.app, s));
                }
            }));
            let stopped = stopped.clone();
            tasks.push(tokio::spawn(async move {
                loadgen::run(LoadgenConfig {
                    targets: Targets::Fixed(vec![c.target]),
                    protocol: c.protocol,
                    rate,
                    duration: Duration::from_secs(24 * 3600),
                    path: "/".into(),
                    host: c.host,
                    timeout: Duration::from_secs(5),
                    live: false,
                    observe: Some(observe),
                    stop: Some(stopped),
                })
                .await;
            }));
        }
        drop(samples);
        let r = record.clone();
        tasks.push(tokio::spawn(async move {
            while let Some((app, s)) = rx.recv().await {
                let mut r = lock(&r);
                let micros = s.latency.as_micros() as u64;
                if let Some(p) = r.phases.last_mut() {
                    match s.outcome {
                        Ok(_) => {
                            p.ok += 1;
                            p.latencies.push(micros);
                        }
                        Err(_) => p.failed += 1,
                    }
                }
                let sec = r.second(started.elapsed());
                match s.outcome {
                    Ok(cluster) => {
                        sec.ok += 1;
                        sec.latencies.push(micros);
                        if let Some(c) = cluster {
                            *sec.answered.entry((app.to_string(), c)).or_default() += 1;
                        }
                    }
                    Err(reason) => {
                        sec.failed += 1;
                        *r.failures
                            .entry(format!("{app} {:?}: {reason}", s.protocol))
                            .or_default() += 1;
                    }
                }
            }
        }));
        for (kind, addr) in streams {
            tasks.push(tokio::spawn(chain(
                kind,
                addr,
                record.clone(),
                stopped.clone(),
            )));
        }
        Traffic {
            record,
            started,
            stop,
            tasks,
        }
    }

    /// From now on, traffic belongs to phase `name`.
    pub fn phase(&self, name: &str) {
        let now = self.started.elapsed();
        let mut r = lock(&self.record);
        if let Some(last) = r.phases.last_mut() {
            last.end = Some(now);
        }
        r.phases.push(PhaseSpan {
            name: name.to_string(),
            start: now,
            ..Default::default()
        });
    }

    /// Stop every consumer; wait for what is in flight; the record.
    pub async fn stop(self) -> Record {
        let now = self.started.elapsed();
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
        let mut r = std::mem::take(&mut *lock(&self.record));
        if let Some(last) = r.phases.last_mut() {
            last.end = Some(now);
        }
        r
    }
}

fn lock(r: &Mutex<Record>) -> std::sync::MutexGuard<'_, Record> {
    r.lock().unwrap_or_else(|p| p.into_inner())
}

/// Streams to `addr`, one after another, each living [`STREAM_LIFE`] with a round trip
/// every [`STREAM_PING`]; a stream that breaks (error, wrong echo, or no answer within 5 s)
/// is counted, and the next one opens.
async fn chain(
    kind: StreamKind,
    addr: SocketAddr,
    record: Arc<Mutex<Record>>,
    mut stop: watch::Receiver<bool>,
) {
    while !*stop.borrow() {
        let outcome = tokio::select! {
            r = stream(kind, addr, &record) => r,
            _ = stop.changed() => Ok(()),
        };
        if let Err(reason) = outcome {
            {
                let mut r = lock(&record);
                let s = r.streams.entry(kind).or_default();
                s.broken += 1;
                *s.reasons.entry(reason).or_default() += 1;
            }
            tokio::time::sleep(STREAM_PING).await;
        }
    }
}

/// How long a round trip on a stream may take before the stream counts as broken.
const TRIP_LIMIT: Duration = Duration::from_secs(5);

async fn stream(kind: StreamKind, addr: SocketAddr, record: &Mutex<Record>) -> Result<(), String> {
    let counted =
        |r: &Mutex<Record>, f: fn(&mut Streams)| f(lock(r).streams.entry(kind).or_default());
    match kind {
        StreamKind::Tcp => {
            let mut s = tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|e| format!("connect: {}", e.kind()))?;
            counted(record, |s| s.opened += 1);
            let born = Instant::now();
            while born.elapsed() < STREAM_LIFE {
                let mut buf = [0u8; 5];
                let trip = async {
                    s.write_all(b"ping\n").await?;
                    s.read_exact(&mut buf).await
                };
                match tokio::time::timeout(TRIP_LIMIT, trip).await {
                    Ok(Ok(_)) if &buf == b"ping\n" => counted(record, |s| s.round_trips += 1),
                    Ok(Ok(_)) => return Err("wrong echo".into()),
                    Ok(Err(e)) => return Err(format!("{}", e.kind())),
                    Err(_) => return Err("no answer in 5 s".into()),
                }
                tokio::time::sleep(STREAM_PING).await;
            }
            let _ = s.shutdown().await;
            Ok(())
        }
        StreamKind::Grpc => {
            let mut s = EchoStream::open(addr, &addr.to_string())
                .await
                .map_err(|e| e.to_string())?;
            counted(record, |s| s.opened += 1);
            let born = Instant::now();
            while born.elapsed() < STREAM_LIFE {
                s.round_trip(TRIP_LIMIT).await.map_err(|e| e.to_string())?;
                counted(record, |s| s.round_trips += 1);
                tokio::time::sleep(STREAM_PING).await;
            }
            s.close(TRIP_LIMIT).await.map_err(|e| e.to_string())
        }
    }
}

/// The `p` quantile of `latencies` (microseconds, any order), in milliseconds.
pub fn quantile(latencies: &mut [u64], p: f64) -> f64 {
    latencies.sort_unstable();
    loadgen::percentile(latencies, p)
}
