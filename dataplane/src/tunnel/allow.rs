//! The gateway's allowlist: endpoints of exported services.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

/// Endpoints the gateway may forward to, counted by how many exported listeners name each
/// (the same endpoint can back a ClusterIP and a clusterset VIP), so that a change to one
/// service adjusts only its own endpoints.
#[derive(Clone, Default)]
pub struct Allowlist(Arc<RwLock<HashMap<SocketAddr, u32>>>);

impl Allowlist {
    /// Replace the whole list.
    pub fn set(&self, addrs: impl IntoIterator<Item = SocketAddr>) {
        let mut counts = HashMap::new();
        for a in addrs {
            *counts.entry(a).or_insert(0) += 1;
        }
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = counts;
    }

    /// Count `added` in and `removed` out (each once per listener naming it).
    pub fn adjust(
        &self,
        removed: impl IntoIterator<Item = SocketAddr>,
        added: impl IntoIterator<Item = SocketAddr>,
    ) {
        let mut w = self.0.write().unwrap_or_else(|p| p.into_inner());
        for a in added {
            *w.entry(a).or_insert(0) += 1;
        }
        for a in removed {
            if let Some(n) = w.get_mut(&a) {
                *n -= 1;
                if *n == 0 {
                    w.remove(&a);
                }
            }
        }
    }

    pub fn contains(&self, addr: &SocketAddr) -> bool {
        self.0
            .read()
            .map(|s| s.contains_key(addr))
            .unwrap_or_else(|p| p.into_inner().contains_key(addr))
    }
}
