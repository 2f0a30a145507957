//! The containers running on this node, by namespace, pod and container name: what the
//! streaming endpoint needs to run a command beside one (its process, whose environment,
//! working directory and mount namespace the command joins) or to forward a port to its
//! Pod (the Pod's address).

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

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
    pids: Mutex<HashMap<ContainerRef, (u32, Ipv4Addr)>>,
}

impl Running {
    /// Record that `container` runs as process `pid` in a Pod at `ip` until the guard is
    /// dropped.
    pub fn register(
        self: &Arc<Self>,
        container: ContainerRef,
        pid: u32,
        ip: Ipv4Addr,
    ) -> Registered {
        self.lock().insert(container.clone(), (pid, ip));
        Registered {
            running: self.clone(),
            container,
            pid,
        }
    }

    /// The process of `container`, if it runs.
    pub fn pid(&self, container: &ContainerRef) -> Option<u32> {
        self.lock().get(container).map(|(pid, _)| *pid)
    }

    /// The address of `pod`, if any container of it runs.
    pub fn address(&self, pod: &PodRef) -> Option<Ipv4Addr> {
        self.lock()
            .iter()
            .find(|(c, _)| c.namespace == pod.namespace && c.pod == pod.name)
            .map(|(_, (_, ip))| *ip)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ContainerRef, (u32, Ipv4Addr)>> {
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
        if pids.get(&self.container).map(|(pid, _)| *pid) == Some(self.pid) {
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
        let first = running.register(main_of("a"), 10, ip);
        assert_eq!(running.pid(&main_of("a")), Some(10));
        assert_eq!(running.pid(&main_of("b")), None);
        let pod = |name: &str| PodRef {
            namespace: "default".into(),
            name: name.into(),
        };
        assert_eq!(running.address(&pod("a")), Some(ip));
        assert_eq!(running.address(&pod("b")), None);
        let second = running.register(main_of("a"), 11, ip);
        drop(first);
        assert_eq!(running.pid(&main_of("a")), Some(11));
        drop(second);
        assert_eq!(running.pid(&main_of("a")), None);
    }
}
