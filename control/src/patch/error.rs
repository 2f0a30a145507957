//! Why a patch failed: the one error every patch format returns.

/// A patch's failure, mapped to kube's status codes in `errors.rs`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PatchError {
    /// The patch document itself is malformed.
    #[error("{0}")]
    Malformed(String),
    /// The patch is well formed but cannot be applied to this object.
    #[error("{0}")]
    Apply(String),
    /// The patch asks for more work than a request may (kube's 413).
    #[error("{0}")]
    TooLarge(String),
}
