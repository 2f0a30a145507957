//! CustomResourceDefinitions: each served version of a CRD becomes a [`ResourceType`] in
//! the catalog of the logical cluster that holds the CRD, and only there.

pub mod cel;
pub mod conversion;
pub mod registry;
pub mod structural;

use std::sync::Arc;

use serde_json::{Value, json};

use crate::errors::{Cause, GroupResource};
use crate::jsonpath::JsonPath;
use crate::resources::{
    CustomVersion, PrinterColumn, ResourceType, ScalePaths, SchemaKind, Subresource,
};
use crate::storage::ResourcePrefix;

pub const CRD_GROUP: &str = "apiextensions.k8s.io";
/// Held by a CRD while its custom resources are being removed.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

fn field_path(p: &str) -> Vec<String> {
    p.trim_start_matches('.')
        .split('.')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// Problems with a CRD, as causes of an Invalid error.
pub fn validate_crd(crd: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or("");
    let plural = spec["names"]["plural"].as_str().unwrap_or("");
    if group.is_empty() {
        causes.push(Cause::required("spec.group"));
    }
    if plural.is_empty() {
        causes.push(Cause::required("spec.names.plural"));
    }
    if spec["names"]["kind"].as_str().is_none_or(str::is_empty) {
        causes.push(Cause::required("spec.names.kind"));
    }
    let name = crd["metadata"]["name"].as_str().unwrap_or("");
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        causes.push(Cause::invalid(
            "metadata.name",
            name,
            "must be spec.names.plural+\".\"+spec.group".to_string(),
        ));
    }
    if !matches!(spec["scope"].as_str(), Some("Namespaced" | "Cluster")) {
        causes.push(Cause {
            reason: "FieldValueNotSupported",
            field: "spec.scope".into(),
            message: format!(
                "Unsupported value: {}: supported values: \"Cluster\", \"Namespaced\"",
                spec["scope"]
            ),
        });
    }
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    if versions.is_empty() {
        causes.push(Cause::required("spec.versions"));
    }
    let storage = versions.iter().filter(|v| v["storage"] == true).count();
    if !versions.is_empty() && storage != 1 {
        causes.push(Cause::invalid(
            "spec.versions",
            "",
            "must have exactly one version marked as storage version",
        ));
    }
    conversion::parse(crd, &mut causes);
    for (i, v) in versions.iter().enumerate() {
        let schema = &v["schema"]["openAPIV3Schema"];
        if schema.is_object() {
            cel::check_schema(
                schema,
                &format!("spec.versions[{i}].schema.openAPIV3Schema"),
                &mut causes,
            );
        }
        for (j, c) in v["additionalPrinterColumns"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            if let Err(e) = JsonPath::parse(c["jsonPath"].as_str().unwrap_or("")) {
                causes.push(Cause::invalid(
                    format!("spec.versions[{i}].additionalPrinterColumns[{j}].jsonPath"),
                    c["jsonPath"].as_str().unwrap_or(""),
                    e.to_string(),
                ));
            }
        }
    }
    causes
}

/// The status kube-apiserver reports for an accepted CRD.
pub fn accepted_status(crd: &Value) -> Value {
    let now = crate::object::now_rfc3339();
    let condition = |ty: &str, reason: &str, message: &str| json!({"type": ty, "status": "True", "lastTransitionTime": now, "reason": reason, "message": message});
    let storage: Vec<Value> = crd["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["storage"] == true)
        .map(|v| v["name"].clone())
        .collect();
    json!({
        "conditions": [
            condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "acceptedNames": crd["spec"]["names"],
        "storedVersions": storage,
    })
}

/// The resource types a (valid) CRD serves.
pub fn types_from_crd(crd: &Value) -> Vec<Arc<ResourceType>> {
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or("").to_string();
    let names = &spec["names"];
    let plural = names["plural"].as_str().unwrap_or("").to_string();
    let kind = names["kind"].as_str().unwrap_or("").to_string();
    let singular = names["singular"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_lowercase());
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    };
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    let storage_version = versions
        .iter()
        .find(|v| v["storage"] == true)
        .and_then(|v| v["name"].as_str())
        .unwrap_or("")
        .to_string();
    let group_reversed: Vec<&str> = group.split('.').rev().collect();
    let syncable = sluice_api::synced_kinds::syncable_kind(crd).is_some();
    let webhook = conversion::parse(crd, &mut Vec::new()).map(Arc::new);
    versions
        .iter()
        .filter(|v| v["served"] != false)
        .map(|v| {
            let version = v["name"].as_str().unwrap_or("").to_string();
            let mut subresources = Vec::new();
            if v["subresources"]["status"].is_object() {
                subresources.push(Subresource::Status);
            }
            let scale = v["subresources"]["scale"].as_object().and_then(|s| {
                let spec_path = s.get("specReplicasPath")?.as_str()?;
                Some(ScalePaths {
                    spec_replicas: JsonPath::parse(spec_path).ok()?,
                    spec_replicas_field: field_path(spec_path),
                    status_replicas: JsonPath::parse(s.get("statusReplicasPath")?.as_str()?)
                        .ok()?,
                    label_selector: s
                        .get("labelSelectorPath")
                        .and_then(Value::as_str)
                        .and_then(|p| JsonPath::parse(p).ok()),
                })
            });
            if scale.is_some() {
                subresources.push(Subresource::Scale);
            }
            let printer_columns = v["additionalPrinterColumns"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| {
                    Some(PrinterColumn {
                        name: c["name"].as_str()?.to_string(),
                        ty: c["type"].as_str().unwrap_or("string").to_string(),
                        priority: c["priority"].as_u64().unwrap_or(0).min(255) as u8,
                        path: JsonPath::parse(c["jsonPath"].as_str()?).ok()?,
                    })
                })
                .collect();
            let custom = CustomVersion {
                schema: v["schema"]["openAPIV3Schema"]
                    .as_object()
                    .map(|o| Value::Object(o.clone())),
                printer_columns,
                scale,
                storage_version: storage_version.clone(),
                webhook: webhook.clone(),
                syncable,
            };
            Arc::new(ResourceType {
                group: group.clone(),
                version: version.clone(),
                resource: plural.clone(),
                kind: kind.clone(),
                singular: singular.clone(),
                namespaced: spec["scope"] == "Namespaced",
                short_names: strings(&names["shortNames"]),
                categories: strings(&names["categories"]),
                subresources,
                definition: format!("{}.{version}.{kind}", group_reversed.join(".")),
                schema: SchemaKind::Custom(Arc::new(custom)),
                prefix: ResourcePrefix::new(&group, &plural),
                gr: GroupResource {
                    group: group.clone(),
                    resource: plural.clone(),
                },
                verbs: crate::resources::CRUD_VERBS,
                conversion: None,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        json!({"metadata": {"name": "widgets.example.com"}, "spec": {
        "group": "example.com", "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
        "versions": [
            {"name": "v1", "served": true, "storage": true, "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
             "schema": {"openAPIV3Schema": {"type": "object"}},
             "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}]},
            {"name": "v1beta1", "served": true, "storage": false}
        ]}})
    }

    #[test]
    fn crd_to_types() {
        assert!(validate_crd(&crd()).is_empty());
        let types = types_from_crd(&crd());
        assert_eq!(types.len(), 2);
        assert_eq!(types[0].definition, "com.example.v1.Widget");
        assert!(types[0].has(Subresource::Status) && types[0].has(Subresource::Scale));
        assert_eq!(types[1].custom().unwrap().storage_version, "v1");
        let mut bad = crd();
        bad["metadata"]["name"] = json!("wrong");
        bad["spec"]["versions"][1]["storage"] = json!(true);
        assert_eq!(validate_crd(&bad).len(), 2);
    }
}
