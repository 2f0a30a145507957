//! A real etcd (Debian's `etcd-server`) on loopback for the tests: one member per test
//! process, shared by every control plane the process starts, each under its own key
//! prefix. `SLUICE_TEST_STORE=etcd` makes the API suites' control planes use it instead
//! of the embedded store.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Whether this test process runs its control planes on etcd.
pub fn enabled() -> bool {
    std::env::var("SLUICE_TEST_STORE").is_ok_and(|v| v == "etcd")
}

/// A running etcd member.
pub struct Etcd {
    /// Its client URL.
    pub url: String,
    pub peer_url: String,
    pub dir: PathBuf,
    pub name: String,
    /// The shell that runs etcd and stops it with this process.
    supervisor: std::sync::Mutex<std::process::Child>,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill9();
        if let Ok(mut c) = self.supervisor.lock() {
            let _ = c.wait();
        }
    }
}

/// What etcd logs when a port it was given is taken.
const PORT_TAKEN: &str = "address already in use";

/// A free loopback port (bound and released: the member binds it right after).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl Etcd {
    /// Start a member of `cluster` (`name=peerURL,...`, or just this one when `None`),
    /// in `dir`, on `client`/`peer` ports; stopped when this test process ends.
    pub fn start_member(
        name: &str,
        dir: &Path,
        client: u16,
        peer: u16,
        cluster: Option<&str>,
    ) -> Etcd {
        let url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let initial = cluster.map_or_else(|| format!("{name}={peer_url}"), str::to_string);
        std::fs::create_dir_all(dir).expect("etcd dir");
        let log = std::fs::File::create(dir.join("etcd.log")).expect("etcd log");
        // A shell watches this process and stops etcd when it ends, however it ends.
        let script = format!(
            "etcd --name {name} --data-dir {data} --listen-client-urls {url} \
             --advertise-client-urls {url} --listen-peer-urls {peer_url} \
             --initial-advertise-peer-urls {peer_url} --initial-cluster {initial} \
             --initial-cluster-state new --initial-cluster-token sluice-test \
             --quota-backend-bytes 2147483648 & pid=$!; echo $pid > {pidfile}; \
             while kill -0 {parent} 2>/dev/null && kill -0 $pid 2>/dev/null; do sleep 1; done; \
             kill -9 $pid 2>/dev/null",
            data = dir.join("data").display(),
            pidfile = dir.join("etcd.pid").display(),
            parent = std::process::id(),
        );
        let supervisor = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start etcd (Debian package etcd-server)");
        Etcd {
            url,
            peer_url,
            dir: dir.to_path_buf(),
            name: name.to_string(),
            supervisor: std::sync::Mutex::new(supervisor),
        }
    }

    /// Wait until the member answers `/health` with a leader.
    pub fn wait_healthy(&self, within: Duration) {
        if let Err(e) = self.healthy_within(within) {
            panic!("{e}");
        }
    }

    /// [`Etcd::wait_healthy`] that says why not, at once when etcd could not bind its ports
    /// (another process took one between [`free_port`] and etcd's bind).
    pub fn healthy_within(&self, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        let addr = self.url.trim_start_matches("http://").to_string();
        loop {
            let resp = get(&addr, "/health");
            if resp
                .as_deref()
                .is_some_and(|r| r.contains("\"health\":\"true\""))
            {
                return Ok(());
            }
            let log = std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default();
            if Instant::now() >= deadline || log.contains(PORT_TAKEN) {
                return Err(format!("etcd at {} not healthy: {resp:?}\n{log}", self.url));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGKILL the member.
    pub fn kill9(&self) {
        if let Ok(pid) = std::fs::read_to_string(self.dir.join("etcd.pid")) {
            let _ = Command::new("kill")
                .args(["-9", pid.trim()])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// A plain HTTP/1.1 GET with std sockets (callers may not be in a runtime).
fn get(addr: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

/// The test process's shared member, started on first use.
pub fn shared() -> &'static Etcd {
    static SHARED: OnceLock<Etcd> = OnceLock::new();
    SHARED.get_or_init(|| {
        // A port released by `free_port` may be taken by another process before etcd binds
        // it: then a new pair is tried.
        let mut last = String::new();
        for attempt in 0..5 {
            let dir = std::env::temp_dir()
                .join(format!("sluice-test-etcd-{}-{attempt}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            let etcd = Etcd::start_member("default", &dir, free_port(), free_port(), None);
            match etcd.healthy_within(Duration::from_secs(60)) {
                Ok(()) => return etcd,
                Err(e) if e.contains(PORT_TAKEN) => last = e,
                Err(e) => panic!("{e}"),
            }
        }
        panic!("etcd found no free ports in 5 tries: {last}")
    })
}

/// The key prefix of the control plane whose data directory is `data_dir`: stable across
/// its restarts, distinct from every other's.
pub fn prefix_for(data_dir: &Path) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    data_dir.hash(&mut h);
    format!("/sluice-test/{}-{:016x}/", std::process::id(), h.finish())
}
