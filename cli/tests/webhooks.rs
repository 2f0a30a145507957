#![allow(clippy::unwrap_used)]
//! Admission webhooks of a logical cluster, through the real kubectl: a sample operator's
//! validating and mutating webhooks served from a Pod placed on east, called through the
//! control plane wherever the Pod runs (it keeps answering after its namespace moves to
//! west), and a `failurePolicy` pair once its Pod is gone; webhooks by URL, each way a
//! webhook can fail (garbage, a 500, too slow, a patch that does not apply, the wrong uid,
//! nothing listening, an unknown CA) handled as its policy says with kube's words, dry runs,
//! warnings, and configurations refused as kube refuses them.

use crate::support;
mod server;

use std::time::Duration;

use server::configuration;
use support::{Control, DevUp, Kubectl, eventually, kubectls};

/// Not a test: the sample operator's webhook server, which the node agent runs as a Pod's
/// process (this binary with `SAMPLE_WEBHOOK_SERVE` set).
#[test]
#[ignore = "run as a Pod's process by a_webhook_served_from_a_pod_follows_its_namespace"]
fn serve_admission_webhook() {
    if std::env::var_os(server::SERVE_ENV).is_some() {
        server::serve_from_env();
    }
}

fn namespace(k: &Kubectl, name: &str, label: &str) {
    k.apply_stdin(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}, labels: {{webhooks: \"{label}\"}}}}\n"
    ));
}

/// `kubectl create configmap` in `ns`; its output (stdout + stderr) and whether it worked.
fn create_configmap(k: &Kubectl, ns: &str, name: &str, data: &str) -> (bool, String) {
    let literal = format!("--from-literal={data}");
    let out = k.run(&["-n", ns, "create", "configmap", name, &literal]);
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn set_policy(k: &Kubectl, kind: &str, name: &str, policy: &str) {
    k.ok(&[
        "patch",
        kind,
        name,
        "--type=json",
        "-p",
        &format!(r#"[{{"op":"replace","path":"/webhooks/0/failurePolicy","value":"{policy}"}}]"#),
    ]);
}

/// The in-process webhook server on 127.0.0.1 (an ephemeral port), its CA.
fn local_server() -> (u16, String) {
    let (ca, cert, key) = server::certificates(&["127.0.0.1"]);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            server::serve(listener, cert, key).await;
        });
    });
    (port, ca)
}

/// Webhooks by URL against one control plane, with each kubectl the suite has: what they
/// allow, deny, warn and patch; each way of failing under `Fail` and `Ignore`; dry runs;
/// configurations kube refuses.
#[test]
fn webhooks_by_url_answer_deny_patch_and_fail_as_kubes_do() {
    let (port, ca) = local_server();
    let (_, other_ca, _) = server::certificates(&["127.0.0.1"]);
    let url = |path: &str| format!("url: https://127.0.0.1:{port}{path}");
    for (i, bin) in kubectls().iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        let c = Control::start(dir.path(), &[]);
        let k = Kubectl::new(bin, &c.kubeconfig, &dir.path().join("cache"));

        // Allowed, denied with the webhook's words and code, warned, patched.
        namespace(&k, "checked", "on");
        k.apply_stdin(&configuration(
            "ValidatingWebhookConfiguration",
            "validate",
            &url("/validate"),
            &ca,
            "Fail",
            "on",
            10,
        ));
        k.apply_stdin(&configuration(
            "MutatingWebhookConfiguration",
            "mutate",
            &url("/mutate"),
            &ca,
            "Fail",
            "on",
            10,
        ));
        let (ok, out) = create_configmap(&k, "checked", "fine", "a=b");
        assert!(ok, "{bin}: {out}");
        assert!(
            out.contains("Warning: checked by sample-operator on the test"),
            "{bin}: {out}"
        );
        let labels = k.ok(&[
            "-n",
            "checked",
            "get",
            "configmap",
            "fine",
            "-o",
            "jsonpath={.metadata.labels}",
        ]);
        assert!(labels.contains("sample.example.com/mutated"), "{labels}");
        let (ok, out) = create_configmap(&k, "checked", "bad", "forbidden=1");
        assert!(!ok);
        assert!(
            out.contains(
                "Error from server (Forbidden): admission webhook \"validate.example.com\" denied the request: the key \"forbidden\" is not allowed"
            ) || out.contains(
                "admission webhook \"validate.example.com\" denied the request: the key \"forbidden\" is not allowed"
            ),
            "{bin}: {out}"
        );
        // A server-side dry run is sent to webhooks without side effects, and denied alike.
        let out = k.fails(&[
            "-n",
            "checked",
            "create",
            "configmap",
            "dry",
            "--from-literal=forbidden=1",
            "--dry-run=server",
        ]);
        assert!(out.contains("denied the request"), "{out}");
        // Updates are checked too.
        let out = k.fails(&[
            "-n",
            "checked",
            "patch",
            "configmap",
            "fine",
            "-p",
            r#"{"data":{"forbidden":"now"}}"#,
        ]);
        assert!(out.contains("denied the request"), "{out}");
        // A namespace the selector leaves out is not sent.
        namespace(&k, "unchecked", "off");
        let (ok, out) = create_configmap(&k, "unchecked", "any", "forbidden=1");
        assert!(ok, "{out}");

        // Match conditions (CEL): a false one skips the webhook.
        namespace(&k, "conditional", "cond");
        let conditional = configuration(
            "ValidatingWebhookConfiguration",
            "conditional",
            &url("/validate"),
            &ca,
            "Fail",
            "cond",
            10,
        )
        .replace(
            "  rules:\n",
            "  matchConditions:\n  - {name: not-skipped, expression: \"object.metadata.name != 'skip-me'\"}\n  rules:\n",
        );
        k.apply_stdin(&conditional);
        let (ok, out) = create_configmap(&k, "conditional", "skip-me", "forbidden=1");
        assert!(ok, "{bin}: {out}");
        let (ok, out) = create_configmap(&k, "conditional", "checked", "forbidden=1");
        assert!(
            !ok && out.contains("admission webhook \"conditional.example.com\" denied the request"),
            "{bin}: {out}"
        );
        let bad_condition = conditional
            .replace("name: conditional", "name: bad-condition")
            .replace("!= 'skip-me'", "!=");
        let out = k.fed(&["apply", "-f", "-"], &bad_condition);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success()
                && err.contains("webhooks[0].matchConditions[0].expression")
                && err.contains("compilation failed"),
            "{bin}: {err}"
        );

        // Each way of failing: refused under Fail with kube's words, skipped under Ignore.
        let failures = [
            (
                "garbage",
                url("/garbage"),
                ca.clone(),
                10,
                "received invalid webhook response",
            ),
            (
                "status500",
                url("/status500"),
                ca.clone(),
                10,
                "the server responded with status code 500",
            ),
            (
                "slow",
                url("/slow"),
                ca.clone(),
                1,
                "context deadline exceeded",
            ),
            (
                "wronguid",
                url("/wronguid"),
                ca.clone(),
                10,
                "received invalid webhook response: expected response.uid=",
            ),
            (
                "nothing",
                "url: https://127.0.0.1:1/x".to_string(),
                ca.clone(),
                10,
                "dial tcp 127.0.0.1:1",
            ),
            ("stranger", url("/validate"), other_ca.clone(), 10, "tls: "),
        ];
        for (name, client, bundle, timeout, says) in &failures {
            namespace(&k, name, name);
            k.apply_stdin(&configuration(
                "ValidatingWebhookConfiguration",
                name,
                client,
                bundle,
                "Fail",
                name,
                *timeout,
            ));
            let (ok, out) = create_configmap(&k, name, "c1", "a=b");
            assert!(!ok, "{name}: {out}");
            let expect =
                format!("Internal error occurred: failed calling webhook \"{name}.example.com\": ");
            assert!(out.contains(&expect), "{name}: {out}");
            assert!(out.contains(says), "{name}: {out}");
            set_policy(&k, "validatingwebhookconfiguration", name, "Ignore");
            let (ok, out) = create_configmap(&k, name, "c2", "a=b");
            assert!(ok, "{name} under Ignore: {out}");
        }
        // A patch that does not apply is the server's error whatever the policy (as kube's).
        namespace(&k, "badpatch", "badpatch");
        k.apply_stdin(&configuration(
            "MutatingWebhookConfiguration",
            "badpatch",
            &url("/badpatch"),
            &ca,
            "Ignore",
            "badpatch",
            10,
        ));
        let (ok, out) = create_configmap(&k, "badpatch", "c1", "a=b");
        assert!(!ok, "{out}");
        assert!(
            out.contains(
                "admission webhook \"badpatch.example.com\" returned a patch that does not apply"
            ),
            "{out}"
        );

        // The configurations themselves are exempt: a webhook that catches everything and
        // cannot be reached does not keep its own configuration from being removed.
        k.apply_stdin(&format!(
            r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {{name: catch-all}}
webhooks:
- name: all.example.com
  admissionReviewVersions: [v1]
  sideEffects: None
  clientConfig: {{url: "https://127.0.0.1:1/", caBundle: {ca}}}
  rules: [{{operations: ["*"], apiGroups: ["*"], apiVersions: ["*"], resources: ["*/*"]}}]
"#,
            ca = server::b64(&ca)
        ));
        let (ok, out) = create_configmap(&k, "unchecked", "blocked", "a=b");
        assert!(
            !ok && out.contains("failed calling webhook \"all.example.com\""),
            "{out}"
        );
        k.ok(&["delete", "validatingwebhookconfiguration", "catch-all"]);
        let (ok, out) = create_configmap(&k, "unchecked", "unblocked", "a=b");
        assert!(ok, "{out}");

        // Configurations kube refuses are refused with its fields and words.
        let out = k.fed(
            &["apply", "-f", "-"],
            &configuration(
                "ValidatingWebhookConfiguration",
                "too-slow",
                &url("/validate"),
                &ca,
                "Sometimes",
                "x",
                31,
            ),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            err.contains("webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds"),
            "{err}"
        );
        assert!(
            err.contains("webhooks[0].failurePolicy: Unsupported value: \"Sometimes\""),
            "{err}"
        );
        let listed = k.ok(&["get", "validatingwebhookconfigurations", "-o", "name"]);
        assert!(
            listed.contains("validatingwebhookconfiguration.admissionregistration.k8s.io/validate"),
            "{listed}"
        );
        let defaults = k.ok(&[
            "get",
            "mutatingwebhookconfiguration",
            "mutate",
            "-o",
            "jsonpath={.webhooks[0].matchPolicy} {.webhooks[0].reinvocationPolicy} {.webhooks[0].objectSelector}",
        ]);
        assert_eq!(defaults, "Equivalent Never {}", "kube's defaults");

        // A workspace's webhooks are reached through their Service: a URL is refused.
        let tenant = c.workspace(&k, "tenant", &dir.path().join("cache-tenant"));
        let by_url = configuration(
            "ValidatingWebhookConfiguration",
            "tenant-url",
            &url("/validate"),
            &ca,
            "Fail",
            "on",
            10,
        );
        let out = tenant.fed(&["apply", "-f", "-"], &by_url);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success()
                && err.contains("webhooks[0].clientConfig.url: Forbidden: a webhook of logical cluster root:tenant is reached through its Service"),
            "{bin}: {err}"
        );
        tenant.apply_stdin(&configuration(
            "ValidatingWebhookConfiguration",
            "tenant-service",
            "service: {namespace: hooks, name: sample-webhook, path: /validate}",
            &ca,
            "Ignore",
            "on",
            10,
        ));
        drop(c);
        eprintln!("kubectl {i}: {bin} done");
    }
}

/// The Running Pod of the sample operator on `cluster`, if any.
fn operator_on(k: &Kubectl, cluster: &str) -> Option<String> {
    let out = k.run(&[
        "-n",
        "hooks",
        "get",
        "pod",
        "-l",
        &format!("app=sample-operator,sluice.dev/cluster={cluster}"),
        "--field-selector=status.phase=Running",
        "-o",
        "jsonpath={.items[0].metadata.name}",
    ]);
    let name = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !name.is_empty()).then_some(name)
}

/// A webhook whose Service runs on a physical cluster is reached there through the
/// control plane, keeps answering after its namespace moves to another cluster, and, once
/// its Pod is gone, `Fail` refuses what `Ignore` lets through.
#[test]
fn a_webhook_served_from_a_pod_follows_its_namespace() {
    let (ca, cert, key) = server::certificates(&["sample-webhook.hooks.svc"]);
    let (mut dev, _) = DevUp::start("east,west");
    let k = dev.kubectl_control();
    k.apply_stdin("apiVersion: v1\nkind: Namespace\nmetadata: {name: hooks, labels: {sluice.dev/cluster: east}}\n");
    let exe = std::env::current_exe().unwrap().display().to_string();
    k.apply_stdin(&server::sample_operator(
        &cert,
        &key,
        &[
            &exe,
            // This test's name in the one test binary (module path, no crate name).
            "webhooks::serve_admission_webhook",
            "--exact",
            "--ignored",
            "--nocapture",
        ],
    ));
    let service = "service: {namespace: hooks, name: sample-webhook, path: /validate}";
    k.apply_stdin(&configuration(
        "ValidatingWebhookConfiguration",
        "sample-validate",
        service,
        &ca,
        "Fail",
        "on",
        10,
    ));
    k.apply_stdin(&configuration(
        "MutatingWebhookConfiguration",
        "sample-mutate",
        &service.replace("/validate", "/mutate"),
        &ca,
        "Ignore",
        "on",
        10,
    ));
    // The apps it checks run on west.
    k.apply_stdin("apiVersion: v1\nkind: Namespace\nmetadata: {name: apps, labels: {webhooks: \"on\", sluice.dev/cluster: west}}\n");
    let n = std::cell::Cell::new(0);
    let attempt = |want_cluster: &str| {
        n.set(n.get() + 1);
        let (ok, out) = create_configmap(&k, "apps", &format!("c{}", n.get()), "a=b");
        ok && out.contains(&format!("checked by sample-operator on {want_cluster}"))
    };
    assert!(
        eventually(Duration::from_secs(120), || attempt("east")),
        "the webhook on east never answered: {}",
        k.ok(&["-n", "hooks", "get", "pods,events"])
    );
    let labels = k.ok(&[
        "-n",
        "apps",
        "get",
        "configmap",
        &format!("c{}", n.get()),
        "-o",
        "jsonpath={.metadata.labels}",
    ]);
    assert!(labels.contains("sample.example.com/mutated"), "{labels}");
    let (ok, out) = create_configmap(&k, "apps", "refused", "forbidden=yes");
    assert!(!ok);
    assert!(
        out.contains("admission webhook \"sample-validate.example.com\" denied the request: the key \"forbidden\" is not allowed"),
        "{out}"
    );

    // The webhook's namespace moves to west; the webhook goes on answering from there.
    k.ok(&[
        "label",
        "namespace",
        "hooks",
        "sluice.dev/cluster=west",
        "--overwrite",
    ]);
    assert!(
        eventually(Duration::from_secs(180), || operator_on(&k, "west")
            .is_some()
            && operator_on(&k, "east").is_none()),
        "the operator did not move: {}",
        k.ok(&["-n", "hooks", "get", "pods", "-o", "wide"])
    );
    assert!(
        eventually(Duration::from_secs(60), || attempt("west")),
        "the webhook did not answer from west"
    );
    let (ok, out) = create_configmap(&k, "apps", "refused-again", "forbidden=yes");
    assert!(!ok && out.contains("denied the request"), "{out}");

    // The same Pod converts a CRD's versions, reached through west's syncer too.
    k.apply_stdin(&thing_crd(
        "example.com",
        "service: {namespace: hooks, name: sample-webhook, path: /convert}",
        &ca,
    ));
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/things.example.com",
    ]);
    k.apply_stdin(
        "apiVersion: example.com/v2\nkind: Thing\nmetadata: {name: a, namespace: apps}\nspec: {sizeCm: 4}\n",
    );
    assert_eq!(
        k.ok(&[
            "-n",
            "apps",
            "get",
            "things.v1.example.com",
            "a",
            "-o",
            "jsonpath={.spec.size}"
        ]),
        "4cm"
    );

    // Its Pod gone: the Fail webhook refuses, in kube's words; as Ignore, it lets through
    // (and the Ignore mutating webhook is skipped).
    k.ok(&[
        "-n",
        "hooks",
        "scale",
        "deployment",
        "sample-operator",
        "--replicas=0",
    ]);
    assert!(
        eventually(Duration::from_secs(90), || {
            let (ok, out) = create_configmap(&k, "apps", "while-gone", "a=b");
            !ok && out.contains("Internal error occurred: failed calling webhook \"sample-validate.example.com\": failed to call webhook: Post \"https://sample-webhook.hooks.svc:443/validate?timeout=10s\"")
        }),
        "the Fail webhook did not refuse with its Pod gone"
    );
    set_policy(
        &k,
        "validatingwebhookconfiguration",
        "sample-validate",
        "Ignore",
    );
    let (ok, out) = create_configmap(&k, "apps", "let-through", "a=b");
    assert!(ok, "{out}");
    let labels = k.ok(&[
        "-n",
        "apps",
        "get",
        "configmap",
        "let-through",
        "-o",
        "jsonpath={.metadata.labels}",
    ]);
    assert!(!labels.contains("sample.example.com/mutated"), "{labels}");
    assert!(dev.stop());
}

/// Kopf, a Python operator framework, registers its own webhooks by URL (its managed
/// `auto.kopf.dev` configurations) and they are called: a refusal in its words, a warning,
/// a label patched in; objects its selector leaves out are not sent.
#[test]
fn a_python_operator_registers_its_own_webhooks_by_url() {
    let dir = tempfile::tempdir().unwrap();
    let c = Control::start(dir.path(), &[]);
    let k = Kubectl::new(&kubectls()[0], &c.kubeconfig, &dir.path().join("cache"));
    let (ca, cert, key) = server::certificates(&["127.0.0.1"]);
    for (name, pem) in [("ca.pem", &ca), ("cert.pem", &cert), ("key.pem", &key)] {
        std::fs::write(dir.path().join(name), pem).unwrap();
    }
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/kopf_webhooks.py");
    let log = std::fs::File::create(dir.path().join("kopf.log")).unwrap();
    let mut kopf = KillOnDrop(
        std::process::Command::new("python3")
            .args([
                "-m",
                "kopf",
                "run",
                "--standalone",
                "--all-namespaces",
                script,
            ])
            .env("KUBECONFIG", &c.kubeconfig)
            .env("KOPF_WEBHOOK_PORT", port.to_string())
            .env("KOPF_WEBHOOK_CA", dir.path().join("ca.pem"))
            .env("KOPF_WEBHOOK_CERT", dir.path().join("cert.pem"))
            .env("KOPF_WEBHOOK_KEY", dir.path().join("key.pem"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("python3 -m kopf (./test.sh installs kopf into .venv/)"),
    );
    let kopf_log = || std::fs::read_to_string(dir.path().join("kopf.log")).unwrap_or_default();
    namespace(&k, "kopf", "any");
    let mut n = 0;
    assert!(
        eventually(Duration::from_secs(90), || {
            assert!(
                kopf.0.try_wait().unwrap().is_none(),
                "kopf exited: {}",
                kopf_log()
            );
            n += 1;
            let out = k.fed(
                &["apply", "-f", "-"],
                &format!(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: probe-{n}, namespace: kopf, labels: {{kopf-checked: \"yes\"}}}}\ndata: {{forbidden: \"1\"}}\n"
                ),
            );
            String::from_utf8_lossy(&out.stderr).contains("kopf says no")
        }),
        "kopf's webhook never refused: {}\n{}",
        k.run(&["get", "validatingwebhookconfigurations", "-o", "yaml"])
            .stdout
            .len(),
        kopf_log()
    );
    let registered = k.ok(&[
        "get",
        "validatingwebhookconfiguration",
        "auto.kopf.dev",
        "-o",
        "jsonpath={.webhooks[0].clientConfig.url}",
    ]);
    assert!(
        registered.starts_with(&format!("https://127.0.0.1:{port}/")),
        "{registered}"
    );
    let out = k.fed(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: fine, namespace: kopf, labels: {kopf-checked: \"yes\"}}\ndata: {a: b}\n",
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("Warning: checked by kopf"), "{said}");
    let labels = k.ok(&[
        "-n",
        "kopf",
        "get",
        "configmap",
        "fine",
        "-o",
        "jsonpath={.metadata.labels}",
    ]);
    assert!(labels.contains("kopf.example.com/mutated"), "{labels}");
    // Not labelled for kopf: not sent.
    let (ok, out) = create_configmap(&k, "kopf", "unlabelled", "forbidden=1");
    assert!(ok, "{out}");
    drop(kopf);
    drop(c);
}

/// A child process killed (and reaped) on drop.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A two-version CRD (v1 stored, v2 served) whose conversion webhook the test serves.
fn thing_crd(name_group: &str, client: &str, ca: &str) -> String {
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: things.{name_group}}}
spec:
  group: {name_group}
  scope: Namespaced
  names: {{plural: things, singular: thing, kind: Thing}}
  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: [v1]
      clientConfig:
        {client}
        caBundle: {ca}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {{openAPIV3Schema: {{type: object, properties: {{spec: {{type: object, properties: {{size: {{type: string}}}}}}}}}}}}
  - name: v2
    served: true
    storage: false
    additionalPrinterColumns: [{{name: Size, type: integer, jsonPath: .spec.sizeCm}}]
    schema: {{openAPIV3Schema: {{type: object, properties: {{spec: {{type: object, properties: {{sizeCm: {{type: integer}}}}}}}}}}}}
"#,
        ca = server::b64(ca)
    )
}

/// A CRD converted by a webhook, with each kubectl the suite has: objects written in
/// either version are stored in one and read in both (get, list, table, watch, patch
/// through the other version); a webhook that fails makes reads of the other version fail
/// with kube's words while the stored version still reads; a workspace may not name a URL.
#[test]
fn a_two_version_crd_converts_through_its_webhook() {
    let (port, ca) = local_server();
    for bin in kubectls() {
        let dir = tempfile::tempdir().unwrap();
        let c = Control::start(dir.path(), &[]);
        let k = Kubectl::new(&bin, &c.kubeconfig, &dir.path().join("cache"));
        k.apply_stdin(&thing_crd(
            "example.com",
            &format!("url: https://127.0.0.1:{port}/convert"),
            &ca,
        ));
        k.ok(&[
            "wait",
            "--for=condition=Established",
            "crd/things.example.com",
        ]);

        // Written as v2, stored as v1, read as either.
        k.apply_stdin(
            "apiVersion: example.com/v2\nkind: Thing\nmetadata: {name: a, namespace: default}\nspec: {sizeCm: 10}\n",
        );
        let v1 = k.ok(&[
            "get",
            "things.v1.example.com",
            "a",
            "-o",
            "jsonpath={.spec.size}",
        ]);
        assert_eq!(v1, "10cm", "{bin}");
        let v2 = k.ok(&[
            "get",
            "things.v2.example.com",
            "a",
            "-o",
            "jsonpath={.apiVersion} {.spec.sizeCm}",
        ]);
        assert_eq!(v2, "example.com/v2 10", "{bin}");
        // Written as v1, listed as v2; the table's column is v2's.
        k.apply_stdin(
            "apiVersion: example.com/v1\nkind: Thing\nmetadata: {name: b, namespace: default}\nspec: {size: 7cm}\n",
        );
        let listed = k.ok(&[
            "get",
            "things.v2.example.com",
            "-o",
            "jsonpath={.items[*].spec.sizeCm}",
        ]);
        assert_eq!(listed, "10 7", "{bin}");
        let table = k.ok(&["get", "things.v2.example.com"]);
        assert!(
            table.contains("SIZE") && table.contains("10"),
            "{bin}: {table}"
        );
        // A patch through v2 of what is stored as v1.
        k.ok(&[
            "patch",
            "things.v2.example.com",
            "a",
            "--type=merge",
            "-p",
            r#"{"spec":{"sizeCm":12}}"#,
        ]);
        let v1 = k.ok(&[
            "get",
            "things.v1.example.com",
            "a",
            "-o",
            "jsonpath={.spec.size}",
        ]);
        assert_eq!(v1, "12cm", "{bin}");
        // A watch through v2 sees v2.
        let watched = k.run(&[
            "get",
            "things.v2.example.com",
            "a",
            "-w",
            "--request-timeout=3s",
            "-o",
            "jsonpath={.spec.sizeCm}",
        ]);
        assert!(
            String::from_utf8_lossy(&watched.stdout).contains("12"),
            "{bin}: {watched:?}"
        );

        // The webhook refuses: the other version fails in kube's words; the stored one reads.
        k.ok(&[
            "patch",
            "crd",
            "things.example.com",
            "--type=json",
            "-p",
            &format!(
                r#"[{{"op":"replace","path":"/spec/conversion/webhook/clientConfig/url","value":"https://127.0.0.1:{port}/convert-refuse"}}]"#
            ),
        ]);
        let refused = k.fails(&["get", "things.v2.example.com", "a"]);
        assert!(
            refused.contains("conversion webhook for example.com/v2, Kind=Thing failed: conversion webhook failed: sizes are not converted today"),
            "{bin}: {refused}"
        );
        assert_eq!(
            k.ok(&[
                "get",
                "things.v1.example.com",
                "a",
                "-o",
                "jsonpath={.spec.size}"
            ]),
            "12cm",
            "{bin}"
        );

        // What kube refuses, and a workspace naming a URL.
        let bad = thing_crd("bad.example.com", "url: http://127.0.0.1:1/", &ca).replace(
            "conversionReviewVersions: [v1]",
            "conversionReviewVersions: [v1beta1]",
        );
        let out = k.fed(&["apply", "-f", "-"], &bad);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bin}: {err}");
        for says in [
            "spec.conversion.webhook.conversionReviewVersions",
            "spec.conversion.webhook.clientConfig.url",
        ] {
            assert!(err.contains(says), "{bin}: {says} not in {err}");
        }
        let tenant = c.workspace(&k, "tenant", &dir.path().join("cache-tenant"));
        let out = tenant.fed(
            &["apply", "-f", "-"],
            &thing_crd(
                "tenant.example.com",
                &format!("url: https://127.0.0.1:{port}/convert"),
                &ca,
            ),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success()
                && err.contains("spec.conversion.webhook.clientConfig.url: Forbidden"),
            "{bin}: {err}"
        );
    }
}
