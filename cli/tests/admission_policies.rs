#![allow(clippy::unwrap_used)]
//! ValidatingAdmissionPolicies with the real kubectl (each version the suite has): kube's
//! documentation example denies in kube's words; parameters by name and by selector, with
//! `parameterNotFoundAction`; `Warn` reaches the client as a warning and `Audit` the audit
//! log, with the policy's `auditAnnotations`; deletions are checked; a policy that does not
//! compile is refused with the compiler's message; a workspace's policies govern and read
//! only that workspace.

use crate::support;

use support::{Control, Kubectl, kubectls};

/// kube's documentation example (`ValidatingAdmissionPolicy` concepts page).
const DOCS_EXAMPLE: &str = r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: "demo-policy.example.com"
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups:   ["apps"]
      apiVersions: ["v1"]
      operations:  ["CREATE", "UPDATE"]
      resources:   ["deployments"]
  validations:
    - expression: "object.spec.replicas <= 5"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: "demo-binding-test.example.com"
spec:
  policyName: "demo-policy.example.com"
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels:
        environment: test
"#;

/// A policy on ConfigMaps whose limit is a parameter (a ConfigMap), with a variable, a
/// messageExpression, a reason and an audit annotation; a binding of each action.
const WITH_PARAMS: &str = r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: size.example.com}
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE", "UPDATE"], resources: ["configmaps"]}
  matchConditions:
  - {name: not-params, expression: "!has(object.metadata.labels) || !('role' in object.metadata.labels)"}
  variables:
  - {name: keys, expression: "has(object.data) ? size(object.data) : 0"}
  validations:
  - expression: "variables.keys <= int(params.data.maxKeys)"
    messageExpression: "'at most ' + params.data.maxKeys + ' keys, not ' + string(variables.keys)"
    reason: Forbidden
  auditAnnotations:
  - {key: keys, valueExpression: "string(variables.keys)"}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: size-deny}
spec:
  policyName: size.example.com
  validationActions: [Deny]
  paramRef: {name: limits, namespace: default, parameterNotFoundAction: Deny}
  matchResources:
    namespaceSelector: {matchLabels: {size: deny}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: size-warn}
spec:
  policyName: size.example.com
  validationActions: [Warn, Audit]
  paramRef:
    namespace: default
    selector: {matchLabels: {role: limits}}
    parameterNotFoundAction: Allow
  matchResources:
    namespaceSelector: {matchLabels: {size: warn}}
"#;

const PROTECTED: &str = r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: protected.example.com}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["DELETE"], resources: ["configmaps"]}
  validations:
  - {expression: "!has(oldObject.metadata.labels) || !('protected' in oldObject.metadata.labels) || oldObject.metadata.labels['protected'] != 'yes'", message: "protected ConfigMaps are not deleted"}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: protected}
spec: {policyName: protected.example.com, validationActions: [Deny]}
"#;

/// kubectl's exit and everything it printed.
fn run(k: &Kubectl, args: &[&str], input: Option<&str>) -> (bool, String) {
    let out = match input {
        Some(i) => k.fed(args, i),
        None => k.run(args),
    };
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn configmap(name: &str, ns: &str, keys: usize) -> String {
    let data: Vec<String> = (0..keys).map(|i| format!("k{i}: v")).collect();
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}}}\ndata: {{{}}}\n",
        data.join(", ")
    )
}

#[test]
fn policies_deny_warn_and_audit_in_kubes_words() {
    for bin in kubectls() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.log");
        let c = Control::start(
            &dir.path().join("control"),
            &["--audit-log", log.to_str().unwrap()],
        );
        let k = Kubectl::new(&bin, &c.kubeconfig, &dir.path().join("cache"));

        // kube's documentation example, as its page shows it.
        k.apply_stdin(DOCS_EXAMPLE);
        k.ok(&["create", "namespace", "test"]);
        k.ok(&["label", "namespace", "test", "environment=test"]);
        let (ok, out) = run(
            &k,
            &["create", "-f", "-"],
            Some(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: nginx, namespace: test}\nspec:\n  replicas: 6\n  selector: {matchLabels: {app: nginx}}\n  template:\n    metadata: {labels: {app: nginx}}\n    spec: {containers: [{name: nginx, image: nginx}]}\n",
            ),
        );
        assert!(!ok, "{bin}: {out}");
        assert!(
            out.contains("ValidatingAdmissionPolicy 'demo-policy.example.com' with binding 'demo-binding-test.example.com' denied request: failed expression: object.spec.replicas <= 5"),
            "{bin}: {out}"
        );
        // Reason Invalid (kubectl prints an Invalid status's cause this way).
        assert!(
            out.contains("The deployments \"nginx\" is invalid"),
            "{bin}: reason Invalid: {out}"
        );
        // Within the limit, or outside the bound namespaces, it is created.
        k.ok(&[
            "create",
            "deployment",
            "nginx",
            "--image=nginx",
            "--replicas=5",
            "-n",
            "test",
        ]);
        k.ok(&[
            "create",
            "deployment",
            "big",
            "--image=nginx",
            "--replicas=9",
        ]);
        let (ok, out) = run(
            &k,
            &[
                "patch",
                "deployment",
                "nginx",
                "-n",
                "test",
                "-p",
                r#"{"spec":{"replicas":7}}"#,
            ],
            None,
        );
        assert!(
            !ok && out.contains("denied request"),
            "{bin}: update: {out}"
        );
        let defaults = k.ok(&[
            "get",
            "validatingadmissionpolicy",
            "demo-policy.example.com",
            "-o",
            "jsonpath={.spec.matchConstraints.matchPolicy} {.spec.matchConstraints.resourceRules[0].scope}",
        ]);
        assert_eq!(defaults, "Equivalent *", "{bin}: kube's defaults");

        // Parameters: none yet, and the Deny binding denies.
        k.apply_stdin(WITH_PARAMS);
        for (ns, label) in [("strict", "size=deny"), ("lenient", "size=warn")] {
            k.ok(&["create", "namespace", ns]);
            k.ok(&["label", "namespace", ns, label]);
        }
        let (ok, out) = run(
            &k,
            &["apply", "-f", "-"],
            Some(&configmap("a", "strict", 1)),
        );
        assert!(!ok, "{bin}: {out}");
        assert!(
            out.contains("ValidatingAdmissionPolicy 'size.example.com' with binding 'size-deny' denied request: no params found for policy binding with `Deny` parameterNotFoundAction"),
            "{bin}: {out}"
        );
        // An Allow binding without parameters lets it through.
        k.apply_stdin(&configmap("a", "lenient", 9));
        k.apply_stdin(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: limits, namespace: default, labels: {role: limits}}\ndata: {maxKeys: \"2\"}\n",
        );
        k.apply_stdin(&configmap("a", "strict", 2));
        let (ok, out) = run(
            &k,
            &["apply", "-f", "-"],
            Some(&configmap("b", "strict", 3)),
        );
        assert!(!ok, "{bin}: {out}");
        assert!(
            out.contains("configmaps \"b\" is forbidden: ValidatingAdmissionPolicy 'size.example.com' with binding 'size-deny' denied request: at most 2 keys, not 3"),
            "{bin}: {out}"
        );
        // Warn and Audit: admitted, the client warned, the audit log told.
        let (ok, out) = run(
            &k,
            &["apply", "-f", "-"],
            Some(&configmap("b", "lenient", 3)),
        );
        assert!(ok, "{bin}: {out}");
        assert!(
            out.contains("Warning: Validation failed for ValidatingAdmissionPolicy 'size.example.com' with binding 'size-warn': at most 2 keys, not 3"),
            "{bin}: {out}"
        );
        let audited = std::fs::read_to_string(&log).unwrap();
        let line = audited
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|l| {
                l["verb"] == "create"
                    && l["namespace"] == "lenient"
                    && l["annotations"]["size.example.com/keys"] == "3"
            })
            .unwrap_or_else(|| panic!("{bin}: no audit line for b in {audited}"));
        let annotations = &line["annotations"];
        assert_eq!(annotations["size.example.com/keys"], "3", "{bin}: {line}");
        let failures: serde_json::Value = serde_json::from_str(
            annotations["validation.policy.admission.k8s.io/validation_failure"]
                .as_str()
                .unwrap_or_else(|| panic!("{bin}: {line}")),
        )
        .unwrap();
        assert_eq!(failures[0]["policy"], "size.example.com", "{bin}: {line}");
        assert_eq!(failures[0]["binding"], "size-warn", "{bin}: {line}");
        assert_eq!(failures[0]["expressionIndex"], 0, "{bin}: {line}");
        assert_eq!(
            failures[0]["message"], "at most 2 keys, not 3",
            "{bin}: {line}"
        );

        // Deletions are checked too (oldObject).
        k.apply_stdin(PROTECTED);
        k.ok(&["create", "configmap", "keep", "-n", "lenient"]);
        k.ok(&[
            "label",
            "configmap",
            "keep",
            "-n",
            "lenient",
            "protected=yes",
        ]);
        let (ok, out) = run(&k, &["delete", "configmap", "keep", "-n", "lenient"], None);
        assert!(!ok, "{bin}: {out}");
        assert!(
            out.contains("denied request: protected ConfigMaps are not deleted"),
            "{bin}: {out}"
        );
        k.ok(&["delete", "configmap", "a", "-n", "lenient"]);

        // A rule that would cost more than kube's runtime limit on this object is not run:
        // the failure policy decides (here: Fail, so the request is refused).
        k.apply_stdin(
            r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: pairs.example.com}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["configmaps"]}]
  validations:
  - expression: "!has(object.data) || object.data.all(a, object.data.all(b, a == b || a != b))"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: pairs}
spec: {policyName: pairs.example.com, validationActions: [Deny], matchResources: {namespaceSelector: {matchLabels: {size: warn}}}}
"#,
        );
        k.apply_stdin(&configmap("few", "lenient", 2));
        let (ok, out) = run(
            &k,
            &["apply", "-f", "-"],
            Some(&configmap("many", "lenient", 2000)),
        );
        assert!(!ok, "{bin}: {out}");
        assert!(
            out.contains("ValidatingAdmissionPolicy 'pairs.example.com' with binding 'pairs' denied request: expression")
                && out.contains("operation cancelled: actual cost limit exceeded"),
            "{bin}: {out}"
        );

        // What kube refuses is refused, with the compiler's words.
        let (ok, out) = run(
            &k,
            &["apply", "-f", "-"],
            Some(
                r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: broken.example.com}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}]
  validations:
  - {expression: "object.spec.containers.all(c, c.image.startsWith('registry.example/')"}
  - {expression: "authorizer.requestResource.check('create').allowed()"}
"#,
            ),
        );
        assert!(!ok, "{bin}: {out}");
        for says in [
            "spec.validations[0].expression: Invalid value",
            "compilation failed",
            "spec.validations[1].expression",
            "undeclared reference to 'authorizer'",
        ] {
            assert!(out.contains(says), "{bin}: {says:?} not in {out}");
        }
        let (ok, out) = run(
            &k,
            &["apply", "-f", "-"],
            Some(
                "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata: {name: nothing}\nspec: {policyName: x, validationActions: [Deny, Warn]}\n",
            ),
        );
        assert!(!ok, "{bin}: {out}");
        assert!(out.contains("spec.validationActions"), "{bin}: {out}");
        drop(c);
    }
}

#[test]
fn a_workspaces_policies_govern_and_read_only_that_workspace() {
    let bin = &kubectls()[0];
    let dir = tempfile::tempdir().unwrap();
    let c = Control::start(&dir.path().join("control"), &[]);
    let root = Kubectl::new(bin, &c.kubeconfig, &dir.path().join("cache"));
    let tenant = c.workspace(&root, "tenant", &dir.path().join("cache-tenant"));
    // The tenant's policy governs its namespace `apps`, with parameters from
    // `default/limits` — which exists in root only, for now.
    tenant.apply_stdin(WITH_PARAMS);
    tenant.ok(&["create", "namespace", "apps"]);
    tenant.ok(&["label", "namespace", "apps", "size=deny"]);
    root.ok(&["create", "namespace", "apps"]);
    root.ok(&["label", "namespace", "apps", "size=deny"]);
    root.apply_stdin(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: limits, namespace: default}\ndata: {maxKeys: \"100\"}\n",
    );
    let (ok, out) = run(
        &tenant,
        &["apply", "-f", "-"],
        Some(&configmap("a", "apps", 1)),
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains("no params found"),
        "root's ConfigMap is not the tenant's: {out}"
    );
    // Root is not governed by the tenant's policy.
    root.apply_stdin(&configmap("a", "apps", 5));
    // The tenant's own parameters are read.
    tenant.apply_stdin(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: limits, namespace: default}\ndata: {maxKeys: \"1\"}\n",
    );
    tenant.apply_stdin(&configmap("a", "apps", 1));
    let (ok, out) = run(
        &tenant,
        &["apply", "-f", "-"],
        Some(&configmap("b", "apps", 2)),
    );
    assert!(!ok && out.contains("at most 1 keys, not 2"), "{out}");
    // The root's objects are not listed to the tenant.
    let listed = tenant.ok(&["get", "validatingadmissionpolicies", "-o", "name"]);
    assert_eq!(
        listed.trim(),
        "validatingadmissionpolicy.admissionregistration.k8s.io/size.example.com"
    );
    assert_eq!(
        root.ok(&["get", "validatingadmissionpolicies", "-o", "name"])
            .trim(),
        ""
    );
}
