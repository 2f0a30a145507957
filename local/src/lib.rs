//! The local clusterset: physical clusters made of Sluice's API server in single-cluster
//! mode plus a node agent that runs Pods as local processes, the controllers a cluster
//! needs (ReplicaSet, Deployment, EndpointSlice), the built-in test images, and
//! `sluice dev up`.

pub mod controllers;
pub mod devup;
pub mod echo;
pub mod grpc_stream;
pub mod loadgen;
pub mod node;
pub mod pod_state;
pub mod resolve;
