//! The syncer: one per physical cluster, beside it (pull mode). It copies every object
//! placed on its cluster (state label `state.sluice.dev/<cluster>`) from the logical
//! clusters down into one namespace per (logical cluster, namespace), and reverts drift.
//!
//! What travels (`sluice_api::synced_kinds`), what an upstream object becomes downstream ([`transform`]),
//! when a downstream object already says what it should ([`drift`]), what travels back up
//! ([`mirror`] for Pods, [`events`] for Events, [`imports`] for what the cluster's MCS
//! imports hold), and the loop that
//! drives them on informers of both sides ([`controller`]).

pub mod connect;
pub mod controller;
pub mod dial;
pub mod drift;
pub mod ephemeral;
pub mod events;
pub mod imports;
pub mod logs;
pub mod metrics;
pub mod mirror;
pub mod ordinals;
pub mod sources;
pub mod transform;
