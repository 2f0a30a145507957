#![allow(clippy::unwrap_used)]
//! The cost of CRD validation rules (CEL) per object, in process: a custom resource whose
//! schema carries 10 rules (comparisons, string functions, a list macro, a transition rule),
//! validated by the schema alone and by the schema and its rules, side by side; the ratio
//! and the rules' own cost per object are printed. Then a ValidatingAdmissionPolicy (a
//! variable, a match condition, three validations reading a parameter object, an audit
//! annotation) evaluated against a Deployment, per request.
//!
//!     cargo bench -p sluice-control --bench cel      (SLUICE_BENCH_OPS, default 20000)

use std::time::Instant;

use serde_json::{Value, json};
use sluice_control::crd::{cel, structural};

fn schema() -> Value {
    let rules = json!([
        {"rule": "self.replicas <= self.maxReplicas", "message": "replicas must not exceed maxReplicas"},
        {"rule": "self.replicas >= 0"},
        {"rule": "self.name.startsWith('app-')", "fieldPath": ".name"},
        {"rule": "size(self.name) <= 63"},
        {"rule": "self.name.lowerAscii() == self.name"},
        {"rule": "self.mode in ['fast', 'slow']"},
        {"rule": "self.tags.all(t, size(t) < 16)"},
        {"rule": "self.tags.exists(t, t == 'web')"},
        {"rule": "!has(self.image) || self.image.contains(':')"},
        {"rule": "self.mode == oldSelf.mode", "message": "mode is immutable"},
    ]);
    json!({"type": "object", "properties": {"spec": {
        "type": "object",
        "x-kubernetes-validations": rules,
        "properties": {
            "replicas": {"type": "integer"}, "maxReplicas": {"type": "integer"},
            "name": {"type": "string"}, "mode": {"type": "string"}, "image": {"type": "string"},
            "tags": {"type": "array", "maxItems": 16, "items": {"type": "string", "maxLength": 64}},
        }
    }}})
}

fn main() {
    let n: usize = std::env::var("SLUICE_BENCH_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20000);
    let schema = schema();
    let old = json!({"spec": {"replicas": 2, "maxReplicas": 5, "name": "app-web", "mode": "fast",
        "image": "example.com/web:1", "tags": ["web", "front", "eu"]}});
    let new = json!({"spec": {"replicas": 3, "maxReplicas": 5, "name": "app-web", "mode": "fast",
        "image": "example.com/web:2", "tags": ["web", "front", "eu"]}});
    let mut causes = Vec::new();
    cel::validate(&schema, &new, Some(&old), "", &mut causes, 0);
    assert!(causes.is_empty(), "{causes:?}");

    let t = Instant::now();
    for _ in 0..n {
        let mut causes = Vec::new();
        structural::validate(&schema, &new, "", &mut causes, 0);
        std::hint::black_box(&causes);
    }
    let schema_only = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    let t = Instant::now();
    for _ in 0..n {
        let mut causes = Vec::new();
        structural::validate(&schema, &new, "", &mut causes, 0);
        cel::validate(&schema, &new, Some(&old), "", &mut causes, 0);
        std::hint::black_box(&causes);
    }
    let with_rules = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    println!(
        "a custom resource with 10 CEL rules, validated {n} times (an update: the transition rule runs)"
    );
    println!("{:<44} {schema_only:>9.2} µs/object", "schema only");
    println!(
        "{:<44} {with_rules:>9.2} µs/object",
        "schema and its 10 rules"
    );
    println!(
        "{:<44} {:>9.2} µs/object ({:.2} µs per rule), {:.1}x the schema alone",
        "the rules' own cost",
        with_rules - schema_only,
        (with_rules - schema_only) / 10.0,
        with_rules / schema_only.max(0.001)
    );
    policy(n);
}

/// One ValidatingAdmissionPolicy evaluated per request, its runtime cost bound included.
fn policy(n: usize) {
    use sluice_control::policies::{config, eval};
    let policy = config::parse_policy(&json!({"metadata": {"name": "limits.example.com"}, "spec": {
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]},
        "matchConditions": [{"name": "not-system", "expression": "!object.metadata.name.startsWith('system-')"}],
        "variables": [{"name": "containers", "expression": "object.spec.template.spec.containers"}],
        "validations": [
            {"expression": "object.spec.replicas <= int(params.data.maxReplicas)", "messageExpression": "'at most ' + params.data.maxReplicas + ' replicas'"},
            {"expression": "variables.containers.all(c, c.image.startsWith(params.data.registry))"},
            {"expression": "variables.containers.all(c, has(c.resources) && has(c.resources.limits))", "reason": "Forbidden"},
        ],
        "auditAnnotations": [{"key": "replicas", "valueExpression": "string(object.spec.replicas)"}],
    }}))
    .unwrap();
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}},
    "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": {
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [
            {"name": "web", "image": "registry.example/web:1", "resources": {"limits": {"cpu": "1"}}},
            {"name": "proxy", "image": "registry.example/proxy:2", "resources": {"limits": {"cpu": "100m"}}},
        ]}}}});
    let request = json!({"operation": "CREATE", "object": deployment, "oldObject": null});
    let params = json!({"data": {"maxReplicas": "5", "registry": "registry.example/"}});
    let ns = json!({"metadata": {"name": "shop"}});
    let input = eval::Input {
        request: &request,
        namespace_object: &ns,
        params: &params,
    };
    let e = eval::evaluate(&policy, &input);
    assert!(e.matched && e.failures.is_empty(), "{:?}", e.failures);
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(eval::evaluate(&policy, &input));
    }
    let per = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    println!(
        "{:<44} {per:>9.2} µs/request",
        "a ValidatingAdmissionPolicy (3 validations)"
    );
}
