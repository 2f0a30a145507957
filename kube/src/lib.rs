//! The Kubernetes runtime every Sluice controller shares, and nothing Sluice-specific:
//!
//! - [`client`]: a kube-rs client from a kubeconfig file or the pod's in-cluster config.
//! - [`informer`]: kube-runtime's watcher feeding a reflector store, with a callback per
//!   event, so controllers react to watch events and never poll.
//! - [`scope`] and [`changes`]: what changed since a controller's last round (a set of
//!   keys, or everything after a re-list), coalesced, with one wake-up for many changes.
//! - [`controller`]: the controller runtime — a queue of keys, one reconcile per key
//!   returning an [`controller::Action`], backoff per key, metrics per controller.
//! - [`index`]: an informer's objects indexed by a key other than their name (e.g. the
//!   Service an EndpointSlice belongs to).
//! - [`lease`]: renewing and reading `coordination.k8s.io` Leases (liveness).
//! - [`roots`]: clients for several path prefixes of one server (its logical clusters).
//! - [`resources`]: quantities, and what pods request against what a node or cluster has.
//! - [`selector`]: `metav1.LabelSelector` matching, validated.
//! - [`meta`] and [`time`]: reading labels and annotations; RFC 3339 timestamps as
//!   Kubernetes writes them.
//!
//! The MCS controller, the DNS server, the dataplane's cluster mode, the local clusters'
//! controllers and the syncer build on this crate instead of on each other.

pub mod changes;
pub mod client;
pub mod controller;
pub mod events;
pub mod index;
pub mod informer;
pub mod lease;
pub mod meta;
pub mod pod;
pub mod resources;
pub mod roots;
pub mod scope;
pub mod selector;
pub mod time;
pub mod upgrade;

pub use changes::Changes;
pub use client::ClientError;
pub use controller::{Action, Controller, Queue, Reconciler};
pub use index::Index;
pub use informer::Informer;
pub use roots::Roots;
pub use scope::Scope;
