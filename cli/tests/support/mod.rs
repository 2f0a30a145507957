//! Test support: run the real `sluice` binary and the real `kubectl` against it.

#![allow(dead_code, unused_imports)]

pub mod clusterset;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A `sluice control` process on an ephemeral loopback port; killed on drop.
pub struct Control {
    child: Option<Child>,
    pub dir: PathBuf,
    pub url: String,
    pub kubeconfig: PathBuf,
}

/// How long one kubectl command may take: above the longest `--timeout` a test gives
/// (180 s), so only a hang reaches it.
pub const KUBECTL_DEADLINE: Duration = Duration::from_secs(300);

pub fn sluice_bin() -> &'static str {
    env!("CARGO_BIN_EXE_sluice")
}

impl Control {
    pub fn start(dir: &Path, extra: &[&str]) -> Self {
        let mut cmd = Command::new(sluice_bin());
        cmd.args(["control", "--data-dir"])
            .arg(dir)
            .args(["--listen", "127.0.0.1:0"])
            .args(extra);
        // `SLUICE_TEST_STORE=etcd` (cli/tests/on_etcd.rs): the same suites on etcd.
        if sluice_test_support::etcd::enabled() {
            cmd.args(["--etcd-servers", &sluice_test_support::etcd::shared().url])
                .args(["--etcd-prefix", &sluice_test_support::etcd::prefix_for(dir)]);
        }
        let mut child = cmd
            .env("SLUICE_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn sluice control");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read serving line");
        let url = line
            .strip_prefix("serving ")
            .and_then(|l| l.split_whitespace().next())
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
            .to_string();
        Control {
            child: Some(child),
            dir: dir.to_path_buf(),
            url,
            kubeconfig: dir.join("admin.kubeconfig"),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// SIGKILL, as a crash would.
    pub fn kill9(mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Workspace `name` of root, created through `root` and waited for: a kubectl (the
    /// same binary) for it, with its discovery cache in `cache`.
    #[allow(dead_code)]
    pub fn workspace(&self, root: &Kubectl, name: &str, cache: &Path) -> Kubectl {
        root.apply_stdin(&format!(
            "apiVersion: sluice.dev/v1alpha1\nkind: Workspace\nmetadata: {{name: {name}}}\n"
        ));
        let k = Kubectl::new(
            &root.bin,
            &self.workspace_kubeconfig(&format!("root:{name}")),
            cache,
        );
        assert!(
            eventually(std::time::Duration::from_secs(30), || k
                .run(&["get", "ns"])
                .status
                .success()),
            "workspace {name} never served"
        );
        k
    }

    /// A kubeconfig for a logical cluster, written by `sluice kubeconfig`.
    pub fn workspace_kubeconfig(&self, workspace: &str) -> PathBuf {
        let out = Command::new(sluice_bin())
            .args(["kubeconfig", "--data-dir"])
            .arg(&self.dir)
            .args(["--workspace", workspace])
            .output()
            .expect("sluice kubeconfig");
        assert!(
            out.status.success(),
            "sluice kubeconfig failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = self.dir.join(format!("{workspace}.kubeconfig"));
        std::fs::write(&path, &out.stdout).expect("write kubeconfig");
        path
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The kubectl binaries to test with: `SLUICE_KUBECTLS` (colon-separated) or `kubectl`.
pub fn kubectls() -> Vec<String> {
    match std::env::var("SLUICE_KUBECTLS") {
        Ok(v) if !v.trim().is_empty() => v
            .split(':')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect(),
        _ => vec!["kubectl".to_string()],
    }
}

/// One kubectl binary with a kubeconfig and a private discovery cache.
#[derive(Clone)]
pub struct Kubectl {
    pub bin: String,
    pub kubeconfig: PathBuf,
    pub cache: PathBuf,
    /// The credentials directory of the control plane whose names [`Kubectl::downstream`]
    /// gives, when it is not `dev up`'s own (`<state>/control`).
    pub installation: Option<PathBuf>,
}

impl Kubectl {
    pub fn new(bin: &str, kubeconfig: &Path, cache: &Path) -> Self {
        Self {
            bin: bin.to_string(),
            kubeconfig: kubeconfig.to_path_buf(),
            cache: cache.to_path_buf(),
            installation: None,
        }
    }

    /// This kubectl, with downstream names given by the control plane whose credentials
    /// are in `dir` (one installed from its chart, say).
    #[allow(dead_code)]
    pub fn with_installation(mut self, dir: &Path) -> Self {
        self.installation = Some(dir.to_path_buf());
        self
    }

    /// The downstream namespace of namespace `ns` of logical cluster `path` in the dev
    /// installation this kubectl belongs to: the name its control plane gives, keyed with
    /// that installation's secret (read from its data directory).
    #[allow(dead_code)]
    pub fn downstream(&self, path: &str, ns: &str) -> String {
        let dir = match &self.installation {
            Some(d) => d.clone(),
            None => self
                .cache
                .parent()
                .expect("a dev state directory")
                .join("control"),
        };
        let names = sluice_control::downstream_names::DownstreamNames::load(&dir)
            .expect("the installation's key");
        names.name(&path.parse().expect("a logical cluster path"), ns)
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache)
            .args(args);
        c
    }

    /// Run to completion and collect its output; a kubectl still running after
    /// [`KUBECTL_DEADLINE`] is killed and the test fails naming it (a server that never
    /// answers, or a watch that misses its event, must not hang the suite).
    pub fn run(&self, args: &[&str]) -> Output {
        let child = self
            .command(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("running {} {args:?}: {e}", self.bin));
        self.collect(child, args)
    }

    /// Wait for `child` (this kubectl running `args`) within [`KUBECTL_DEADLINE`].
    fn collect(&self, child: Child, args: &[&str]) -> Output {
        let pid = child.id();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        match rx.recv_timeout(KUBECTL_DEADLINE) {
            Ok(out) => out.unwrap_or_else(|e| panic!("running {} {args:?}: {e}", self.bin)),
            Err(_) => {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
                panic!(
                    "{} {args:?} did not return within {KUBECTL_DEADLINE:?}",
                    self.bin
                )
            }
        }
    }

    /// Run, assert success, return stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "{} {args:?} failed:\nstdout: {}\nstderr: {}",
            self.bin,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Run, assert failure, return stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            !out.status.success(),
            "{} {args:?} unexpectedly succeeded: {}",
            self.bin,
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// Run with `input` on standard input.
    pub fn fed(&self, args: &[&str], input: &str) -> Output {
        use std::io::Write;
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("running {} {args:?}: {e}", self.bin));
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write stdin");
        self.collect(child, args)
    }

    pub fn apply_stdin(&self, manifest: &str) -> String {
        let out = self.fed(&["apply", "-f", "-"], manifest);
        assert!(
            out.status.success(),
            "apply failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

pub use sluice_test_support::poll::eventually_blocking as eventually;

/// `sluice dev up` in a temporary state directory; SIGTERMed on drop.
pub struct DevUp {
    child: Option<Child>,
    pub state: PathBuf,
    /// The state directory, removed on drop unless `SLUICE_TEST_KEEP` is set.
    _dir: Option<tempfile::TempDir>,
    /// Held from start until dev up has stopped (fields drop after `Drop::drop`, in order).
    _one: OneClusterset,
}

/// `dev up` (and `sluice demo`) binds the clusterset's fixed loopback addresses, and some
/// tests look for its processes machine-wide: one clusterset at a time in the test binary.
/// Every `DevUp` holds this, as does a test that starts a clusterset another way; the next
/// one waits for it to be dropped.
pub struct OneClusterset;

static CLUSTERSET_UP: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
static CLUSTERSET_DOWN: std::sync::Condvar = std::sync::Condvar::new();

impl OneClusterset {
    pub fn take() -> Self {
        let mut up = CLUSTERSET_UP.lock().unwrap_or_else(|p| p.into_inner());
        while *up {
            up = CLUSTERSET_DOWN.wait(up).unwrap_or_else(|p| p.into_inner());
        }
        *up = true;
        Self
    }
}

impl Drop for OneClusterset {
    fn drop(&mut self) {
        *CLUSTERSET_UP.lock().unwrap_or_else(|p| p.into_inner()) = false;
        CLUSTERSET_DOWN.notify_one();
    }
}

impl DevUp {
    pub fn start(clusters: &str) -> (Self, Duration) {
        Self::start_with(clusters, &[])
    }

    /// `dev up` with `extra` arguments.
    pub fn start_with(clusters: &str, extra: &[&str]) -> (Self, Duration) {
        let one = OneClusterset::take();
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let started = Instant::now();
        let mut child = Command::new(sluice_bin())
            .args(["dev", "up", "--state"])
            .arg(&state)
            .args(["--clusters", clusters])
            .args(extra)
            // SLUICE_DEV_LOG: a log filter for dev up's processes, to trace a test or bench.
            .env(
                "SLUICE_LOG",
                std::env::var("SLUICE_DEV_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "dev up did not become ready");
        (
            Self {
                child: Some(child),
                state,
                // SLUICE_TEST_KEEP: keep the state directory (logs included) after the test.
                _dir: match std::env::var_os("SLUICE_TEST_KEEP") {
                    Some(_) => {
                        eprintln!("dev up state kept at {}", dir.keep().display());
                        None
                    }
                    None => Some(dir),
                },
                _one: one,
            },
            started.elapsed(),
        )
    }

    /// kubectl against the control plane's root logical cluster.
    pub fn kubectl_control(&self) -> Kubectl {
        Kubectl::new(
            &kubectls().remove(0),
            &self.state.join("control.kubeconfig"),
            &self.state.join("cache-control"),
        )
    }

    /// A field of member cluster `name`'s descriptor (`<state>/clusters/<name>.json`):
    /// where its ingress, DNS, gateway listen.
    #[allow(dead_code)]
    pub fn described(&self, name: &str, key: &str) -> String {
        let path = self.state.join("clusters").join(format!("{name}.json"));
        let d: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        d[key]
            .as_str()
            .unwrap_or_else(|| panic!("{key} in {d}"))
            .to_string()
    }

    pub fn kubectl(&self, cluster: &str) -> Kubectl {
        Kubectl::new(
            &kubectls().remove(0),
            &self
                .state
                .join("clusters")
                .join(format!("{cluster}.kubeconfig")),
            &self.state.join(format!("cache-{cluster}")),
        )
    }

    /// SIGKILL dev up itself, as a crash would: its parts are left to notice.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait; true if it exited cleanly.
    pub fn stop(&mut self) -> bool {
        let Some(mut c) = self.child.take() else {
            return true;
        };
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(c.id().to_string())
            .status();
        // dev up stops its parts one by one, each within its grace period (a node agent
        // waits for its Pods'): killing it sooner would leave the parts not yet stopped
        // running, holding the clusters' fixed addresses.
        let deadline = Instant::now() + Duration::from_secs(90);
        while Instant::now() < deadline {
            if let Ok(Some(s)) = c.try_wait() {
                if !s.success() {
                    eprintln!("dev up exited with {s}");
                }
                return s.success();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = c.kill();
        false
    }
}

impl Drop for DevUp {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Command lines of processes that mention `needle`.
pub fn processes_with(needle: &str) -> Vec<String> {
    processes_with_pid(needle)
        .into_iter()
        .map(|(_, cmd)| cmd)
        .collect()
}

pub fn http_get(ip: &str, port: u16, path: &str) -> Option<serde_json::Value> {
    let mut s = std::net::TcpStream::connect_timeout(
        &format!("{ip}:{port}").parse().ok()?,
        Duration::from_secs(2),
    )
    .ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    if !out.starts_with("HTTP/1.1 200") {
        return None;
    }
    serde_json::from_str(out.split("\r\n\r\n").nth(1)?).ok()
}

/// Pids and command lines of processes whose command line mentions `needle`.
pub fn processes_with_pid(needle: &str) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse().ok()) else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                out.push((pid, cmd));
            }
        }
    }
    out
}
