//! The part of the `sluice` binary that has unit tests of its own: the demo (its traffic
//! record, report and plot). A library so that `cargo test` compiles the binary once:
//! the binary's own test harness would be a second full compile of every part.

pub mod demo;
