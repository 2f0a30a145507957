//! One Pod's containers as local processes: spawn, log, probe, restart, terminate, report.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};

/// The waiting reason of a container whose names cannot make a log path.
const INVALID_NAME: &str = "InvalidContainerName";
use tokio::sync::{Notify, watch};

use sluice_kube::events::{EventType, Recorder, Regarding};

use super::config::{IpPool, NodeConfig, pod_value};
use super::mounts::{self, Mount};
use super::probe::probe;
use super::running::{Attachable, Stdin};
use super::terminal::Terminal;
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
        let finished = Arc::new(AtomicBool::new(false));
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let task = tokio::spawn(run_pod(
            client,
            cfg.clone(),
            pod,
            ips,
            rx,
            finished.clone(),
            events,
        ));
        Self {
            uid,
            terminate,
            finished,
            task,
        }
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

fn now() -> String {
    sluice_kube::time::now_rfc3339()
}

/// The argv of a container: built-in images run the `sluice` binary.
fn argv(cfg: &NodeConfig, c: &Value) -> Result<Vec<String>, (String, String)> {
    let image = c["image"].as_str().unwrap_or("");
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect()
    };
    let command = strings(&c["command"]);
    let args = strings(&c["args"]);
    let repo = image.rsplit_once(':').map(|(r, _)| r).unwrap_or(image);
    let builtin = match repo {
        "sluice/echo" => Some("echo"),
        "sluice/loadgen" => Some("loadgen"),
        _ => None,
    };
    // The `sluice` image (any registry and tag): this binary, with the container's command
    // (a leading `sluice` dropped) and args.
    if repo.rsplit('/').next() == Some("sluice") {
        let skip = usize::from(
            command
                .first()
                .is_some_and(|c| c.rsplit('/').next() == Some("sluice")),
        );
        let rest: Vec<String> = command.into_iter().skip(skip).chain(args).collect();
        // Manifests written by others get only the test images' subcommands, not the
        // control plane's (which could read this machine's keys).
        if cfg.builtin_images_only
            && !matches!(
                rest.first().map(String::as_str),
                Some("whoami" | "echo" | "loadgen")
            )
        {
            return Err((
                "ImageNotBuiltIn".into(),
                format!(
                    "this node runs built-in images only (--builtin-images-only): the sluice image runs only whoami, echo and loadgen here, not {:?}",
                    rest.first().map(String::as_str).unwrap_or("")
                ),
            ));
        }
        let mut v = vec![cfg.sluice_bin.display().to_string()];
        v.extend(rest);
        return Ok(v);
    }
    match (builtin, command.is_empty()) {
        (Some(sub), true) => {
            let mut v = vec![cfg.sluice_bin.display().to_string(), sub.to_string()];
            v.extend(args);
            Ok(v)
        }
        (None, false) if cfg.builtin_images_only => Err((
            "ImageNotBuiltIn".into(),
            format!(
                "image {image:?} is not built into Sluice, and this node runs built-in images only (--builtin-images-only): its command is not run"
            ),
        )),
        (_, false) => {
            let mut v = command;
            v.extend(args);
            Ok(v)
        }
        (None, true) => Err((
            "ImageNotBuiltIn".into(),
            format!(
                "image {image:?} is not built into Sluice and the container has no command: local clusters run processes, not images"
            ),
        )),
    }
}

/// Resolve a container's environment: the Pod's identity, then `envFrom`, then `env`.
async fn environment(
    client: &kube::Client,
    cfg: &NodeConfig,
    pod: &Value,
    c: &Value,
    ip: Ipv4Addr,
) -> Result<Vec<(String, String)>, String> {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or("default");
    let mut env = vec![
        ("POD_IP".to_string(), ip.to_string()),
        (
            "POD_NAME".to_string(),
            pod["metadata"]["name"].as_str().unwrap_or("").to_string(),
        ),
        ("POD_NAMESPACE".to_string(), ns.to_string()),
        ("SLUICE_CLUSTER".to_string(), cfg.cluster.clone()),
        (
            "HOSTNAME".to_string(),
            pod["spec"]["hostname"]
                .as_str()
                .or(pod["metadata"]["name"].as_str())
                .unwrap_or("")
                .to_string(),
        ),
    ];
    if let Some(dns) = cfg.dns {
        env.push((crate::resolve::ENV_SERVER.to_string(), dns.to_string()));
        env.push((
            crate::resolve::ENV_SEARCH.to_string(),
            format!("{ns}.svc.cluster.local svc.cluster.local cluster.local"),
        ));
    }
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let cm_data = |cm: ConfigMap| cm.data.unwrap_or_default();
    let secret_data = |s: Secret| -> std::collections::BTreeMap<String, String> {
        s.data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
            .collect()
    };
    for from in c["envFrom"].as_array().into_iter().flatten() {
        let prefix = from["prefix"].as_str().unwrap_or("");
        let data = if let Some(n) = from["configMapRef"]["name"].as_str() {
            cms.get(n)
                .await
                .map(cm_data)
                .map_err(|e| format!("configmap {n:?}: {e}"))?
        } else if let Some(n) = from["secretRef"]["name"].as_str() {
            secrets
                .get(n)
                .await
                .map(secret_data)
                .map_err(|e| format!("secret {n:?}: {e}"))?
        } else {
            continue;
        };
        env.extend(data.into_iter().map(|(k, v)| (format!("{prefix}{k}"), v)));
    }
    for e in c["env"].as_array().into_iter().flatten() {
        let name = e["name"].as_str().unwrap_or("").to_string();
        let value = if let Some(v) = e["value"].as_str() {
            v.to_string()
        } else if let Some(path) = e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            match path {
                "status.podIP" => ip.to_string(),
                "status.hostIP" => cfg.node_ip().to_string(),
                "spec.nodeName" => cfg.node_name.clone(),
                other => {
                    let mut v = pod;
                    for seg in other.split('.') {
                        v = &v[seg];
                    }
                    v.as_str().unwrap_or("").to_string()
                }
            }
        } else if let Some(r) = e["valueFrom"]["configMapKeyRef"].as_object() {
            let (n, k) = (
                r["name"].as_str().unwrap_or(""),
                r["key"].as_str().unwrap_or(""),
            );
            cm_data(
                cms.get(n)
                    .await
                    .map_err(|e| format!("configmap {n:?}: {e}"))?,
            )
            .get(k)
            .cloned()
            .ok_or(format!("configmap {n:?} has no key {k:?}"))?
        } else if let Some(r) = e["valueFrom"]["secretKeyRef"].as_object() {
            let (n, k) = (
                r["name"].as_str().unwrap_or(""),
                r["key"].as_str().unwrap_or(""),
            );
            secret_data(
                secrets
                    .get(n)
                    .await
                    .map_err(|e| format!("secret {n:?}: {e}"))?,
            )
            .get(k)
            .cloned()
            .ok_or(format!("secret {n:?} has no key {k:?}"))?
        } else {
            String::new()
        };
        env.push((name, value));
    }
    Ok(env)
}

/// A preStop hook: `sleep`, `exec` or `httpGet`.
async fn pre_stop(hook: &serde_json::Map<String, Value>, c: &Value, ip: Ipv4Addr) {
    if let Some(secs) = hook.get("sleep").and_then(|s| s["seconds"].as_u64()) {
        tokio::time::sleep(Duration::from_secs(secs)).await;
    } else if hook.contains_key("exec") || hook.contains_key("httpGet") {
        let mut probe_like = Value::Object(hook.clone());
        probe_like["timeoutSeconds"] = json!(30);
        let _ = probe(&probe_like, c, ip).await;
    }
}

/// The in-cluster environment for a container with credentials in `dir`, before the
/// container's own variables (which win).
fn with_credentials_env(
    cfg: &NodeConfig,
    dir: Option<&PathBuf>,
    env: Vec<(String, String)>,
) -> Vec<(String, String)> {
    match (dir, &cfg.api) {
        (Some(dir), Some(api)) => {
            let mut all = api.env();
            all.push((
                "SLUICE_SERVICE_ACCOUNT_DIR".into(),
                dir.display().to_string(),
            ));
            all.extend(env);
            all
        }
        _ => env,
    }
}

/// `argv` run with `mounts` (its volumes, then its credentials) where the container expects
/// them; a program that is not there is refused here, as exec would refuse it.
fn with_mounts_argv(
    volumes: Vec<Mount>,
    credentials: Option<&PathBuf>,
    argv: Vec<String>,
    env: &[(String, String)],
) -> Result<Vec<String>, (String, String)> {
    let mut mounts = volumes;
    let has_volumes = !mounts.is_empty();
    if let Some(dir) = credentials {
        mounts.push(Mount {
            source: dir.clone(),
            target: service_account::MOUNT.to_string(),
            read_only: true,
        });
    }
    if mounts.is_empty() {
        return Ok(argv);
    }
    let path = env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| std::env::var("PATH").unwrap_or_default());
    if let Some(program) = argv.first()
        && mounts::which(program, &path).is_none()
    {
        return Err((
            "RunContainerError".into(),
            format!("exec {program:?}: No such file or directory (os error 2)"),
        ));
    }
    match mounts::wrap(argv.clone(), &mounts) {
        Some(wrapped) => Ok(wrapped),
        // Credentials alone are still found through SLUICE_SERVICE_ACCOUNT_DIR.
        None if !has_volumes => Ok(argv),
        None => Err((
            "CreateContainerConfigError".into(),
            "volumes need a mount namespace of the container's own: run the node agent as root, with util-linux's unshare and mount".into(),
        )),
    }
}

/// `$(VAR)` in a command or its args replaced by the container's variable `VAR`, `$$`
/// by `$`; a reference to an unknown variable stays as written (kubelet's expansion).
fn expand(arg: &str, env: &[(String, String)]) -> String {
    let mut out = String::with_capacity(arg.len());
    let mut rest = arg;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
        {
            let name = &inner[..end];
            match env.iter().rev().find(|(k, _)| k == name) {
                Some((_, v)) => out.push_str(v),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Where the node keeps its Pods' volumes: beside their logs and credentials.
fn volumes_root(cfg: &NodeConfig) -> PathBuf {
    cfg.logs_dir
        .parent()
        .unwrap_or(&cfg.logs_dir)
        .join("volumes")
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

/// A container's process, its stdin when the node keeps one, its terminal when it has one.
type Spawned = (tokio::process::Child, Option<Stdin>, Option<Terminal>);

/// Start a container's process with its output appended to `out`/`err` (its log): with
/// `stdin: true` its stdin is a pipe the node keeps, with `tty: true` it runs on a
/// terminal of its own (its controlling terminal) whose output the node copies to the log
/// — so `attach` reaches both.
fn spawn(
    argv: &[String],
    env: Vec<(String, String)>,
    c: &Value,
    out: std::fs::File,
    err: std::fs::File,
) -> Result<Spawned, (String, String)> {
    let failed = |what: &dyn std::fmt::Display| ("RunContainerError".to_string(), what.to_string());
    let tty = c["tty"].as_bool() == Some(true);
    let stdin = c["stdin"].as_bool() == Some(true);
    let path = std::env::var("PATH").unwrap_or_default();
    let mut cmd = if tty {
        let setsid = mounts::which("setsid", &path)
            .ok_or_else(|| failed(&"tty: setsid (util-linux) is not installed on this node"))?;
        let mut cmd = tokio::process::Command::new(setsid);
        cmd.arg("--ctty").args(argv);
        cmd
    } else {
        let mut cmd = tokio::process::Command::new(&argv[0]);
        cmd.args(&argv[1..]);
        cmd
    };
    cmd.env_clear()
        .env("PATH", &path)
        .envs(env)
        .kill_on_drop(true);
    if let Some(dir) = c["workingDir"].as_str().filter(|d| !d.is_empty()) {
        cmd.current_dir(dir);
    }
    let exec_failed = |e: std::io::Error| failed(&format!("exec {:?}: {e}", argv[0]));
    if !tty {
        cmd.stdin(if stdin {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stdout(out)
        .stderr(err)
        .process_group(0);
        let mut child = cmd.spawn().map_err(exec_failed)?;
        let stdin = child.stdin.take().map(|w| Box::new(w) as Stdin);
        return Ok((child, stdin, None));
    }
    // setsid makes the process a session and process group of its own: killpg reaches it.
    let (terminal, secondary) = Terminal::open().map_err(|e| failed(&format!("tty: {e}")))?;
    let side = |t: &Terminal| t.side().map_err(|e| failed(&format!("tty: {e}")));
    let clone = || {
        secondary
            .try_clone()
            .map_err(|e| failed(&format!("tty: {e}")))
    };
    cmd.stdin(clone()?).stdout(clone()?).stderr(clone()?);
    let child = cmd.spawn().map_err(exec_failed)?;
    // Only the process holds the secondary side now: its exit ends the terminal's output.
    drop(cmd);
    drop(secondary);
    drop(err);
    let mut from = side(&terminal)?;
    let mut to = tokio::fs::File::from_std(out);
    tokio::spawn(async move {
        // Ends when the last holder of the secondary side is gone (EIO).
        let _ = tokio::io::copy(&mut from, &mut to).await;
    });
    let stdin = if stdin {
        Some(Box::new(side(&terminal)?) as Stdin)
    } else {
        None
    };
    Ok((child, stdin, Some(terminal)))
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
    let policy = pod["spec"]["restartPolicy"]
        .as_str()
        .unwrap_or("Always")
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
            Ok((env, dir)) => volumes::prepare(&client, &volumes_root, &pod, &c)
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
                        let _ = tokio::time::timeout(grace, pre_stop(hook, &c, ip)).await;
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
                    if probe(startup.as_ref().unwrap_or(&Value::Null), &c, ip).await {
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
                    let ok = probe(readiness.as_ref().unwrap_or(&Value::Null), &c, ip).await;
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
                    let ok = probe(liveness.as_ref().unwrap_or(&Value::Null), &c, ip).await;
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

fn status_of(
    cfg: &NodeConfig,
    pod: &Value,
    ip: Ipv4Addr,
    containers: &[(String, String, Arc<Mutex<ContainerState>>)],
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
        let mut v = json!({"name": name, "image": image, "imageID": "", "ready": s.ready, "started": s.started, "restartCount": s.restarts, "state": s.state});
        if !s.last_state.is_null() {
            v["lastState"] = s.last_state.clone();
        }
        statuses.push(v);
    }
    let phase = if all_done && !containers.is_empty() {
        if all_ok { "Succeeded" } else { "Failed" }
    } else if any_running {
        "Running"
    } else {
        "Pending"
    };
    let cond = |t: &str, ok: bool| json!({"type": t, "status": if ok { "True" } else { "False" }, "lastTransitionTime": null});
    let _ = pod;
    json!({"status": {
        "phase": phase,
        "podIP": ip.to_string(),
        "podIPs": [{"ip": ip.to_string()}],
        "hostIP": cfg.node_ip().to_string(),
        "startTime": start,
        "containerStatuses": statuses,
        "conditions": [cond("PodScheduled", true), cond("Initialized", true), cond("ContainersReady", all_ready), cond("Ready", all_ready && !all_done)],
    }})
}

async fn run_pod(
    client: kube::Client,
    cfg: NodeConfig,
    pod: Pod,
    ips: Arc<IpPool>,
    terminate: watch::Receiver<Option<Duration>>,
    finished: Arc<AtomicBool>,
    events: Arc<Recorder>,
) {
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
    let mut containers = Vec::new();
    let mut tasks = Vec::new();
    for c in v["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
    {
        let st = Arc::new(Mutex::new(ContainerState {
            state: json!({"waiting": {"reason": "ContainerCreating"}}),
            ..Default::default()
        }));
        containers.push((
            c["name"].as_str().unwrap_or("").to_string(),
            c["image"].as_str().unwrap_or("").to_string(),
            st.clone(),
        ));
        tasks.push(tokio::spawn(run_container(
            client.clone(),
            cfg.clone(),
            v.clone(),
            c,
            ip,
            st,
            changed.clone(),
            terminate.clone(),
            events.clone(),
        )));
    }
    tracing::info!(pod = %format!("{ns}/{name}"), %ip, "pod started");
    let mut last = Value::Null;
    let mut term = terminate.clone();
    loop {
        let status = status_of(&cfg, &v, ip, &containers, &start);
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
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
    for t in tasks {
        let _ = t.await;
    }
    let status = status_of(&cfg, &v, ip, &containers, &start);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_in_args_expand_as_kubelet_expands_them() {
        let env = vec![
            ("POD_IP".to_string(), "127.20.1.1".to_string()),
            ("CLUSTER".to_string(), "east".to_string()),
        ];
        assert_eq!(
            expand("--listen=$(POD_IP):53", &env),
            "--listen=127.20.1.1:53"
        );
        assert_eq!(expand("$(CLUSTER)-$(CLUSTER)", &env), "east-east");
        assert_eq!(expand("$(MISSING)", &env), "$(MISSING)");
        assert_eq!(expand("$$(POD_IP)", &env), "$(POD_IP)");
        assert_eq!(expand("cost: 5$ and $(", &env), "cost: 5$ and $(");
        assert_eq!(expand("ünïcode $(CLUSTER)", &env), "ünïcode east");
    }

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
