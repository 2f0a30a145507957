//! The sample operator's admission webhook server, written with kube-rs's crates (tokio,
//! hyper, rustls): it runs as a Pod's process (this test binary, started by the node agent
//! with [`SERVE_ENV`] set) and in the test process for the bad-input cases. Paths:
//! - `/validate`: a ConfigMap with a data key `forbidden` is denied (403); every answer warns
//!   `checked by sample-operator on <cluster>`.
//! - `/mutate`: adds the label `sample.example.com/mutated: "true"`.
//! - `/garbage`, `/status500`, `/slow` (3 s), `/badpatch`, `/wronguid`: the ways a webhook
//!   can fail.
//! - `/convert`: a `ConversionReview` of `Thing`s between `example.com/v1` (`spec.size:
//!   "10cm"`) and `example.com/v2` (`spec.sizeCm: 10`); `/convert-refuse` answers Failure.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use serde_json::{Value, json};

/// Set (to anything) when this binary runs as the sample operator's Pod.
pub const SERVE_ENV: &str = "SAMPLE_WEBHOOK_SERVE";
pub const CERT_ENV: &str = "SAMPLE_WEBHOOK_CERT";
pub const KEY_ENV: &str = "SAMPLE_WEBHOOK_KEY";
pub const PORT: u16 = 8443;

/// A CA, and a serving certificate it signed for `names` (DNS names or IPs): (CA PEM,
/// certificate PEM, key PEM).
pub fn certificates(names: &[&str]) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "sample operator CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::from_ca_cert_pem(&ca_cert.pem(), &ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let params =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    (ca_cert.pem(), cert.pem(), key.serialize_pem())
}

fn review_answer(uid: &str, response: Value) -> Value {
    let mut r = response;
    r["uid"] = json!(uid);
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": r})
}

/// The answer of path `path` to `review`.
async fn answer(path: &str, review: &Value, cluster: &str) -> (StatusCode, Vec<u8>) {
    let uid = review["request"]["uid"].as_str().unwrap_or_default();
    let object = &review["request"]["object"];
    let body = |v: Value| (StatusCode::OK, serde_json::to_vec(&v).unwrap());
    match path {
        "/validate" => {
            let warning = format!("checked by sample-operator on {cluster}");
            if object["data"].get("forbidden").is_some() {
                body(review_answer(
                    uid,
                    json!({"allowed": false, "warnings": [warning],
                        "status": {"code": 403, "message": "the key \"forbidden\" is not allowed"}}),
                ))
            } else {
                body(review_answer(
                    uid,
                    json!({"allowed": true, "warnings": [warning]}),
                ))
            }
        }
        "/mutate" => {
            let patch = if object["metadata"]["labels"].is_object() {
                json!([{"op": "add", "path": "/metadata/labels/sample.example.com~1mutated", "value": "true"}])
            } else {
                json!([{"op": "add", "path": "/metadata/labels", "value": {"sample.example.com/mutated": "true"}}])
            };
            let patch = base64::engine::general_purpose::STANDARD.encode(patch.to_string());
            body(review_answer(
                uid,
                json!({"allowed": true, "patchType": "JSONPatch", "patch": patch}),
            ))
        }
        "/garbage" => (StatusCode::OK, b"this is no review".to_vec()),
        "/status500" => (StatusCode::INTERNAL_SERVER_ERROR, b"boom".to_vec()),
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(3)).await;
            body(review_answer(uid, json!({"allowed": true})))
        }
        "/badpatch" => {
            let patch = base64::engine::general_purpose::STANDARD
                .encode(r#"[{"op":"replace","path":"/nope/deeper","value":1}]"#);
            body(review_answer(
                uid,
                json!({"allowed": true, "patchType": "JSONPatch", "patch": patch}),
            ))
        }
        "/wronguid" => body(review_answer("not-the-uid", json!({"allowed": true}))),
        "/convert" | "/convert-refuse" => {
            let desired = review["request"]["desiredAPIVersion"]
                .as_str()
                .unwrap_or_default();
            let objects: Vec<Value> = review["request"]["objects"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|o| convert_thing(o, desired))
                .collect();
            let result = if path == "/convert" {
                json!({"status": "Success"})
            } else {
                json!({"status": "Failure", "message": "sizes are not converted today"})
            };
            body(
                json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                "response": {"uid": review["request"]["uid"], "result": result, "convertedObjects": objects}}),
            )
        }
        _ => (StatusCode::NOT_FOUND, b"no such webhook".to_vec()),
    }
}

/// A `Thing` in `desired`: v1 keeps a size as text (`"10cm"`), v2 as a number of cm.
fn convert_thing(o: &Value, desired: &str) -> Value {
    let mut out = o.clone();
    out["apiVersion"] = json!(desired);
    let spec = &o["spec"];
    match desired {
        "example.com/v2" => {
            let cm = spec["size"]
                .as_str()
                .and_then(|s| s.trim_end_matches("cm").parse::<i64>().ok())
                .unwrap_or(0);
            out["spec"] = json!({"sizeCm": cm});
        }
        _ => {
            let cm = spec["sizeCm"].as_i64().unwrap_or(0);
            out["spec"] = json!({"size": format!("{cm}cm")});
        }
    }
    out
}

fn tls(cert_pem: &str, key_pem: &str) -> tokio_rustls::TlsAcceptor {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

/// Serve the webhooks on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, cert_pem: String, key_pem: String) {
    let acceptor = tls(&cert_pem, &key_pem);
    let cluster = std::env::var("SLUICE_CLUSTER").unwrap_or_else(|_| "the test".into());
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let acceptor = acceptor.clone();
        let cluster = cluster.clone();
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(tcp).await else {
                return;
            };
            let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let cluster = cluster.clone();
                async move {
                    let path = req.uri().path().to_string();
                    let bytes = req.into_body().collect().await?.to_bytes();
                    let review: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                    let (status, body) = answer(&path, &review, &cluster).await;
                    let mut resp = Response::new(Full::new(Bytes::from(body)));
                    *resp.status_mut() = status;
                    Ok::<_, hyper::Error>(resp)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

/// Run as the sample operator's Pod: serve on `$POD_IP:8443` with the certificate in the
/// environment.
pub fn serve_from_env() {
    let ip = std::env::var("POD_IP").unwrap_or_else(|_| "127.0.0.1".into());
    let addr: SocketAddr = format!("{ip}:{PORT}").parse().unwrap();
    let cert = std::env::var(CERT_ENV).unwrap();
    let key = std::env::var(KEY_ENV).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        eprintln!("sample operator: webhooks on https://{addr}");
        serve(listener, cert, key).await;
    });
}

pub fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// A webhook configuration of `kind` named `name` with one webhook.
#[allow(clippy::too_many_arguments)]
pub fn configuration(
    kind: &str,
    name: &str,
    client: &str,
    ca: &str,
    policy: &str,
    namespace_label: &str,
    timeout: u32,
) -> String {
    format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: {kind}
metadata: {{name: {name}}}
webhooks:
- name: {name}.example.com
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: {policy}
  timeoutSeconds: {timeout}
  clientConfig:
    {client}
    caBundle: {ca}
  namespaceSelector: {{matchLabels: {{webhooks: "{namespace_label}"}}}}
  rules:
  - {{operations: [CREATE, UPDATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps]}}
"#,
        ca = b64(ca)
    )
}

/// The sample operator's Deployment and Service in namespace `hooks`, serving with `cert`;
/// `command` runs this server (a binary that calls [`serve_from_env`]).
pub fn sample_operator(cert: &str, key: &str, command: &[&str]) -> String {
    let indent = |pem: &str| pem.trim().replace('\n', "\n            ");
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: sample-operator, namespace: hooks}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: sample-operator}}}}
  template:
    metadata: {{labels: {{app: sample-operator}}}}
    spec:
      containers:
      - name: webhooks
        image: example.com/sample-operator:1
        command: {command}
        env:
        - {{name: {serve}, value: "1"}}
        - name: {cert_env}
          value: |
            {cert}
        - name: {key_env}
          value: |
            {key}
        ports: [{{containerPort: {port}}}]
        readinessProbe:
          tcpSocket: {{port: {port}}}
          periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata: {{name: sample-webhook, namespace: hooks}}
spec:
  selector: {{app: sample-operator}}
  ports: [{{name: https, port: 443, targetPort: {port}}}]
"#,
        command = serde_json::to_string(command).unwrap(),
        serve = SERVE_ENV,
        cert_env = CERT_ENV,
        key_env = KEY_ENV,
        cert = indent(cert),
        key = indent(key),
        port = PORT,
    )
}
