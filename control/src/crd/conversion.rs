//! A CRD's conversion webhook (`spec.conversion.strategy: Webhook`): its configuration,
//! checked as kube checks it when the CRD is written, and the `ConversionReview` v1 it is
//! sent and must answer — every object converted to the desired version, nothing of its
//! identity changed, only labels and annotations of its metadata taken from the answer
//! (kube's rule). Pure: the call itself is [`crate::webhooks::conversion`]'s.

use std::time::Duration;

use serde_json::{Value, json};

use crate::errors::Cause;
use crate::webhooks::config::{Client, client_config, strings};

/// kube calls conversion webhooks with a fixed timeout.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// Objects in one review at most (a list is converted in pages of this many).
pub const MAX_OBJECTS: usize = 500;

/// Where a CRD's objects are sent to change version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConversionWebhook {
    pub client: Client,
    pub ca_bundle: Vec<u8>,
}

/// The conversion webhook of `crd`, if it asks for one; what is wrong with it goes to
/// `causes` (kube's field paths).
pub fn parse(crd: &Value, causes: &mut Vec<Cause>) -> Option<ConversionWebhook> {
    let conversion = &crd["spec"]["conversion"];
    match conversion["strategy"].as_str().unwrap_or("None") {
        "None" => {
            if !conversion["webhook"].is_null() {
                causes.push(Cause::forbidden(
                    "spec.conversion.webhook",
                    "should not be set when strategy is not set to Webhook",
                ));
            }
            return None;
        }
        "Webhook" => {}
        other => {
            causes.push(crate::webhooks::config::unsupported(
                "spec.conversion.strategy".into(),
                other,
                &["None", "Webhook"],
            ));
            return None;
        }
    }
    let webhook = &conversion["webhook"];
    if !webhook.is_object() {
        causes.push(Cause::required("spec.conversion.webhook"));
        return None;
    }
    let versions = strings(&webhook["conversionReviewVersions"]);
    if versions.is_empty() {
        causes.push(Cause::required(
            "spec.conversion.webhook.conversionReviewVersions",
        ));
    } else if !versions.iter().any(|v| v == "v1") {
        causes.push(Cause::invalid(
            "spec.conversion.webhook.conversionReviewVersions",
            &versions.join(","),
            "must include v1: Sluice sends ConversionReview v1 only",
        ));
    }
    let field = |f: &str| format!("spec.conversion.webhook.{f}");
    let (client, ca_bundle) = client_config(&webhook["clientConfig"], &field, causes);
    Some(ConversionWebhook {
        client: client?,
        ca_bundle,
    })
}

/// The `ConversionReview` asking for `objects` in `desired` (an apiVersion).
pub fn review(uid: &str, desired: &str, objects: &[Value]) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": uid, "desiredAPIVersion": desired, "objects": objects},
    })
}

/// Why an answer is not a conversion.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BadAnswer {
    #[error("unmarshal failed: {0}")]
    Decode(String),
    #[error("expected response uid {expected:?}, got {got:?}")]
    Uid { expected: String, got: String },
    #[error("conversion webhook failed: {0}")]
    Failed(String),
    #[error("expected {expected} converted objects, got {got}")]
    Count { expected: usize, got: usize },
    #[error("invalid converted object at index {index}: {why}")]
    Object { index: usize, why: String },
}

/// The converted objects of `answer` to the review `uid` of `originals`, as kube takes
/// them: each in `desired`, of the same kind, with the original's name, namespace and uid,
/// and its metadata the original's but for labels and annotations.
pub fn converted(
    answer: &[u8],
    uid: &str,
    desired: &str,
    originals: &[Value],
) -> Result<Vec<Value>, BadAnswer> {
    let v: Value = serde_json::from_slice(answer).map_err(|e| BadAnswer::Decode(e.to_string()))?;
    let response = &v["response"];
    let got = response["uid"].as_str().unwrap_or_default();
    if got != uid {
        return Err(BadAnswer::Uid {
            expected: uid.to_string(),
            got: got.to_string(),
        });
    }
    if response["result"]["status"] != "Success" {
        let message = response["result"]["message"]
            .as_str()
            .filter(|m| !m.is_empty())
            .unwrap_or("the webhook did not report Success");
        return Err(BadAnswer::Failed(message.to_string()));
    }
    let objects = response["convertedObjects"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if objects.len() != originals.len() {
        return Err(BadAnswer::Count {
            expected: originals.len(),
            got: objects.len(),
        });
    }
    objects
        .iter()
        .zip(originals)
        .enumerate()
        .map(|(index, (o, original))| {
            checked(o, original, desired).map_err(|why| BadAnswer::Object { index, why })
        })
        .collect()
}

fn checked(o: &Value, original: &Value, desired: &str) -> Result<Value, String> {
    if !o.is_object() {
        return Err("not an object".into());
    }
    if o["apiVersion"] != desired {
        return Err(format!(
            "expected apiVersion {desired:?}, got {}",
            o["apiVersion"]
        ));
    }
    if o["kind"] != original["kind"] {
        return Err(format!(
            "expected kind {}, got {}",
            original["kind"], o["kind"]
        ));
    }
    for field in ["name", "namespace", "uid"] {
        if o["metadata"][field] != original["metadata"][field] {
            return Err(format!("must not change metadata.{field}"));
        }
    }
    let mut out = o.clone();
    let mut metadata = original["metadata"].clone();
    for field in ["labels", "annotations"] {
        match &o["metadata"][field] {
            Value::Null => {
                if let Some(m) = metadata.as_object_mut() {
                    m.remove(field);
                }
            }
            v if v.is_object() => metadata[field] = v.clone(),
            _ => return Err(format!("metadata.{field} must be a map of strings")),
        }
    }
    out["metadata"] = metadata;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(conversion: Value) -> Value {
        json!({"spec": {"conversion": conversion}})
    }

    #[test]
    fn a_webhook_conversion_is_checked_as_kube_checks_it() {
        let mut causes = Vec::new();
        let ok = parse(
            &crd(
                json!({"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1", "v1beta1"],
                "clientConfig": {"service": {"namespace": "ops", "name": "convert", "path": "/convert"}}}}),
            ),
            &mut causes,
        );
        assert!(causes.is_empty(), "{causes:?}");
        assert_eq!(
            ok.unwrap().client.describe(),
            "https://convert.ops.svc:443/convert"
        );
        assert_eq!(parse(&crd(json!({"strategy": "None"})), &mut causes), None);
        assert!(causes.is_empty());
        parse(
            &crd(
                json!({"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1beta1"],
                "clientConfig": {"url": "http://x/"}}}),
            ),
            &mut causes,
        );
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            vec![
                "spec.conversion.webhook.conversionReviewVersions",
                "spec.conversion.webhook.clientConfig.url"
            ]
        );
    }

    #[test]
    fn an_answer_keeps_identity_and_takes_only_labels_and_annotations() {
        let original = json!({"apiVersion": "example.com/v1", "kind": "Thing",
            "metadata": {"name": "a", "namespace": "n", "uid": "u", "resourceVersion": "7", "labels": {"x": "1"}},
            "spec": {"size": 1}});
        let answer = |objects: Value| {
            serde_json::to_vec(&json!({"response": {"uid": "r", "result": {"status": "Success"}, "convertedObjects": objects}})).unwrap()
        };
        let good = answer(json!([{"apiVersion": "example.com/v2", "kind": "Thing",
            "metadata": {"name": "a", "namespace": "n", "uid": "u", "resourceVersion": "999", "labels": {"x": "2"}},
            "spec": {"sizeInches": 1}}]));
        let out = converted(
            &good,
            "r",
            "example.com/v2",
            std::slice::from_ref(&original),
        )
        .unwrap();
        assert_eq!(out[0]["spec"]["sizeInches"], 1);
        assert_eq!(out[0]["metadata"]["resourceVersion"], "7");
        assert_eq!(out[0]["metadata"]["labels"]["x"], "2");
        let renamed = answer(json!([{"apiVersion": "example.com/v2", "kind": "Thing",
            "metadata": {"name": "b", "namespace": "n", "uid": "u"}}]));
        assert!(matches!(
            converted(
                &renamed,
                "r",
                "example.com/v2",
                std::slice::from_ref(&original)
            ),
            Err(BadAnswer::Object { index: 0, .. })
        ));
        let wrong_version = answer(json!([original.clone()]));
        assert!(
            converted(
                &wrong_version,
                "r",
                "example.com/v2",
                std::slice::from_ref(&original)
            )
            .is_err()
        );
        assert!(matches!(
            converted(
                &answer(json!([])),
                "r",
                "example.com/v2",
                std::slice::from_ref(&original)
            ),
            Err(BadAnswer::Count { .. })
        ));
        assert!(matches!(
            converted(
                &good,
                "other",
                "example.com/v2",
                std::slice::from_ref(&original)
            ),
            Err(BadAnswer::Uid { .. })
        ));
        let failed = serde_json::to_vec(
            &json!({"response": {"uid": "r", "result": {"status": "Failure", "message": "no"}}}),
        )
        .unwrap();
        assert_eq!(
            converted(&failed, "r", "example.com/v2", &[original]),
            Err(BadAnswer::Failed("no".into()))
        );
        assert!(converted(b"garbage", "r", "v", &[]).is_err());
    }
}
