//! One Pod's containers as local processes: spawn, log, probe, restart, terminate, report.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};

/// The waiting reason of a container whose names cannot make a log path.
const INVALID_NAME: &str = "InvalidContainerName";
use tokio::sync::{Notify, watch};

use sluice_kube::events::{EventType, Recorder, Regarding};

use super::config::{IpPool, NodeConfig, pod_value};
use super::container::{argv, environment, expand, spawn, with_credentials_env, with_mounts_argv};
use super::probe::probe;
use super::running::Attachable;
use super::{service_account, volumes};

const MAX_BACKOFF: Duration = Duration::from_secs(20);

/// What a container is doing, as the Pod status shows it.
#[derive(Clone, Debug, Default)]
struct ContainerState {
    state: Value,
    last_state: Value,
    ready: bool,
    started: bool,
    restarts: u32,
    /// Exited for good (restart policy says no more).
    done: Option<i32>,
}

/// Handle on a running Pod.
pub struct PodRunner {
    uid: String,
    terminate: watch::Sender<Option<Duration>>,
    /// The Pod's ephemeral containers as its spec lists them (`kubectl debug` adds them
    /// to a running Pod).
    ephemeral: watch::Sender<Vec<Value>>,
    finished: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl PodRunner {
    /// Start `pod`'s containers; what happens to them is recorded as Events by `events`
    /// (the kubelet's).
    pub fn start(
        client: kube::Client,
        cfg: &NodeConfig,
        pod: Pod,
        ips: Arc<IpPool>,
        events: Arc<Recorder>,
    ) -> Self {
        let (terminate, rx) = watch::channel(None);
        let (ephemeral, added) = watch::channel(ephemeral_of(&pod));
        let finished = Arc::new(AtomicBool::new(false));
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let task = tokio::spawn(run_pod(
            client,
            cfg.clone(),
            pod,
            ips,
            Signals {
                terminate: rx,
                ephemeral: added,
            },
            finished.clone(),
            events,
        ));
        Self {
            uid,
            terminate,
            ephemeral,
            finished,
            task,
        }
    }

    /// The Pod changed: ephemeral containers it lists that have not run start now (the
    /// others of its spec do not change while it runs).
    pub fn update(&self, pod: &Pod) {
        let now = ephemeral_of(pod);
        self.ephemeral.send_if_modified(|have| {
            let changed = *have != now;
            if changed {
                *have = now;
            }
            changed
        });
    }

    pub fn uid(&self) -> &str {
        &self.uid
    }

    /// Ask the containers to stop within `grace` (the first request's grace wins unless a
    /// later one is shorter).
    pub fn terminate(&self, grace: Duration) {
        self.terminate.send_if_modified(|g| match g {
            Some(cur) if *cur <= grace => false,
            _ => {
                *g = Some(grace);
                true
            }
        });
    }

    pub fn finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    pub async fn wait(self) {
        let _ = self.task.await;
    }
}

/// What a running Pod is told besides its spec.
struct Signals {
    /// Stop within the grace period given.
    terminate: watch::Receiver<Option<Duration>>,
    /// Its ephemeral containers, as its spec lists them.
    ephemeral: watch::Receiver<Vec<Value>>,
}

/// The Pod's ephemeral containers as JSON (only that field is converted: the agent asks on
/// every pass, for every Pod it runs).
fn ephemeral_of(pod: &Pod) -> Vec<Value> {
    pod.spec
        .as_ref()
        .and_then(|s| s.ephemeral_containers.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| serde_json::to_value(c).ok())
        .collect()
}

/// A container of the Pod and what it is doing: `(name, image, state)`.
type Tracked = (String, String, Arc<Mutex<ContainerState>>);

fn now() -> String {
    sluice_kube::time::now_rfc3339()
}

/// A preStop hook: `sleep`, `exec` or `httpGet`.
async fn pre_stop(hook: &serde_json::Map<String, Value>, c: &Value, ip: Ipv4Addr, pid: u32) {
    if let Some(secs) = hook.get("sleep").and_then(|s| s["seconds"].as_u64()) {
        tokio::time::sleep(Duration::from_secs(secs)).await;
    } else if hook.contains_key("exec") || hook.contains_key("httpGet") {
        let mut probe_like = Value::Object(hook.clone());
        probe_like["timeoutSeconds"] = json!(30);
        let _ = probe(&probe_like, c, ip, pid).await;
    }
}

fn volumes_root(cfg: &NodeConfig) -> PathBuf {
    cfg.volumes_dir()
}

/// Where a container's log goes: `<logs>/<namespace>/<pod>/<container>/<restart>.log`.
/// Each part must be one plain path component (an API server validates them as DNS names,
/// but the agent does not trust that: a name like `../x` would write outside its directory).
fn log_path(
    cfg: &NodeConfig,
    pod: &Value,
    container: &str,
    restart: u32,
) -> Result<PathBuf, String> {
    let meta = &pod["metadata"];
    let parts = [
        meta["namespace"].as_str().unwrap_or("default"),
        meta["name"].as_str().unwrap_or(""),
        container,
    ];
    let mut path = cfg.logs_dir.clone();
    for part in parts {
        if !is_path_component(part) {
            return Err(format!("{part:?} is not a valid name for a log directory"));
        }
        path.push(part);
    }
    path.push(format!("{restart}.log"));
    Ok(path)
}

/// One path component that stays where it is joined: not empty, not `.` or `..`, no
/// separator or NUL.
fn is_path_component(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.contains(['/', '\\', '\0'])
}

fn last_line(path: &PathBuf) -> String {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| {
            s.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(|l| l.chars().take(512).collect())
        })
        .unwrap_or_default()
}

/// Run one container until it is done for good or terminated.
#[allow(clippy::too_many_arguments)]
async fn run_container(
    client: kube::Client,
    cfg: NodeConfig,
    pod: Value,
    c: Value,
    ip: Ipv4Addr,
    state: Arc<Mutex<ContainerState>>,
    changed: Arc<Notify>,
    mut terminate: watch::Receiver<Option<Duration>>,
    events: Arc<Recorder>,
    ephemeral: bool,
) {
    let name = c["name"].as_str().unwrap_or("").to_string();
    let regarding = Regarding {
        api_version: "v1".into(),
        kind: "Pod".into(),
        namespace: pod["metadata"]["namespace"].as_str().unwrap_or("").into(),
        name: pod["metadata"]["name"].as_str().unwrap_or("").into(),
        uid: pod["metadata"]["uid"].as_str().map(str::to_string),
    };
    let event = |ty: EventType, reason: &'static str, message: String| {
        let (events, regarding) = (events.clone(), regarding.clone());
        async move { events.record(&regarding, ty, reason, &message).await }
    };
    // An ephemeral container runs once, whatever the Pod's policy.
    let policy = match pod["spec"]["restartPolicy"].as_str() {
        _ if ephemeral => "Never",
        Some(p) => p,
        None => "Always",
    }
    .to_string();
    let readiness = c.get("readinessProbe").filter(|p| p.is_object()).cloned();
    let liveness = c.get("livenessProbe").filter(|p| p.is_object()).cloned();
    let startup = c.get("startupProbe").filter(|p| p.is_object()).cloned();
    let set = |f: &dyn Fn(&mut ContainerState)| {
        f(&mut state.lock().unwrap_or_else(|p| p.into_inner()));
        changed.notify_one();
    };
    let mut backoff = Duration::from_secs(1);
    let mut projected: Option<service_account::Projected> = None;
    let volumes_root = volumes_root(&cfg);
    loop {
        if terminate.borrow().is_some() {
            return;
        }
        let restarts = state.lock().unwrap_or_else(|p| p.into_inner()).restarts;
        // The Pod's ServiceAccount credentials, projected once and kept fresh meanwhile.
        let credentials = match (&cfg.api, &projected) {
            (None, _) => Ok(None),
            (Some(_), Some(p)) => Ok(Some(p.dir.clone())),
            (Some(api), None) => {
                let root = cfg
                    .logs_dir
                    .parent()
                    .unwrap_or(&cfg.logs_dir)
                    .join("serviceaccounts");
                service_account::project(&client, api, &root, &pod, &name)
                    .await
                    .map(|p| {
                        let dir = p.as_ref().map(|p| p.dir.clone());
                        projected = p;
                        dir
                    })
            }
        };
        let env = match credentials {
            Ok(dir) => environment(&client, &cfg, &pod, &c, ip)
                .await
                .map(|env| (with_credentials_env(&cfg, dir.as_ref(), env), dir)),
            Err(e) => Err(e),
        };
        let env = match env {
            Ok((env, dir)) => volumes::prepare(
                &client,
                &volumes_root,
                cfg.shared_storage.as_deref(),
                &pod,
                &c,
            )
            .await
            .map(|volumes| (env, dir, volumes)),
            Err(e) => Err(e),
        };
        let spawned = match (argv(&cfg, &c), env) {
            (Err((reason, message)), _) => Err((reason, message)),
            (_, Err(message)) => Err(("CreateContainerConfigError".to_string(), message)),
            (Ok(argv), Ok((env, dir, volumes))) => match with_mounts_argv(
                volumes,
                dir.as_ref(),
                argv.iter().map(|a| expand(a, &env)).collect(),
                &env,
            )
            .and_then(|argv| {
                log_path(&cfg, &pod, &name, restarts)
                    .map(|path| (argv, path))
                    .map_err(|message| (INVALID_NAME.to_string(), message))
            }) {
                Err(e) => Err(e),
                Ok((argv, path)) => {
                    let _ = std::fs::create_dir_all(path.parent().unwrap_or(&cfg.logs_dir));
                    let log = std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&path);
                    match log.and_then(|f| Ok((f.try_clone()?, f))) {
                        Err(e) => Err((
                            "RunContainerError".into(),
                            format!("log file {}: {e}", path.display()),
                        )),
                        Ok((out, err)) => {
                            spawn(&argv, env, &c, out, err).map(|(child, stdin, terminal)| {
                                let once = c["stdinOnce"].as_bool() == Some(true);
                                let attachable =
                                    Attachable::new(path.clone(), stdin, once, terminal);
                                (child, path, attachable)
                            })
                        }
                    }
                }
            },
        };
        let (mut child, path, attachable) = match spawned {
            Ok(x) => x,
            Err((reason, message)) => {
                cfg.metrics.start_failures.inc();
                tracing::info!(container = %name, %reason, %message, "container cannot start");
                event(
                    EventType::Warning,
                    "Failed",
                    format!("Error: {reason}: {message}"),
                )
                .await;
                set(&|s| {
                    s.state = json!({"waiting": {"reason": reason, "message": message}});
                    s.ready = false;
                    s.started = false;
                });
                if reason == "ImageNotBuiltIn" || reason == INVALID_NAME {
                    // Nothing will change until the Pod does.
                    let _ = terminate.changed().await;
                    return;
                }
                tokio::select! { _ = tokio::time::sleep(backoff) => {}, _ = terminate.changed() => return }
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        let pid = child.id().unwrap_or(0);
        let registered = cfg.running.register(
            super::running::ContainerRef {
                namespace: regarding.namespace.clone(),
                pod: regarding.name.clone(),
                container: name.clone(),
            },
            pid,
            ip,
            attachable,
        );
        cfg.metrics.container_starts.inc();
        event(
            EventType::Normal,
            "Started",
            format!("Started container {name}"),
        )
        .await;
        let started_at = now();
        let started = Instant::now();
        // With a startup probe, the container counts as started (and the other probes run)
        // only once it succeeds.
        let mut started_ok = startup.is_none();
        set(&|s| {
            s.state = json!({"running": {"startedAt": started_at}});
            s.started = started_ok;
            s.ready = started_ok && readiness.is_none();
        });
        let period = |p: &Option<Value>| {
            Duration::from_secs(
                p.as_ref()
                    .and_then(|p| p["periodSeconds"].as_u64())
                    .unwrap_or(1)
                    .max(1),
            )
        };
        let mut ready_tick = tokio::time::interval(period(&readiness));
        let mut live_tick = tokio::time::interval(period(&liveness));
        let mut startup_tick = tokio::time::interval(period(&startup));
        let (mut ready_fails, mut live_fails, mut startup_fails) = (0u64, 0u64, 0u64);
        let threshold = |p: &Option<Value>| {
            p.as_ref()
                .and_then(|p| p["failureThreshold"].as_u64())
                .unwrap_or(3)
        };
        let delay = |p: &Option<Value>| {
            Duration::from_secs(
                p.as_ref()
                    .and_then(|p| p["initialDelaySeconds"].as_u64())
                    .unwrap_or(0),
            )
        };
        let exit = loop {
            tokio::select! {
                status = child.wait() => break status.ok().and_then(|s| s.code()).unwrap_or(137),
                _ = terminate.changed() => {
                    let grace = terminate.borrow().unwrap_or(Duration::ZERO);
                    // Recorded beside the stop, never before it: an API server that is slow
                    // or gone must not hold the container past its grace period.
                    tokio::spawn(event(EventType::Normal, "Killing", format!("Stopping container {name}")));
                    let hook_started = Instant::now();
                    if let Some(hook) = c["lifecycle"]["preStop"].as_object().filter(|_| !grace.is_zero()) {
                        // The hook runs within the grace period, as kubelet runs it.
                        let _ = tokio::time::timeout(grace, pre_stop(hook, &c, ip, pid)).await;
                    }
                    let grace = grace.saturating_sub(hook_started.elapsed());
                    let pgid = Pid::from_raw(pid as i32);
                    let _ = killpg(pgid, Signal::SIGTERM);
                    let code = match tokio::time::timeout(grace, child.wait()).await {
                        Ok(s) => s.ok().and_then(|s| s.code()).unwrap_or(143),
                        Err(_) => {
                            let _ = killpg(pgid, Signal::SIGKILL);
                            let _ = child.wait().await;
                            137
                        }
                    };
                    let finished = now();
                    set(&|s| {
                        s.state = json!({"terminated": {"exitCode": code, "reason": if code == 0 || code == 143 { "Completed" } else { "Error" }, "startedAt": started_at, "finishedAt": finished}});
                        s.ready = false;
                        s.done = Some(code);
                    });
                    return;
                }
                _ = startup_tick.tick(), if !started_ok && started.elapsed() >= delay(&startup) => {
                    if probe(startup.as_ref().unwrap_or(&Value::Null), &c, ip, pid).await {
                        started_ok = true;
                        let ready = readiness.is_none();
                        set(&|s| {
                            s.started = true;
                            s.ready = ready;
                        });
                    } else {
                        startup_fails += 1;
                        cfg.metrics.probe_failures.get_or_create(&super::admin::ProbeLabels { probe: "startup" }).inc();
                        event(EventType::Warning, "Unhealthy", "Startup probe failed".into()).await;
                        if startup_fails >= threshold(&startup) {
                            tracing::info!(container = %name, "startup probe failed; restarting");
                            let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
                        }
                    }
                }
                _ = ready_tick.tick(), if started_ok && readiness.is_some() && started.elapsed() >= delay(&readiness) => {
                    let ok = probe(readiness.as_ref().unwrap_or(&Value::Null), &c, ip, pid).await;
                    ready_fails = if ok { 0 } else { ready_fails + 1 };
                    if !ok {
                        cfg.metrics.probe_failures.get_or_create(&super::admin::ProbeLabels { probe: "readiness" }).inc();
                        event(EventType::Warning, "Unhealthy", "Readiness probe failed".into()).await;
                    }
                    let ready = ok || (ready_fails < threshold(&readiness) && state.lock().unwrap_or_else(|p| p.into_inner()).ready);
                    if ready != state.lock().unwrap_or_else(|p| p.into_inner()).ready {
                        set(&|s| s.ready = ready);
                    }
                }
                _ = live_tick.tick(), if started_ok && liveness.is_some() && started.elapsed() >= delay(&liveness) => {
                    let ok = probe(liveness.as_ref().unwrap_or(&Value::Null), &c, ip, pid).await;
                    live_fails = if ok { 0 } else { live_fails + 1 };
                    if !ok {
                        cfg.metrics.probe_failures.get_or_create(&super::admin::ProbeLabels { probe: "liveness" }).inc();
                        event(EventType::Warning, "Unhealthy", "Liveness probe failed".into()).await;
                    }
                    if live_fails >= threshold(&liveness) {
                        tracing::info!(container = %name, "liveness probe failed; restarting");
                        let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
                    }
                }
            }
        };
        drop(registered);
        let finished = now();
        let message = last_line(&path);
        let terminated = json!({"terminated": {"exitCode": exit, "reason": if exit == 0 { "Completed" } else { "Error" }, "message": message, "startedAt": started_at, "finishedAt": finished}});
        let restart = match policy.as_str() {
            "Never" => false,
            "OnFailure" => exit != 0,
            _ => true,
        };
        if started.elapsed() > Duration::from_secs(10) {
            backoff = Duration::from_secs(1);
        }
        if !restart {
            set(&|s| {
                s.state = terminated.clone();
                s.ready = false;
                s.done = Some(exit);
            });
            return;
        }
        set(&|s| {
            s.last_state = terminated.clone();
            s.state = json!({"waiting": {"reason": "CrashLoopBackOff", "message": format!("back-off {}s restarting failed container={name} pod={}", backoff.as_secs(), pod["metadata"]["name"].as_str().unwrap_or(""))}});
            s.ready = false;
            s.restarts += 1;
        });
        cfg.metrics.container_restarts.inc();
        event(
            EventType::Warning,
            "BackOff",
            format!(
                "Back-off restarting failed container {name} in pod {}",
                regarding.name
            ),
        )
        .await;
        tokio::select! { _ = tokio::time::sleep(backoff) => {}, _ = terminate.changed() => return }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One container's status, as the Pod reports it.
fn container_status(name: &str, image: &str, s: &ContainerState) -> Value {
    let mut v = json!({"name": name, "image": image, "imageID": "", "ready": s.ready, "started": s.started, "restartCount": s.restarts, "state": s.state});
    if !s.last_state.is_null() {
        v["lastState"] = s.last_state.clone();
    }
    v
}

fn status_of(
    cfg: &NodeConfig,
    ip: Ipv4Addr,
    containers: &[Tracked],
    ephemeral: &[Tracked],
    start: &str,
) -> Value {
    let mut statuses = Vec::new();
    let (mut all_ready, mut any_running, mut all_done, mut all_ok) = (true, false, true, true);
    for (name, image, st) in containers {
        let s = st.lock().unwrap_or_else(|p| p.into_inner()).clone();
        all_ready &= s.ready;
        any_running |= s.state.get("running").is_some();
        all_done &= s.done.is_some();
        all_ok &= s.done == Some(0);
        statuses.push(container_status(name, image, &s));
    }
    // Ephemeral containers count for neither the phase nor readiness.
    let ephemeral: Vec<Value> = ephemeral
        .iter()
        .map(|(name, image, st)| {
            container_status(name, image, &st.lock().unwrap_or_else(|p| p.into_inner()))
        })
        .collect();
    let phase = if all_done && !containers.is_empty() {
        if all_ok { "Succeeded" } else { "Failed" }
    } else if any_running {
        "Running"
    } else {
        "Pending"
    };
    let cond = |t: &str, ok: bool| json!({"type": t, "status": if ok { "True" } else { "False" }, "lastTransitionTime": null});
    let mut status = json!({"status": {
        "phase": phase,
        "podIP": ip.to_string(),
        "podIPs": [{"ip": ip.to_string()}],
        "hostIP": cfg.node_ip().to_string(),
        "startTime": start,
        "containerStatuses": statuses,
        "conditions": [cond("PodScheduled", true), cond("Initialized", true), cond("ContainersReady", all_ready), cond("Ready", all_ready && !all_done)],
    }});
    if !ephemeral.is_empty() {
        status["status"]["ephemeralContainerStatuses"] = Value::from(ephemeral);
    }
    status
}

async fn run_pod(
    client: kube::Client,
    cfg: NodeConfig,
    pod: Pod,
    ips: Arc<IpPool>,
    signals: Signals,
    finished: Arc<AtomicBool>,
    events: Arc<Recorder>,
) {
    let Signals {
        terminate,
        ephemeral: mut added,
    } = signals;
    let v = pod_value(&pod);
    let ns = v["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_string();
    let name = v["metadata"]["name"].as_str().unwrap_or("").to_string();
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let want: Option<Ipv4Addr> = v["status"]["podIP"].as_str().and_then(|s| s.parse().ok());
    // A Pod on the host's network has the node's address, as its own, shared.
    let host_network = v["spec"]["hostNetwork"].as_bool() == Some(true);
    let ip = if host_network {
        Some(cfg.node_ip())
    } else {
        ips.take(want)
    };
    let Some(ip) = ip else {
        tracing::warn!(pod = %name, "no pod IP left");
        finished.store(true, Ordering::Release);
        return;
    };
    let start = v["status"]["startTime"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(now);
    let changed = Arc::new(Notify::new());
    let mut containers: Vec<Tracked> = Vec::new();
    let mut tasks = Vec::new();
    let waiting = || {
        Arc::new(Mutex::new(ContainerState {
            state: json!({"waiting": {"reason": "ContainerCreating"}}),
            ..Default::default()
        }))
    };
    let start_container = |c: Value, st: Arc<Mutex<ContainerState>>, ephemeral: bool| {
        tokio::spawn(run_container(
            client.clone(),
            cfg.clone(),
            v.clone(),
            c,
            ip,
            st,
            changed.clone(),
            terminate.clone(),
            events.clone(),
            ephemeral,
        ))
    };
    for c in v["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
    {
        let st = waiting();
        containers.push((
            c["name"].as_str().unwrap_or("").to_string(),
            c["image"].as_str().unwrap_or("").to_string(),
            st.clone(),
        ));
        tasks.push(start_container(c, st, false));
    }
    // Ephemeral containers that ran before this runner (the agent restarted) do not run
    // again: they are reported as they ended.
    let mut ephemeral: Vec<Tracked> = ended_ephemeral(&v);
    tracing::info!(pod = %format!("{ns}/{name}"), %ip, "pod started");
    let mut last = Value::Null;
    let mut term = terminate.clone();
    loop {
        // Ephemeral containers the spec lists and this runner has not run: start them.
        let listed = added.borrow_and_update().clone();
        for c in listed {
            let Some(cname) = c["name"].as_str().map(str::to_string) else {
                continue;
            };
            if ephemeral.iter().any(|(n, _, _)| *n == cname) || terminate.borrow().is_some() {
                continue;
            }
            tracing::info!(pod = %format!("{ns}/{name}"), container = %cname, "ephemeral container added");
            let st = waiting();
            let image = c["image"].as_str().unwrap_or("").to_string();
            ephemeral.push((cname, image, st.clone()));
            tasks.push(start_container(c, st, true));
        }
        let status = status_of(&cfg, ip, &containers, &ephemeral, &start);
        if status != last {
            if let Err(e) = api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                .await
            {
                tracing::debug!(pod = %name, error = %e, "status update failed");
            }
            last = status;
        }
        if tasks.iter().all(|t| t.is_finished()) {
            break;
        }
        tokio::select! {
            _ = changed.notified() => {}
            _ = term.changed() => {}
            _ = added.changed() => {}
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
    for t in tasks {
        let _ = t.await;
    }
    let status = status_of(&cfg, ip, &containers, &ephemeral, &start);
    let _ = api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await;
    if terminate.borrow().is_some() {
        // Deleted through the API: the containers are gone, so the Pod may go.
        let _ = api
            .delete(&name, &DeleteParams::default().grace_period(0))
            .await;
        if !host_network {
            ips.give_back(ip);
        }
        volumes::remove(&volumes_root(&cfg), &v);
    }
    finished.store(true, Ordering::Release);
}

/// The ephemeral containers a Pod's status reports from before this runner, as they
/// ended: one that was running when its runner went is reported killed.
fn ended_ephemeral(pod: &Value) -> Vec<Tracked> {
    pod["status"]["ephemeralContainerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| {
            let name = s["name"].as_str()?.to_string();
            let image = s["image"].as_str().unwrap_or("").to_string();
            let state = match s["state"].get("terminated") {
                Some(_) => s["state"].clone(),
                None => json!({"terminated": {"exitCode": 137, "reason": "Error",
                    "message": "the node agent restarted", "finishedAt": now()}}),
            };
            let done = state["terminated"]["exitCode"].as_i64().unwrap_or(137) as i32;
            let st = ContainerState {
                state,
                done: Some(done),
                ..Default::default()
            };
            Some((name, image, Arc::new(Mutex::new(st))))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_paths_stay_inside_the_logs_directory() {
        let cfg = NodeConfig::for_test();
        let pod = json!({"metadata": {"namespace": "shop", "name": "web"}});
        assert_eq!(
            log_path(&cfg, &pod, "main", 2),
            Ok(PathBuf::from("/logs/shop/web/main/2.log"))
        );
        for bad in ["..", "../../etc", "a/b", "", ".", "nul\0"] {
            assert!(log_path(&cfg, &pod, bad, 0).is_err(), "{bad:?}");
        }
        let escaping = json!({"metadata": {"namespace": "..", "name": "web"}});
        assert!(log_path(&cfg, &escaping, "main", 0).is_err());
    }
}
