#![allow(clippy::unwrap_used)]
//! CRD validation rules (`x-kubernetes-validations`, CEL) through the real kubectl (each
//! version the suite has): objects that break a rule are refused with kube's causes (the
//! rule's message, `messageExpression`, `reason`, `fieldPath`, `failed rule: ...`),
//! transition rules (`oldSelf`) hold on update and not on create, and a CRD whose rule does
//! not compile, or whose estimated cost is over kube's limit, is refused in kube's words.

use crate::support;

use support::{Control, Kubectl, kubectls};

const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-validations:
            - rule: "self.replicas <= self.maxReplicas"
              message: "replicas must not exceed maxReplicas"
            - rule: "self.name.startsWith('app-')"
              fieldPath: ".name"
              reason: FieldValueForbidden
              messageExpression: "'name ' + self.name + ' must start with app-'"
            - rule: "self.mode == oldSelf.mode"
              message: "mode is immutable"
            - rule: "self.tags.all(t, t.lowerAscii() == t)"
            - rule: "!has(self.memory) || quantity(self.memory).compareTo(quantity('1Gi')) <= 0"
              message: "memory must be at most 1Gi"
            - rule: "!has(self.address) || isIP(self.address) && ip(self.address).family() == 4"
              message: "address must be an IPv4 address"
            - rule: "!has(self.endpoint) || url(self.endpoint).getScheme() == 'https'"
              message: "endpoint must be https"
            properties:
              replicas: {type: integer}
              maxReplicas: {type: integer}
              name: {type: string}
              mode: {type: string}
              tags: {type: array, maxItems: 16, items: {type: string, maxLength: 64}}
              memory: {type: string, maxLength: 32}
              address: {type: string, maxLength: 64}
              endpoint: {type: string, maxLength: 256}
"#;

fn widget(name: &str, replicas: i64, app: &str, mode: &str, tag: &str) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {{name: {name}, namespace: default}}\nspec: {{replicas: {replicas}, maxReplicas: 3, name: {app}, mode: {mode}, tags: [{tag}]}}\n"
    )
}

/// `kubectl apply` of `manifest`: whether it worked, and what kubectl said.
fn apply(k: &Kubectl, manifest: &str) -> (bool, String) {
    let out = k.fed(&["apply", "-f", "-"], manifest);
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn crd_rules_refuse_bad_objects_in_kubes_words() {
    for bin in kubectls() {
        let dir = tempfile::tempdir().unwrap();
        let c = Control::start(dir.path(), &[]);
        let k = Kubectl::new(&bin, &c.kubeconfig, &dir.path().join("cache"));
        k.apply_stdin(CRD);
        k.ok(&[
            "wait",
            "--for=condition=Established",
            "crd/widgets.example.com",
        ]);

        let (ok, out) = apply(&k, &widget("good", 1, "app-a", "fast", "x"));
        assert!(ok, "{bin}: {out}");

        let (ok, out) = apply(&k, &widget("bad", 5, "web", "fast", "UPPER"));
        assert!(!ok, "{bin}: {out}");
        for says in [
            "The Widget \"bad\" is invalid",
            "spec: Invalid value: \"object\": replicas must not exceed maxReplicas",
            "spec.name: Forbidden: name web must start with app-",
            "spec: Invalid value: \"object\": failed rule: self.tags.all(t, t.lowerAscii() == t)",
        ] {
            assert!(out.contains(says), "{bin}: {says:?} not in {out}");
        }
        // kube's quantity, IP and URL libraries.
        let sized = widget("sized", 1, "app-a", "fast", "x").replace(
            "tags: [x]}",
            "tags: [x], memory: 2Gi, address: \"fd00::1\", endpoint: \"http://a.example/x\"}",
        );
        let (ok, out) = apply(&k, &sized);
        assert!(!ok, "{bin}: {out}");
        for says in [
            "memory must be at most 1Gi",
            "address must be an IPv4 address",
            "endpoint must be https",
        ] {
            assert!(out.contains(says), "{bin}: {says:?} not in {out}");
        }
        let (ok, out) = apply(
            &k,
            &sized
                .replace("2Gi", "512Mi")
                .replace("\"fd00::1\"", "\"10.0.0.1\"")
                .replace("http://", "https://"),
        );
        assert!(ok, "{bin}: {out}");
        // A transition rule holds on update, not on create.
        let (ok, out) = apply(&k, &widget("good", 2, "app-a", "slow", "x"));
        assert!(!ok, "{bin}: {out}");
        assert!(
            out.contains("spec: Invalid value: \"object\": mode is immutable"),
            "{bin}: {out}"
        );
        let (ok, out) = apply(&k, &widget("good", 2, "app-a", "fast", "x"));
        assert!(ok, "{bin}: {out}");

        // A rule that does not compile refuses its CRD with the compiler's message.
        let broken = CRD
            .replace("widgets.example.com", "gadgets.example.com")
            .replace(
                "plural: widgets, singular: widget, kind: Widget",
                "plural: gadgets, singular: gadget, kind: Gadget",
            )
            .replace(
                "\"self.replicas <= self.maxReplicas\"",
                "\"self.replicas <=\"",
            )
            .replace(
                "\"self.mode == oldSelf.mode\"",
                "\"self.mode == other.mode\"",
            )
            .replace(
                "\"self.tags.all(t, t.lowerAscii() == t)\"",
                "\"self.tags.all(a, self.tags.all(b, a == b || a != b))\"",
            )
            .replace(
                "tags: {type: array, maxItems: 16, items: {type: string, maxLength: 64}}",
                "tags: {type: array, items: {type: string}}",
            );
        let (ok, out) = apply(&k, &broken);
        assert!(!ok, "{bin}: {out}");
        assert!(
            out.contains("spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule"),
            "{bin}: {out}"
        );
        assert!(out.contains("compilation failed"), "{bin}: {out}");
        assert!(
            out.contains("undeclared reference to 'other'"),
            "{bin}: {out}"
        );
        // A rule nested over an unbounded list costs more than kube allows.
        assert!(
            out.contains("x-kubernetes-validations[3].rule: Forbidden: estimated rule cost exceeds budget by factor of"),
            "{bin}: {out}"
        );

        drop(c);
    }
}
