//! The claim mover: how a volume's data follows a move from one cluster to another.
//!
//! A mover on the source cluster mounts the claim (read-only) and [`serve`]s it: the
//! volume's [`manifest`] (every path with its SHA-256) and its files, over HTTP/1.1 on one
//! port. A mover on the target cluster mounts the new claim and [`pull`]s: it fetches what
//! differs, resumes an interrupted fetch, checks every file against its checksum, and in
//! the final pass compares the whole volume with the source's manifest before it reports
//! success. Between clusters the connection runs through the clusterset's dataplane (the
//! source's Service is exported like any other, so the bytes cross in the gateways' mTLS
//! tunnel), never through the control plane. The syncers start the movers and placement
//! orders the passes (docs/stateful.md).

pub mod error;
pub mod manifest;
pub mod pull;
pub mod serve;

pub use error::MoverError;
pub use manifest::{Manifest, walk};
pub use pull::{Pass, Pulled, pull};
pub use serve::serve;
