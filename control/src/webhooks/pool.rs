//! Connections to admission webhooks kept open between calls (kube keeps its own per
//! webhook): a TLS handshake — two through a syncer — costs more than the call itself. A
//! connection is kept per route: where it goes (a URL's authority; a Service of one logical
//! cluster through one physical cluster; an endpoint), the name its certificate proved and
//! the CA bundle that proved it, so no call reuses a connection another's trust set up.

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;
use http_body_util::Full;

/// One open HTTP/1.1 connection to a webhook.
pub type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// Idle connections kept per route, and routes kept at most.
const MAX_IDLE_PER_ROUTE: usize = 16;
const MAX_ROUTES: usize = 4096;

/// The idle connections by route.
#[derive(Default)]
pub struct Pool {
    idle: Mutex<HashMap<String, Vec<Sender>>>,
}

impl Pool {
    /// The key of a route: `to` (where the connection goes), the name proved, the trust.
    pub fn key(to: &str, server_name: &str, ca_bundle: &[u8]) -> String {
        let digest = ring::digest::digest(&ring::digest::SHA256, ca_bundle);
        let trust: String = digest.as_ref()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("{to}|{server_name}|{trust}")
    }

    /// An open idle connection of `key`, if any.
    pub fn take(&self, key: &str) -> Option<Sender> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let list = idle.get_mut(key)?;
        while let Some(s) = list.pop() {
            if !s.is_closed() {
                return Some(s);
            }
        }
        idle.remove(key);
        None
    }

    /// Keep `sender` for the next call of `key` (unless it closed or the pool is full).
    pub fn put(&self, key: String, sender: Sender) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() >= MAX_ROUTES && !idle.contains_key(&key) {
            idle.retain(|_, list| {
                list.retain(|s| !s.is_closed());
                !list.is_empty()
            });
            if idle.len() >= MAX_ROUTES {
                return;
            }
        }
        let list = idle.entry(key).or_default();
        if list.len() < MAX_IDLE_PER_ROUTE {
            list.push(sender);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_is_its_destination_name_and_trust() {
        let a = Pool::key("url:127.0.0.1:1", "127.0.0.1", b"ca one");
        assert_ne!(a, Pool::key("url:127.0.0.1:1", "127.0.0.1", b"ca two"));
        assert_ne!(a, Pool::key("url:127.0.0.1:2", "127.0.0.1", b"ca one"));
        assert_eq!(a, Pool::key("url:127.0.0.1:1", "127.0.0.1", b"ca one"));
        assert!(Pool::default().take(&a).is_none());
    }
}
