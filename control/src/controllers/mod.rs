//! Controllers built into the API server.

pub mod crd_catalog;
pub mod gc;
pub mod rbac_policy;
pub mod termination;
