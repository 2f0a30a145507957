//! Controllers built into the API server.

pub mod gc;
pub mod termination;
