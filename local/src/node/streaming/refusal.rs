//! Why the streaming endpoint refuses a request, in kube's words where kubelet has them;
//! the API server passes the words on to the client.

use http::StatusCode;

/// A request the endpoint refuses, with kube's wording where kubelet has one.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("{0} is required")]
    Missing(&'static str),
    #[error("you must specify at least 1 of stdin, stdout, stderr")]
    NoStreams,
    #[error("the command is too long: at most {args} arguments of {bytes} bytes")]
    TooLong { args: usize, bytes: usize },
    #[error(
        "unable to upgrade connection: exec and attach are served over WebSocket only (kubectl 1.30 or later, or a client that offers {0:?}), not SPDY"
    )]
    NotWebSocket(&'static [&'static str]),
    #[error("unable to upgrade connection: none of the protocols {0:?} was offered")]
    Protocol(&'static [&'static str]),
    #[error("container not found ({0:?})")]
    NotRunning(String),
    #[error("pod {0} has no running container on this node")]
    PodNotRunning(String),
    #[error("query parameter \"port\" is required")]
    NoPorts,
    #[error("{0}")]
    Port(String),
    #[error("too many ports: at most 64 in one session")]
    TooManyPorts,
}

impl Refusal {
    /// The HTTP status of the refusal: 404 for what is not here, else 400.
    pub fn status(&self) -> StatusCode {
        match self {
            Refusal::NotRunning(_) | Refusal::PodNotRunning(_) => StatusCode::NOT_FOUND,
            _ => StatusCode::BAD_REQUEST,
        }
    }
}
