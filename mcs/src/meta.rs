//! Reading labels and annotations, and the Kubernetes label names both the controller and
//! the dataplane's cluster mode look for.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The label Kubernetes puts on a Service's own EndpointSlices.
pub const LABEL_KUBE_SERVICE_NAME: &str = "kubernetes.io/service-name";

pub fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

pub fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}
