//! The containers running on this node, by namespace, pod and container name: what the
//! streaming endpoint needs to run a command beside one (its process, whose environment,
//! working directory and mount namespace the command joins), to attach to one (its output
//! as its log receives it, its stdin, its terminal) or to forward a port to its Pod (the
//! Pod's address).

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::io::AsyncWriteExt;

use crate::node::terminal::{Size, Terminal};

/// A writer of a container's stdin: a pipe, or its terminal's primary side.
pub type Stdin = Box<dyn tokio::io::AsyncWrite + Unpin + Send>;

/// What `attach` reaches of a running container: the log file its output goes to (all of
/// it, stdout and stderr, as a terminal's output is), its stdin when it was started with
/// `stdin: true`, and its terminal when started with `tty: true`.
pub struct Attachable {
    /// The file the container's output is appended to while it runs.
    pub log: PathBuf,
    /// Whether the container runs on a terminal.
    pub tty: bool,
    /// `stdinOnce`: the first attached client that closes stdin closes the container's.
    stdin_once: bool,
    /// `None` when the container has no stdin, or it was closed.
    stdin: tokio::sync::Mutex<Option<Stdin>>,
    terminal: Option<Terminal>,
}

impl std::fmt::Debug for Attachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attachable")
            .field("log", &self.log)
            .field("tty", &self.tty)
            .field("stdin_once", &self.stdin_once)
            .finish_non_exhaustive()
    }
}

impl Attachable {
    pub fn new(
        log: PathBuf,
        stdin: Option<Stdin>,
        stdin_once: bool,
        terminal: Option<Terminal>,
    ) -> Attachable {
        Attachable {
            log,
            tty: terminal.is_some(),
            stdin_once,
            stdin: tokio::sync::Mutex::new(stdin),
            terminal,
        }
    }

    /// Whether the container has a stdin to write to.
    pub async fn has_stdin(&self) -> bool {
        self.stdin.lock().await.is_some()
    }

    /// Write `data` to the container's stdin; false when it has none (or it closed).
    pub async fn write_stdin(&self, data: &[u8]) -> bool {
        let mut stdin = self.stdin.lock().await;
        let Some(w) = stdin.as_mut() else {
            return false;
        };
        if w.write_all(data).await.is_err() || w.flush().await.is_err() {
            *stdin = None;
            return false;
        }
        true
    }

    /// An attached client is done with stdin: the container's closes if it is `stdinOnce`
    /// (its process reads end-of-file), and stays open for the next client otherwise.
    pub async fn client_closed_stdin(&self) {
        if self.stdin_once {
            let mut stdin = self.stdin.lock().await;
            if let Some(mut w) = stdin.take() {
                let _ = w.shutdown().await;
            }
        }
    }

    /// Resize the container's terminal, if it has one.
    pub fn resize(&self, size: &Size) -> std::io::Result<()> {
        match &self.terminal {
            Some(t) => t.resize(size),
            None => Ok(()),
        }
    }
}

/// One Pod.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
}

/// One container of one Pod.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ContainerRef {
    pub namespace: String,
    pub pod: String,
    pub container: String,
}

/// The running containers' processes and their Pods' addresses.
#[derive(Debug, Default)]
pub struct Running {
    pids: Mutex<HashMap<ContainerRef, Entry>>,
}

/// One running container's process, Pod address and attachable parts.
#[derive(Debug, Clone)]
struct Entry {
    pid: u32,
    ip: Ipv4Addr,
    attachable: Arc<Attachable>,
}

impl Running {
    /// Record that `container` runs as process `pid` in a Pod at `ip`, attachable as
    /// `attachable`, until the guard is dropped.
    pub fn register(
        self: &Arc<Self>,
        container: ContainerRef,
        pid: u32,
        ip: Ipv4Addr,
        attachable: Attachable,
    ) -> Registered {
        let entry = Entry {
            pid,
            ip,
            attachable: Arc::new(attachable),
        };
        self.lock().insert(container.clone(), entry);
        Registered {
            running: self.clone(),
            container,
            pid,
        }
    }

    /// The process of `container`, if it runs.
    pub fn pid(&self, container: &ContainerRef) -> Option<u32> {
        self.lock().get(container).map(|e| e.pid)
    }

    /// The process of `container` and what attaches to it, if it runs.
    pub fn attachable(&self, container: &ContainerRef) -> Option<(u32, Arc<Attachable>)> {
        self.lock()
            .get(container)
            .map(|e| (e.pid, e.attachable.clone()))
    }

    /// Every running container and its process.
    pub fn containers(&self) -> Vec<(ContainerRef, u32)> {
        self.lock()
            .iter()
            .map(|(c, e)| (c.clone(), e.pid))
            .collect()
    }

    /// The address of `pod`, if any container of it runs.
    pub fn address(&self, pod: &PodRef) -> Option<Ipv4Addr> {
        self.lock()
            .iter()
            .find(|(c, _)| c.namespace == pod.namespace && c.pod == pod.name)
            .map(|(_, e)| e.ip)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ContainerRef, Entry>> {
        self.pids.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A container's entry in [`Running`]; removed on drop (unless a restart replaced it).
#[derive(Debug)]
pub struct Registered {
    running: Arc<Running>,
    container: ContainerRef,
    pid: u32,
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut pids = self.running.lock();
        if pids.get(&self.container).map(|e| e.pid) == Some(self.pid) {
            pids.remove(&self.container);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn main_of(pod: &str) -> ContainerRef {
        ContainerRef {
            namespace: "default".into(),
            pod: pod.into(),
            container: "main".into(),
        }
    }

    #[test]
    fn an_entry_lives_as_long_as_its_guard_and_a_restart_keeps_the_new_one() {
        let running = Arc::new(Running::default());
        let ip = Ipv4Addr::new(127, 10, 0, 2);
        let log = || Attachable::new(PathBuf::from("/dev/null"), None, false, None);
        let first = running.register(main_of("a"), 10, ip, log());
        assert_eq!(running.pid(&main_of("a")), Some(10));
        assert_eq!(running.pid(&main_of("b")), None);
        let pod = |name: &str| PodRef {
            namespace: "default".into(),
            name: name.into(),
        };
        assert_eq!(running.address(&pod("a")), Some(ip));
        assert_eq!(running.address(&pod("b")), None);
        let second = running.register(main_of("a"), 11, ip, log());
        drop(first);
        assert_eq!(running.pid(&main_of("a")), Some(11));
        drop(second);
        assert_eq!(running.pid(&main_of("a")), None);
    }
}
