//! Request body encodings besides JSON: the Kubernetes protobuf envelope, which kubectl's
//! typed clients send (`kubectl create namespace|configmap|deployment ...`).

pub mod protobuf;
#[rustfmt::skip]
mod proto_table;

/// The protobuf content type of Kubernetes.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
