//! etcd's v3 API (`etcdserverpb`, `mvccpb`, `authpb`) as prost messages and tonic clients,
//! generated from etcd's protos by `control/etcd-codegen` and committed, so that building
//! Sluice needs no `protoc`. Do not edit by hand: regenerate (see its README).

#[rustfmt::skip]
#[allow(dead_code, clippy::all, clippy::pedantic, rustdoc::all)]
pub mod authpb;
#[rustfmt::skip]
#[allow(dead_code, clippy::all, clippy::pedantic, rustdoc::all)]
pub mod etcdserverpb;
#[rustfmt::skip]
#[allow(dead_code, clippy::all, clippy::pedantic, rustdoc::all)]
pub mod mvccpb;
