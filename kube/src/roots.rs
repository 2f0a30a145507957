//! Clients for several API roots of one server: a server that serves many logical
//! clusters under URL prefixes (`/clusters/<path>`) needs a client per prefix to write
//! (a wildcard prefix only lists and watches). Clients are made once per prefix and kept.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::client::{ClientError, build};

/// Clients of one server (one TLS and auth configuration) under different path prefixes.
pub struct Roots {
    /// The server's configuration with its URL cut to the server's root.
    config: kube::Config,
    root: String,
    clients: Mutex<HashMap<String, kube::Client>>,
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
            clients: Mutex::new(HashMap::new()),
        }
    }

    /// The client whose requests go to `<root><prefix>/...`.
    pub fn at(&self, prefix: &str) -> Result<kube::Client, ClientError> {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = clients.get(prefix) {
            return Ok(c.clone());
        }
        let url = format!("{}{prefix}", self.root);
        let mut config = self.config.clone();
        config.cluster_url = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| ClientError::Url(url.clone(), e.to_string()))?;
        let client = build(config)?;
        clients.insert(prefix.to_string(), client.clone());
        Ok(client)
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
}
