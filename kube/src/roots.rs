//! Clients for several API roots of one server: a server that serves many logical
//! clusters under URL prefixes (`/clusters/<path>`) needs a client per prefix to write
//! (a wildcard prefix only lists and watches). The clients share one transport (connection
//! pool, TLS, authentication), but each still costs its request queue (about 10 KiB), and a
//! controller may visit every logical cluster of a large server: the most recently made
//! clients are kept, a bounded number, and [`Roots::lazy`] makes one only when it is used.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, OnceLock};

use crate::client::{ClientError, Transport, at_base, transport};

/// Clients of one server (one TLS and auth configuration) under different path prefixes.
pub struct Roots {
    /// The server's configuration with its URL cut to the server's root.
    config: kube::Config,
    root: String,
    clients: Mutex<Clients>,
}

#[derive(Default)]
struct Clients {
    /// Made with the first client.
    transport: Option<Transport>,
    by_prefix: HashMap<String, kube::Client>,
    /// Prefixes in the order their clients were made, oldest first.
    made: VecDeque<String>,
}

/// How many clients are kept.
const KEPT: usize = 128;

/// The client of one prefix, made on first use.
pub struct LazyClient {
    transport: Transport,
    url: http::Uri,
    default_namespace: String,
    made: OnceLock<kube::Client>,
}

impl LazyClient {
    pub fn get(&self) -> &kube::Client {
        self.made.get_or_init(|| {
            at_base(
                self.transport.clone(),
                self.url.clone(),
                self.default_namespace.clone(),
            )
        })
    }
}

impl Roots {
    /// Clients for the server `config` points at; whatever path its URL has from the first
    /// `cut` on (e.g. `/clusters/`) is dropped, so any prefix may be addressed.
    pub fn new(config: kube::Config, cut: &str) -> Self {
        let url = config.cluster_url.to_string();
        let root = url
            .split(cut)
            .next()
            .unwrap_or(&url)
            .trim_end_matches('/')
            .to_string();
        Self {
            config,
            root,
            clients: Mutex::new(Clients::default()),
        }
    }

    /// The client whose requests go to `<root><prefix>/...`.
    pub fn at(&self, prefix: &str) -> Result<kube::Client, ClientError> {
        if let Some(c) = self.lock().by_prefix.get(prefix) {
            return Ok(c.clone());
        }
        let client = self.lazy(prefix)?.get().clone();
        let mut clients = self.lock();
        if clients.made.len() >= KEPT
            && let Some(oldest) = clients.made.pop_front()
        {
            clients.by_prefix.remove(&oldest);
        }
        if clients
            .by_prefix
            .insert(prefix.to_string(), client.clone())
            .is_none()
        {
            clients.made.push_back(prefix.to_string());
        }
        Ok(client)
    }

    /// [`Roots::at`] made only when first used, and not kept here.
    pub fn lazy(&self, prefix: &str) -> Result<LazyClient, ClientError> {
        let url = format!("{}{prefix}", self.root);
        let url = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| ClientError::Url(url.clone(), e.to_string()))?;
        let transport = {
            let mut clients = self.lock();
            match &clients.transport {
                Some(t) => t.clone(),
                None => {
                    let t = transport(&self.config)?;
                    clients.transport = Some(t.clone());
                    t
                }
            }
        };
        Ok(LazyClient {
            transport,
            url,
            default_namespace: self.config.default_namespace.clone(),
            made: OnceLock::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Clients> {
        self.clients.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_replace_the_path_of_the_configured_url() {
        let config = kube::Config::new("https://127.0.0.1:6443/clusters/root".parse().unwrap());
        let roots = Roots::new(config, "/clusters/");
        assert_eq!(roots.root, "https://127.0.0.1:6443");
    }

    #[tokio::test]
    async fn a_bounded_number_of_clients_is_kept() {
        let config = kube::Config::new("http://127.0.0.1:1/clusters/root".parse().unwrap());
        let roots = Roots::new(config, "/clusters/");
        for i in 0..KEPT + 10 {
            roots.at(&format!("/clusters/root:t{i}")).unwrap();
        }
        roots.at("/clusters/root:t0").unwrap();
        let clients = roots.lock();
        assert_eq!(clients.by_prefix.len(), KEPT);
        assert_eq!(clients.made.len(), KEPT);
        assert!(clients.by_prefix.contains_key("/clusters/root:t0"));
        assert!(!clients.by_prefix.contains_key("/clusters/root:t10"));
        assert!(clients.by_prefix.contains_key("/clusters/root:t11"));
    }

    #[tokio::test]
    async fn a_lazy_client_is_made_on_first_use_only() {
        let config = kube::Config::new("http://127.0.0.1:1/clusters/root".parse().unwrap());
        let roots = Roots::new(config, "/clusters/");
        let lazy = roots.lazy("/clusters/root:a").unwrap();
        assert!(lazy.made.get().is_none());
        lazy.get();
        assert!(lazy.made.get().is_some());
        assert!(roots.lock().by_prefix.is_empty());
        assert!(roots.lazy("/clusters/bad path").is_err());
    }
}
