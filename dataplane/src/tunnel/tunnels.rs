//! The proxy's tunnels as configured: its gateway and its peers, reloaded in place.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use super::allow::Allowlist;
use super::error::TunnelError;
use super::gateway;
use super::identity::{Identity, IdentityError, TrustBundle};
use super::pool;
use crate::config::{PeerConfig, TunnelConfig};
use crate::metrics::TunnelMetrics;

/// The loaded identity and trust bundle, and the files they came from: paths with size
/// and modification time, so a reload (in cluster mode, every endpoint change) costs a
/// `stat` per file, and only rotated files are read again.
struct Loaded {
    files: Vec<FileStamp>,
    identity: Identity,
    bundle: TrustBundle,
}

#[derive(PartialEq)]
struct FileStamp {
    path: String,
    len: u64,
    modified: Option<std::time::SystemTime>,
}

fn tls_files(c: &TunnelConfig) -> impl Iterator<Item = &String> {
    [&c.cert, &c.key].into_iter().chain(c.trust_bundle.iter())
}

fn stamps(c: &TunnelConfig) -> Result<Vec<FileStamp>, IdentityError> {
    tls_files(c)
        .map(|p| {
            let m = std::fs::metadata(p).map_err(|e| IdentityError::Read(p.clone(), e))?;
            Ok(FileStamp {
                path: p.clone(),
                len: m.len(),
                modified: m.modified().ok(),
            })
        })
        .collect()
}

fn load(c: &TunnelConfig) -> Result<(Identity, TrustBundle), IdentityError> {
    Ok((
        Identity::from_files(&c.cert, &c.key)?,
        TrustBundle::from_files(&c.trust_bundle)?,
    ))
}

#[derive(Default)]
struct State {
    loaded: Option<Loaded>,
    peers: HashMap<String, (PeerConfig, Arc<pool::Peer>)>,
    gateway: Option<gateway::Gateway>,
}

/// The proxy's tunnels: the gateway and the peers. A reload changes only what changed:
/// new certificate files reload the gateway's TLS in place (same sockets) and renew every
/// peer; a peer whose entry is unchanged keeps its connections.
#[derive(Default)]
pub struct Tunnels {
    pub metrics: TunnelMetrics,
    pub allow: Allowlist,
    state: Mutex<State>,
}

impl Tunnels {
    /// Returns whether the set of peer handles changed (balancers holding peers must
    /// then be updated even where their endpoints did not change).
    pub fn apply(&self, config: Option<&TunnelConfig>) -> Result<bool, TunnelError> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let Some(config) = config else {
            if let Some(g) = state.gateway.take() {
                g.stop();
            }
            let had_peers = !state.peers.is_empty();
            *state = State::default();
            return Ok(had_peers);
        };
        let files = stamps(config)?;
        let (identity, bundle, same_identity) = match &state.loaded {
            Some(l) if l.files == files => (l.identity.clone(), l.bundle.clone(), true),
            _ => {
                let (identity, bundle) = load(config)?;
                (identity, bundle, false)
            }
        };
        // Build everything new before changing anything, so an error leaves the old.
        let mut peers = HashMap::new();
        let mut replaced = state.peers.len() != config.peers.len();
        for p in &config.peers {
            let kept = state
                .peers
                .get(&p.cluster)
                .filter(|(old, _)| same_identity && old == p)
                .map(|(_, peer)| peer.clone());
            let peer = match kept {
                Some(peer) => peer,
                None => {
                    replaced = true;
                    pool::Peer::new(p, &identity, &bundle, self.metrics.clone())?
                }
            };
            peers.insert(p.cluster.clone(), (p.clone(), peer));
        }
        match (config.gateway, state.gateway.as_ref()) {
            (None, _) => {
                if let Some(g) = state.gateway.take() {
                    g.stop();
                }
            }
            (Some(listen), Some(g)) if g.listen == listen => {
                if !same_identity {
                    g.reload(&identity, &bundle)?;
                }
            }
            (Some(listen), _) => {
                let fresh = gateway::Gateway::start(
                    listen,
                    &identity,
                    &bundle,
                    self.allow.clone(),
                    self.metrics.clone(),
                )?;
                if let Some(old) = state.gateway.replace(fresh) {
                    old.stop();
                }
            }
        }
        state.peers = peers;
        state.loaded = Some(Loaded {
            files,
            identity,
            bundle,
        });
        Ok(replaced)
    }

    pub fn peer(&self, cluster: &str) -> Option<Arc<pool::Peer>> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.peers.get(cluster).map(|(_, p)| p.clone())
    }

    /// Where the gateway listens (TCP and UDP), once bound.
    pub fn gateway_addr(&self) -> Option<SocketAddr> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.gateway.as_ref().map(|g| g.addr)
    }

    /// Peers and whether each answers, for `/config_dump`.
    pub fn dump(&self) -> serde_json::Value {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let peers: Vec<serde_json::Value> = state
            .peers
            .values()
            .map(|(_, p)| {
                serde_json::json!({
                    "cluster": p.cluster, "address": p.address, "transport": p.transport,
                    "up": p.is_up(), "connections": p.connections(),
                })
            })
            .collect();
        serde_json::json!({
            "identity": state.loaded.as_ref().map(|l| l.identity.id.to_string()),
            "trustRoots": state.loaded.as_ref().map(|l| l.bundle.len()),
            "gateway": state.gateway.as_ref().map(|g| g.addr),
            "peers": peers,
        })
    }
}
