#![allow(clippy::unwrap_used)]
//! The audit log with the real kubectl: every request one JSON line (user, verb, logical
//! cluster, resource, namespace, name, code, latency), off unless asked for.

use crate::support;

use support::{Control, Kubectl, kubectls};

#[test]
fn every_request_is_one_json_line_in_the_audit_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.log");
    let control = Control::start(
        &dir.path().join("control"),
        &["--audit-log", log.to_str().unwrap()],
    );
    let k = Kubectl::new(
        &kubectls()[0],
        &control.kubeconfig,
        &dir.path().join("cache"),
    );
    k.ok(&["create", "configmap", "cfg", "--from-literal=a=b"]);
    k.ok(&["get", "configmap", "cfg"]);
    k.fails(&["get", "configmap", "missing"]);
    k.ok(&["delete", "configmap", "cfg"]);

    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    let find = |verb: &str, name: &str| {
        lines
            .iter()
            .find(|l| l["verb"] == verb && l["name"] == name && l["resource"] == "configmaps")
            .unwrap_or_else(|| panic!("no {verb} of {name} in {lines:#?}"))
    };
    let created = lines
        .iter()
        .find(|l| l["verb"] == "create" && l["resource"] == "configmaps")
        .unwrap_or_else(|| panic!("no create in {lines:#?}"));
    assert_eq!(created["code"], 201);
    assert_eq!(created["user"], "admin");
    assert_eq!(created["cluster"], "root");
    assert_eq!(created["namespace"], "default");
    assert_eq!(find("get", "cfg")["code"], 200);
    assert_eq!(find("get", "missing")["code"], 404);
    assert_eq!(find("delete", "cfg")["code"], 200);
    // Discovery and the rest are there too, each with its time and latency.
    assert!(lines.iter().any(|l| l["path"] == "/clusters/root/api"));
    for l in &lines {
        assert!(l["latencyMs"].as_f64().unwrap() >= 0.0, "{l}");
        assert!(l["time"].as_str().unwrap().ends_with('Z'), "{l}");
    }
}
