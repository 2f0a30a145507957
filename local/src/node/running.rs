//! The containers running on this node, by namespace, pod and container name: what the
//! streaming endpoint needs to run a command beside one (its process, whose environment,
//! working directory and mount namespace the command joins).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// One container of one Pod.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ContainerRef {
    pub namespace: String,
    pub pod: String,
    pub container: String,
}

/// The running containers' processes.
#[derive(Debug, Default)]
pub struct Running {
    pids: Mutex<HashMap<ContainerRef, u32>>,
}

impl Running {
    /// Record that `container` runs as process `pid` until the guard is dropped.
    pub fn register(self: &Arc<Self>, container: ContainerRef, pid: u32) -> Registered {
        self.lock().insert(container.clone(), pid);
        Registered {
            running: self.clone(),
            container,
            pid,
        }
    }

    /// The process of `container`, if it runs.
    pub fn pid(&self, container: &ContainerRef) -> Option<u32> {
        self.lock().get(container).copied()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ContainerRef, u32>> {
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
        if pids.get(&self.container) == Some(&self.pid) {
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
        let first = running.register(main_of("a"), 10);
        assert_eq!(running.pid(&main_of("a")), Some(10));
        assert_eq!(running.pid(&main_of("b")), None);
        let second = running.register(main_of("a"), 11);
        drop(first);
        assert_eq!(running.pid(&main_of("a")), Some(11));
        drop(second);
        assert_eq!(running.pid(&main_of("a")), None);
    }
}
