//! Encodings besides JSON: the Kubernetes protobuf envelope, which kubectl's typed
//! clients send (`kubectl create namespace|configmap|deployment ...`), and protobuf's wire
//! format for what Sluice writes in protobuf (the OpenAPI v2 document).

pub mod protobuf;
#[rustfmt::skip]
mod proto_table;
pub mod wire;

/// The protobuf content type of Kubernetes.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
