//! Reading labels and annotations (from the shared runtime), and the label Kubernetes puts
//! on a Service's own EndpointSlices.

pub use sluice_api::mcs::LABEL_KUBE_SERVICE_NAME;
pub use sluice_kube::meta::{annotation, label};
