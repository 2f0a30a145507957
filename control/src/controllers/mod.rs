//! Controllers built into the API server.

pub mod termination;
