//! Reading labels and annotations of an object's metadata.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

pub fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}
