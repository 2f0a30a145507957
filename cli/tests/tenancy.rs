#![allow(clippy::unwrap_used)]
//! Tenants apart on shared clusters (issue: tenants apart), with the real kubectl (1.32 and
//! a current one) acting as the tenants of two workspaces on `sluice dev up`: what would
//! give a tenant the shared nodes — privileged pods, host namespaces and paths, added
//! capabilities, external IPs, forged mirrors, a looser policy — is refused with kube's
//! wording before anything is synced, nothing of it reaches a physical cluster, the
//! downstream namespace carries the enforced level for the cluster's own PodSecurity, and
//! the other tenant's app keeps serving throughout. A workspace runs only on the clusters
//! its policy allows, within its quota; its Ingresses claim only hosts under its delegated
//! domains and not owned by another namespace, and the DNS and ingresses serve only those.

use crate::support;

use std::process::Output;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use support::{DevUp, Kubectl, eventually, kubectls, sluice_bin};

const WORKSPACES: &str = r#"{"apiVersion": "sluice.dev/v1alpha1", "kind": "List", "items": [
  {"apiVersion": "sluice.dev/v1alpha1", "kind": "Workspace", "metadata": {"name": "a"}},
  {"apiVersion": "sluice.dev/v1alpha1", "kind": "Workspace", "metadata": {"name": "b"}}
]}"#;

/// A tenant's app: a namespace placed on east, two echo replicas and their Service.
fn app(ns: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata:
  name: {ns}
  labels: {{sluice.dev/cluster: east}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {ns}}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers:
      - name: echo
        image: sluice/echo
        ports: [{{name: http, containerPort: 8080}}]
        readinessProbe: {{httpGet: {{port: http, path: /ready}}, periodSeconds: 1}}
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: {ns}}}
spec:
  selector: {{app: web}}
  ports: [{{name: http, port: 80, targetPort: http}}]
"#
    )
}

/// kubectl in logical cluster `cluster` as `user` (impersonated by the admin, as a tenant's
/// identity is seen once authenticated).
struct Tenant {
    k: Kubectl,
    user: String,
}

impl Tenant {
    fn new(dev: &DevUp, bin: &str, cluster: &str, user: &str) -> Self {
        let label = format!(
            "{}-{}-{user}",
            bin.replace('/', "_"),
            cluster.replace(':', "_")
        );
        let path = dev.state.join(format!("{label}.kubeconfig"));
        let out = std::process::Command::new(sluice_bin())
            .args(["kubeconfig", "--data-dir"])
            .arg(dev.state.join("control"))
            .args(["--workspace", cluster])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        std::fs::write(&path, &out.stdout).unwrap();
        Self {
            k: Kubectl::new(bin, &path, &dev.state.join(format!("cache-{label}"))),
            user: user.to_string(),
        }
    }

    fn args<'a>(&'a self, args: &[&'a str]) -> Vec<&'a str> {
        let mut all = vec!["--as", self.user.as_str()];
        all.extend_from_slice(args);
        all
    }

    fn run(&self, args: &[&str]) -> Output {
        self.k.run(&self.args(args))
    }

    fn ok(&self, args: &[&str]) -> String {
        self.k.ok(&self.args(args))
    }

    fn fails(&self, args: &[&str]) -> String {
        self.k.fails(&self.args(args))
    }

    /// `kubectl apply -f -`: its output (stdout and stderr) and whether it succeeded.
    fn apply(&self, manifest: &str) -> (bool, String) {
        let out = self.k.fed(&self.args(&["apply", "-f", "-"]), manifest);
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }

    fn refused(&self, manifest: &str, wording: &[&str]) {
        let (ok, out) = self.apply(manifest);
        assert!(
            !ok,
            "{} applied what must be refused:\n{manifest}\n{out}",
            self.user
        );
        for w in wording {
            assert!(out.contains(w), "{w:?} not in:\n{out}");
        }
    }
}

fn deployment(name: &str, ns: &str, pod_spec: &str) -> String {
    format!(
        r#"{{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {{"name": "{name}", "namespace": "{ns}"}},
  "spec": {{"selector": {{"matchLabels": {{"app": "{name}"}}}},
    "template": {{"metadata": {{"labels": {{"app": "{name}"}}}}, "spec": {pod_spec}}}}}}}"#
    )
}

/// Every object of `kinds` in the downstream namespace of `ns` of logical cluster `path`.
fn downstream_names(k: &Kubectl, path: &str, ns: &str, kinds: &str) -> String {
    let down = k.downstream(path, ns);
    k.ok(&["-n", &down, "get", kinds, "-o", "name"])
}

#[test]
fn tenants_cannot_escape_onto_the_shared_clusters() {
    let (dev, _) = DevUp::start("east,west");
    let root = dev.kubectl_control();
    let east = dev.kubectl("east");
    root.apply_stdin(WORKSPACES);
    let bin = kubectls().remove(0);
    for (ws, user) in [("a", "alice"), ("b", "bob")] {
        let admin = Tenant::new(&dev, &bin, &format!("root:{ws}"), "admin");
        admin.k.ok(&[
            "create",
            "clusterrolebinding",
            &format!("{user}-admin"),
            "--clusterrole=cluster-admin",
            &format!("--user={user}"),
        ]);
    }

    // bob's app runs on east, and is loaded all through what alice tries.
    let bob = Tenant::new(&dev, &bin, "root:b", "bob");
    let (ok, out) = bob.apply(&app("shop"));
    assert!(ok, "{out}");
    bob.ok(&[
        "-n",
        "shop",
        "rollout",
        "status",
        "deployment/web",
        "--timeout=120s",
    ]);
    let pod_ip = {
        let mut ip = String::new();
        assert!(eventually(Duration::from_secs(60), || {
            ip = bob.ok(&[
                "-n",
                "shop",
                "get",
                "pods",
                "-l",
                "app=web",
                "-o",
                "jsonpath={.items[0].status.podIP}",
            ]);
            !ip.trim().is_empty()
        }));
        ip.trim().to_string()
    };
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let (sent, failed) = (
        std::sync::Arc::new(AtomicU64::new(0)),
        std::sync::Arc::new(AtomicU64::new(0)),
    );
    let load = {
        let (stop, sent, failed, ip) = (stop.clone(), sent.clone(), failed.clone(), pod_ip.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                sent.fetch_add(1, Ordering::Relaxed);
                if support::http_get(&ip, 8080, "/").is_none() {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };

    // alice's namespace is placed on east; her ordinary app runs there.
    let alice0 = Tenant::new(&dev, &bin, "root:a", "alice");
    let (ok, out) = alice0.apply(&app("shop"));
    assert!(ok, "{out}");
    assert!(eventually(Duration::from_secs(60), || {
        downstream_names(&east, "root:a", "shop", "deployments").contains("deployment.apps/web")
    }));

    for bin in kubectls() {
        let alice = Tenant::new(&dev, &bin, "root:a", "alice");
        // The workspace's default level, baseline, in kube's words.
        alice.refused(
            &deployment("root", "shop", r#"{"containers": [{"name": "c", "image": "x", "securityContext": {"privileged": true}}]}"#),
            &[r#"deployments.apps "root" is forbidden: violates PodSecurity "baseline:latest": privileged (container "c" must not set securityContext.privileged=true)"#],
        );
        alice.refused(
            &deployment(
                "node",
                "shop",
                r#"{"hostPID": true, "containers": [{"name": "c", "image": "x", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}},
                    "volumeMounts": [{"name": "root", "mountPath": "/host"}]}], "volumes": [{"name": "root", "hostPath": {"path": "/"}}]}"#,
            ),
            &[
                r#"violates PodSecurity "baseline:latest": non-default capabilities (container "c" must not include "SYS_ADMIN" in securityContext.capabilities.add), host namespaces (hostPID=true), hostPath volumes (volume "root")"#,
            ],
        );
        alice.refused(
            r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sniff", "namespace": "shop"},
                "spec": {"hostNetwork": true, "containers": [{"name": "c", "image": "x"}]}}"#,
            &[r#"pods "sniff" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true)"#],
        );
        // CVE-2020-8554: a Service's external IPs intercept traffic on every node.
        alice.refused(
            r#"{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "intercept", "namespace": "shop"},
                "spec": {"ports": [{"port": 80}], "externalIPs": ["8.8.8.8"]}}"#,
            &[r#"services "intercept" is forbidden: Use of external IPs is denied by admission control"#],
        );
        // A mirror is the syncer's, whatever field manager a client names.
        let out = alice.run(&[
            "-n",
            "shop",
            "run",
            "fake",
            "--image=x",
            "--labels=sluice.dev/cluster=east",
            "--field-manager=sluice-syncer",
        ]);
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("read-only mirrors"),
            "{out:?}"
        );
        // A namespace label cannot loosen the workspace's level (only warn)...
        let out = alice.run(&[
            "label",
            "namespace",
            "shop",
            "--overwrite",
            "pod-security.kubernetes.io/enforce=privileged",
        ]);
        assert!(out.status.success(), "{out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(
                "pod-security.kubernetes.io/enforce=privileged is looser than this workspace's level: baseline is enforced"
            ),
            "{out:?}"
        );
        alice.refused(
            &deployment("root", "shop", r#"{"containers": [{"name": "c", "image": "x", "securityContext": {"privileged": true}}]}"#),
            &[r#"violates PodSecurity "baseline:latest""#],
        );
        // ...but can tighten it.
        alice.ok(&[
            "label",
            "namespace",
            "shop",
            "--overwrite",
            "pod-security.kubernetes.io/enforce=restricted",
        ]);
        alice.refused(
            &deployment("plain", "shop", r#"{"containers": [{"name": "plain", "image": "sluice/echo"}]}"#),
            &[r#"deployments.apps "plain" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "plain" must set securityContext.allowPrivilegeEscalation=false)"#],
        );
        alice.ok(&[
            "label",
            "namespace",
            "shop",
            "pod-security.kubernetes.io/enforce-",
        ]);
        // A bad label value is refused as kube refuses it.
        let err = alice.fails(&[
            "label",
            "namespace",
            "shop",
            "pod-security.kubernetes.io/enforce=lax",
        ]);
        assert!(
            err.contains(r#"metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "lax": must be one of privileged, baseline, restricted"#),
            "{err}"
        );

        // alice cannot change her own workspace's policy: it lives in root, where she has
        // no rights; a workspace she makes below hers is bounded by hers.
        let alice_in_root = Tenant::new(&dev, &bin, "root", "alice");
        let err = alice_in_root.fails(&[
            "patch",
            "workspace",
            "a",
            "--type=merge",
            "-p",
            r#"{"spec": {"policy": {"podSecurity": "privileged"}}}"#,
        ]);
        assert!(
            err.contains("Forbidden") || err.contains("forbidden"),
            "{err}"
        );
        // And she reads nothing of bob's logical cluster, not even its kinds.
        let alice_in_b = Tenant::new(&dev, &bin, "root:b", "alice");
        let err = alice_in_b.fails(&["api-resources"]);
        assert!(
            err.contains("forbidden") || err.contains("Forbidden"),
            "{err}"
        );
    }
    let alice = Tenant::new(&dev, &bin, "root:a", "alice");
    let (ok, out) = alice.apply(
        r#"{"apiVersion": "sluice.dev/v1alpha1", "kind": "Workspace", "metadata": {"name": "c"},
            "spec": {"policy": {"podSecurity": "privileged"}}}"#,
    );
    assert!(ok, "{out}");
    let alice_c = Tenant::new(&dev, &bin, "root:a:c", "alice");
    alice_c.ok(&["create", "namespace", "lab"]);
    alice_c.refused(
        &deployment("root", "lab", r#"{"containers": [{"name": "c", "image": "x", "securityContext": {"privileged": true}}]}"#),
        &[r#"violates PodSecurity "baseline:latest""#],
    );

    // Someone who may create workspaces in root but not set their policy.
    root.ok(&[
        "create",
        "clusterrole",
        "workspace-maker",
        "--verb=create,get,list",
        "--resource=workspaces.sluice.dev",
    ]);
    root.ok(&[
        "create",
        "clusterrolebinding",
        "carol-makes",
        "--clusterrole=workspace-maker",
        "--user=carol",
    ]);
    let carol = Tenant::new(&dev, &bin, "root", "carol");
    carol.refused(
        r#"{"apiVersion": "sluice.dev/v1alpha1", "kind": "Workspace", "metadata": {"name": "d"},
            "spec": {"policy": {"podSecurity": "privileged", "allowExternalIPs": true}}}"#,
        &[r#"workspaces.sluice.dev "d" is forbidden: User "carol" cannot update resource "workspaces/policy" in API group "sluice.dev" at the cluster scope"#],
    );

    // Nothing of it reached east: only alice's own app is there, in a namespace east's
    // own PodSecurity admission holds to the same level.
    let there = downstream_names(&east, "root:a", "shop", "deployments,pods,services");
    for name in ["root", "node", "sniff", "intercept", "fake", "plain"] {
        assert!(
            !there.contains(&format!("/{name}\n")),
            "{name} reached east:\n{there}"
        );
    }
    let down = east.downstream("root:a", "shop");
    let label = |k: &Kubectl| {
        k.ok(&[
            "get",
            "namespace",
            &down,
            "-o",
            "jsonpath={.metadata.labels.pod-security\\.kubernetes\\.io/enforce}",
        ])
    };
    assert!(
        eventually(Duration::from_secs(30), || label(&east) == "baseline"),
        "{}",
        label(&east)
    );

    // The platform admin may loosen a's policy; the level follows downstream.
    root.ok(&[
        "patch",
        "workspace",
        "a",
        "--type=merge",
        "-p",
        r#"{"spec": {"policy": {"podSecurity": "privileged"}}}"#,
    ]);
    let (ok, out) = alice.apply(&deployment(
        "debugger",
        "shop",
        r#"{"containers": [{"name": "c", "image": "sluice/echo", "securityContext": {"privileged": true}}]}"#,
    ));
    assert!(ok, "{out}");
    assert!(
        eventually(Duration::from_secs(30), || label(&east) == "privileged"),
        "{}",
        label(&east)
    );
    root.ok(&[
        "patch",
        "workspace",
        "a",
        "--type=merge",
        "-p",
        r#"{"spec": {"policy": null}}"#,
    ]);
    assert!(
        eventually(Duration::from_secs(30), || label(&east) == "baseline"),
        "{}",
        label(&east)
    );

    // bob's app served every request all along.
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
    let (sent, failed) = (sent.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    eprintln!("bob's app: {sent} requests, {failed} failed");
    assert!(sent > 0);
    assert_eq!(failed, 0);
    assert_eq!(
        bob.ok(&[
            "-n",
            "shop",
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.status.availableReplicas}"
        ]),
        "2"
    );
}

fn placed(t: &Tenant, ns: &str, field: &str) -> String {
    t.ok(&[
        "get",
        "namespace",
        ns,
        "-o",
        &format!("jsonpath={{.status.conditions[?(@.type==\"Placed\")].{field}}}"),
    ])
}

#[test]
fn a_workspace_runs_only_on_its_clusters_and_within_its_quota() {
    let (dev, _) = DevUp::start("east,west");
    let root = dev.kubectl_control();
    let (east, west) = (dev.kubectl("east"), dev.kubectl("west"));
    // The platform admin shares east and keeps west; workspace a may use shared clusters,
    // two pods on each at most.
    root.ok(&["label", "cluster", "east", "tier=shared"]);
    root.ok(&["label", "cluster", "west", "tier=dedicated"]);
    root.apply_stdin(
        r#"{"apiVersion": "sluice.dev/v1alpha1", "kind": "Workspace", "metadata": {"name": "a"},
            "spec": {"policy": {"clusterSelector": {"matchLabels": {"tier": "shared"}}, "clusterQuota": {"pods": 2}}}}"#,
    );
    let bin = kubectls().remove(0);
    Tenant::new(&dev, &bin, "root:a", "admin").k.ok(&[
        "create",
        "clusterrolebinding",
        "alice-admin",
        "--clusterrole=cluster-admin",
        "--user=alice",
    ]);
    for bin in kubectls() {
        let alice = Tenant::new(&dev, &bin, "root:a", "alice");
        // Pinned by hand to a cluster it may not use: refused.
        alice.refused(
            r#"{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "pinned", "labels": {"sluice.dev/cluster": "west"}}}"#,
            &[r#"namespaces "pinned" is forbidden: cluster "west" is not one that logical cluster root:a may use (its workspace's spec.policy.clusterSelector)"#],
        );
        // Nor can it label itself onto a cluster placement did not choose.
        alice.ok(&[
            "create",
            "namespace",
            format!("probe-{}", bin.len()).as_str(),
        ]);
        let err = alice.fails(&[
            "label",
            "namespace",
            &format!("probe-{}", bin.len()),
            "state.sluice.dev/west=Sync",
        ]);
        assert!(
            err.contains(
                r#"label "state.sluice.dev/west" is set by Sluice's controllers, not by clients"#
            ),
            "{err}"
        );
    }
    // A Placement over every cluster places it on east only.
    let alice = Tenant::new(&dev, &bin, "root:a", "alice");
    let (ok, out) = alice.apply(
        r#"apiVersion: sluice.dev/v1alpha1
kind: Placement
metadata: {name: anywhere}
spec:
  namespaceSelector: {matchLabels: {placed: "yes"}}
  locationSelector: {}
"#,
    );
    assert!(ok, "{out}");
    let mut manifest = app("shop").replace(
        "labels: {sluice.dev/cluster: east}",
        "labels: {placed: \"yes\"}",
    );
    let (ok, out) = alice.apply(&manifest);
    assert!(ok, "{out}");
    assert!(eventually(Duration::from_secs(120), || {
        downstream_names(&east, "root:a", "shop", "deployments").contains("deployment.apps/web")
    }));
    assert_eq!(
        placed(&alice, "shop", "status"),
        "True",
        "{}",
        placed(&alice, "shop", "message")
    );
    // Its two pods fill its quota on east: one more pod fits nowhere it may go.
    manifest = app("more")
        .replace(
            "labels: {sluice.dev/cluster: east}",
            "labels: {placed: \"yes\"}",
        )
        .replace("replicas: 2", "replicas: 1");
    let (ok, out) = alice.apply(&manifest);
    assert!(ok, "{out}");
    assert!(
        eventually(Duration::from_secs(60), || placed(&alice, "more", "reason")
            == "InsufficientCapacity"),
        "{}",
        placed(&alice, "more", "message")
    );
    assert!(
        placed(&alice, "more", "message").contains("within the quota of workspace root:a"),
        "{}",
        placed(&alice, "more", "message")
    );
    // Draining east never moves alice onto west: she waits on east, Pending.
    root.ok(&[
        "patch",
        "cluster",
        "east",
        "--type=merge",
        "-p",
        r#"{"spec": {"unschedulable": true, "drain": true}}"#,
    ]);
    assert!(
        eventually(Duration::from_secs(60), || placed(&alice, "shop", "status")
            == "False"),
        "{}",
        placed(&alice, "shop", "message")
    );
    std::thread::sleep(Duration::from_secs(3));
    // (Every member cluster has the namespace, for its imports; only east runs it.)
    assert_eq!(
        downstream_names(&west, "root:a", "shop", "deployments,pods").trim(),
        ""
    );
    assert!(
        downstream_names(&east, "root:a", "shop", "deployments").contains("deployment.apps/web")
    );
    assert_eq!(
        downstream_names(&east, "root:a", "more", "deployments").trim(),
        "",
        "over its quota, it runs nowhere"
    );
    root.ok(&[
        "patch",
        "cluster",
        "east",
        "--type=merge",
        "-p",
        r#"{"spec": {"unschedulable": false, "drain": false}}"#,
    ]);
    assert!(eventually(Duration::from_secs(60), || placed(
        &alice, "shop", "status"
    ) == "True"));
}

/// An Ingress for `hosts` in namespace `ns` sending everything to its `web` Service.
fn ingress(name: &str, ns: &str, hosts: &[&str]) -> String {
    let rules: Vec<String> = hosts
        .iter()
        .map(|h| {
            format!(
                r#"{{"host": "{h}", "http": {{"paths": [{{"path": "/", "pathType": "Prefix", "backend": {{"service": {{"name": "web", "port": {{"number": 80}}}}}}}}]}}}}"#
            )
        })
        .collect();
    format!(
        r#"{{"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {{"name": "{name}", "namespace": "{ns}"}}, "spec": {{"rules": [{}]}}}}"#,
        rules.join(", ")
    )
}

/// The A records `dig` gets for `host` from the DNS server at `dns` (`ip:port`), sorted.
fn dig(dns: &str, host: &str) -> Vec<String> {
    let (ip, port) = dns.rsplit_once(':').unwrap();
    let out = std::process::Command::new("dig")
        .args(["+short", "+tries=1", "+time=2", "-p", port])
        .arg(format!("@{ip}"))
        .args([host, "A"])
        .output()
        .unwrap();
    let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty() && !l.starts_with(';'))
        .collect();
    v.sort();
    v
}

/// `GET /` with `Host: host` through the ingress at `addr`: the status line.
fn through_ingress(addr: &str, host: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let req = format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return String::new();
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.lines().next().unwrap_or("").to_string()
}

#[test]
fn ingress_hosts_belong_to_their_first_claimant_under_delegated_domains() {
    let (dev, _) = DevUp::start("east");
    let root = dev.kubectl_control();
    // The platform admin delegates a.example to a, b.example to b, and shared.example to both.
    root.apply_stdin(
        r#"{"apiVersion": "sluice.dev/v1alpha1", "kind": "List", "items": [
  {"apiVersion": "sluice.dev/v1alpha1", "kind": "Workspace", "metadata": {"name": "a"},
   "spec": {"policy": {"ingressDomains": ["a.example", "shared.example"]}}},
  {"apiVersion": "sluice.dev/v1alpha1", "kind": "Workspace", "metadata": {"name": "b"},
   "spec": {"policy": {"ingressDomains": ["b.example", "shared.example"]}}}
]}"#,
    );
    let bin = kubectls().remove(0);
    for (cluster, user) in [("root:a", "alice"), ("root:b", "bob")] {
        Tenant::new(&dev, &bin, cluster, "admin").k.ok(&[
            "create",
            "clusterrolebinding",
            &format!("{user}-admin"),
            "--clusterrole=cluster-admin",
            &format!("--user={user}"),
        ]);
    }
    // alice's app, served at shop.shared.example: the first claim on it.
    let alice = Tenant::new(&dev, &bin, "root:a", "alice");
    let (ok, out) = alice.apply(&app("shop"));
    assert!(ok, "{out}");
    let (ok, out) = alice.apply(&ingress(
        "web",
        "shop",
        &["shop.shared.example", "www.a.example"],
    ));
    assert!(ok, "{out}");
    let admitted = || {
        alice.ok(&[
            "-n",
            "shop",
            "get",
            "ingress",
            "web",
            "-o",
            r#"jsonpath={.metadata.annotations.sluice\.dev/ingress-hosts}"#,
        ])
    };
    assert_eq!(admitted(), r#"["shop.shared.example","www.a.example"]"#);

    for bin in kubectls() {
        let bob = Tenant::new(&dev, &bin, "root:b", "bob");
        bob.ok(&["create", "namespace", &format!("n{}", bin.len())]);
        let ns = format!("n{}", bin.len());
        // Above its domains, a wildcard over every .com name, or a host someone else owns.
        bob.refused(
            &ingress("grab", &ns, &["*.com"]),
            &[r#"ingresses.networking.k8s.io "grab" is forbidden: host "*.com" is not under a domain delegated to logical cluster root:b (its workspace's spec.policy.ingressDomains)"#],
        );
        bob.refused(
            &ingress("grab", &ns, &["payments-api.com"]),
            &[r#"host "payments-api.com" is not under a domain delegated to logical cluster root:b"#],
        );
        bob.refused(
            &ingress("grab", &ns, &["shop.shared.example"]),
            &[r#"ingresses.networking.k8s.io "grab" is forbidden: host "shop.shared.example" is already claimed by an Ingress in another namespace"#],
        );
        // Every host of the shared ingresses at once.
        bob.refused(
            &format!(
                r#"{{"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {{"name": "grab", "namespace": "{ns}"}},
  "spec": {{"defaultBackend": {{"service": {{"name": "web", "port": {{"number": 80}}}}}}}}}}"#
            ),
            &["an Ingress of logical cluster root:b must name its hosts"],
        );
        // A record it writes itself is replaced by what the server admitted.
        let err = bob.fails(&[
            "-n",
            &ns,
            "create",
            "ingress",
            "grab",
            "--rule=*.com/*=web:80",
        ]);
        assert!(err.contains("is not under a domain delegated"), "{err}");
    }
    // Forging the record changes nothing.
    alice.ok(&[
        "-n",
        "shop",
        "annotate",
        "--overwrite",
        "ingress",
        "web",
        r#"sluice.dev/ingress-hosts=["*.com"]"#,
    ]);
    assert_eq!(admitted(), r#"["shop.shared.example","www.a.example"]"#);

    // Only admitted hosts reach the ingress and the clusterset DNS.
    let east_ingress = dev.described("east", "ingress");
    let east_ip = east_ingress.rsplit_once(':').unwrap().0.to_string();
    let dns = dev.described("east", "dns");
    assert!(
        eventually(Duration::from_secs(120), || through_ingress(
            &east_ingress,
            "shop.shared.example"
        )
        .starts_with("HTTP/1.1 200")),
        "{}",
        through_ingress(&east_ingress, "shop.shared.example")
    );
    assert!(eventually(Duration::from_secs(60), || dig(
        &dns,
        "shop.shared.example"
    ) == [
        east_ip.clone()
    ]));
    assert!(!dig(&dns, "payments-api.com").contains(&east_ip));

    // The platform admin takes shared.example back from a: alice's Ingress loses that host,
    // says so in an Event, and only www.a.example is served.
    root.ok(&[
        "patch",
        "workspace",
        "a",
        "--type=merge",
        "-p",
        r#"{"spec": {"policy": {"ingressDomains": ["a.example"]}}}"#,
    ]);
    assert!(
        eventually(Duration::from_secs(30), || admitted()
            == r#"["www.a.example"]"#),
        "{}",
        admitted()
    );
    let events = alice.ok(&[
        "-n",
        "shop",
        "get",
        "events",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(
        events.contains(r#"host "shop.shared.example" is not under a domain delegated to logical cluster root:a"#),
        "{events}"
    );
    assert!(
        eventually(Duration::from_secs(60), || dig(&dns, "shop.shared.example")
            .is_empty()),
        "{:?}",
        dig(&dns, "shop.shared.example")
    );
    assert!(eventually(Duration::from_secs(60), || through_ingress(
        &east_ingress,
        "shop.shared.example"
    )
    .starts_with("HTTP/1.1 404")));
    assert!(through_ingress(&east_ingress, "www.a.example").starts_with("HTTP/1.1 200"));
    // Now free, bob may claim it.
    let bob = Tenant::new(&dev, &bin, "root:b", "bob");
    let ns = format!("n{}", bin.len());
    let (ok, out) = bob.apply(&ingress("mine", &ns, &["shop.shared.example"]));
    assert!(ok, "{out}");
}
