//! The `sluice` binary's end-to-end tests, as one test binary: a module per suite. One
//! binary compiles and links the workspace's test dependencies once for all of them (28
//! binaries took 10.5 minutes of a fresh build). `dev up` clusters run one at a time
//! (`support::DevUp` holds the clusterset until it is dropped); a suite is run alone with
//! its module as the filter: `cargo test --release -p sluice --test end_to_end placement::`.

#![allow(clippy::unwrap_used)]

mod support;

mod admission_policies;
mod api_gaps;
mod audit;
mod cel;
mod charts;
mod console;
mod debug;
mod demo;
mod durability;
mod failures;
mod ingress;
mod kubectl;
mod kubectl_compat;
mod kubectl_semantics;
mod layers;
mod local_cluster;
mod mcs;
mod mcs_conformance;
mod on_etcd;
mod placement;
mod python_client;
mod rbac;
mod real_world;
mod replicas;
mod single_cluster;
mod stateful;
mod tenancy;
mod webhooks;
