//! What the test suites of several crates share, so that no suite carries a copy: polling
//! with deadlines ([`poll`]), kube-rs clients from a kubeconfig ([`client`]), raw HTTP
//! over sockets ([`http`]), a real etcd on loopback ([`etcd`]), latency percentiles for
//! the benchmarks ([`stats`]), and the module import graph the layering tests check
//! ([`layers`]). It depends on no Sluice server crate, so any crate may use it without
//! pulling one into its dependency tree.

pub mod client;
pub mod etcd;
pub mod http;
pub mod layers;
pub mod poll;
pub mod stats;
