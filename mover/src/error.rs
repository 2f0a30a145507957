//! Why a copy failed, once, for the log and the exit status.

use std::path::Path;

/// A failed step of serving or pulling a volume.
#[derive(Debug, thiserror::Error)]
pub enum MoverError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A path that is absolute, climbs out of the volume or is not encoded right.
    #[error("refused path {0:?}: a volume's paths are relative and stay inside it")]
    UnsafePath(String),
    /// The manifest lists a path whose directory it does not list.
    #[error("the manifest lists {0} without its directory")]
    Orphan(String),
    #[error("cannot reach the source {addr}: {source}")]
    Connect {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the source answered {status} for {what}")]
    Status { status: u16, what: String },
    #[error("talking to the source: {0}")]
    Http(String),
    #[error("the manifest the source sent is not valid: {0}")]
    Manifest(String),
    /// What arrived is not what the manifest promised (the file changed while being sent,
    /// or was damaged on the way): fetched again on the next try.
    #[error(
        "{path}: received {got_size} bytes with SHA-256 {got}, the manifest says {want_size} with {want}"
    )]
    Checksum {
        path: String,
        got: String,
        got_size: u64,
        want: String,
        want_size: u64,
    },
}

impl MoverError {
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.display().to_string(),
            source,
        }
    }
}
