//! Endpoints and the balancer that picks among them.
//!
//! The set of endpoints is swapped whole on a configuration change (readers clone an
//! `Arc` and never wait for a writer); an endpoint that stays keeps its state (latency
//! estimate, outlier history, open connections) across changes.

pub mod balancer;
pub mod endpoint;
pub mod ewma;
pub mod outcomes;
pub mod outlier;
pub mod p2c;

pub use balancer::{Balancer, SPILL_IN_FLIGHT};
pub use endpoint::{ActiveGuard, Endpoint};
