//! How much one request, watch, token or connection may ask of the server.

/// Request limits.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest accepted request body (kube-apiserver: 3 MiB).
    pub max_body: usize,
    /// Longest watch when the client does not ask for less.
    pub max_watch_seconds: u64,
    /// Interval of watch bookmarks.
    pub bookmark_seconds: u64,
    /// Shortest ServiceAccount token a TokenRequest may ask for (kube-apiserver: 10 min).
    pub min_token_seconds: i64,
    /// Longest one; longer requests are shortened, with a warning.
    pub max_token_seconds: i64,
    /// How long a client may take to send a request's head, and to send anything at all
    /// on a new connection (kube-apiserver's `ReadHeaderTimeout`: 32 s); an idle HTTP/1.1
    /// connection is closed after it too.
    pub header_read_timeout: std::time::Duration,
    /// Most connections served at once; more wait in the listen queue.
    pub max_connections: usize,
    /// Most requests one HTTP/2 connection may have open at once (kube-apiserver: 250).
    pub max_streams_per_connection: u32,
    /// How tenants' requests share the server.
    pub fairness: crate::fairness::FairnessLimits,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body: 3 * 1024 * 1024,
            max_watch_seconds: 1800,
            bookmark_seconds: 10,
            min_token_seconds: 600,
            max_token_seconds: 48 * 3600,
            header_read_timeout: std::time::Duration::from_secs(32),
            max_connections: 4096,
            max_streams_per_connection: 250,
            fairness: Default::default(),
        }
    }
}
