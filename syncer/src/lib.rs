//! The syncer: one per physical cluster, beside it (pull mode). It copies every object
//! placed on its cluster (state label `state.sluice.dev/<cluster>`) from the logical
//! clusters down into one namespace per (logical cluster, namespace), and reverts drift.
//!
//! Built so far: what travels ([`kinds`]), what an upstream object becomes downstream
//! ([`transform`]), and when a downstream object already says what it should ([`drift`]).
//! The watch loop that drives them is not written yet.

pub mod drift;
pub mod kinds;
pub mod transform;
