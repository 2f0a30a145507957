//! kube's wording for each check, from the examples of kube's own tests and documentation.

use serde_json::{Value, json};

use super::*;

fn eval(level: Level, metadata: Value, spec: Value) -> Vec<String> {
    evaluate(
        level,
        PodView {
            metadata: &metadata,
            spec: &spec,
        },
    )
    .iter()
    .map(ToString::to_string)
    .collect()
}

fn baseline(spec: Value) -> Vec<String> {
    eval(Level::Baseline, json!({}), spec)
}

fn restricted(spec: Value) -> Vec<String> {
    eval(Level::Restricted, json!({}), spec)
}

/// What the restricted level asks of every container.
fn hardened(name: &str) -> Value {
    json!({"name": name, "image": "x", "securityContext": {
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": true,
        "seccompProfile": {"type": "RuntimeDefault"}
    }})
}

#[test]
fn privileged_passes_everything() {
    let spec = json!({"hostNetwork": true, "containers": [{"name": "c", "securityContext": {"privileged": true}}]});
    assert!(eval(Level::Privileged, json!({}), spec).is_empty());
}

#[test]
fn a_plain_pod_is_baseline() {
    assert!(baseline(json!({"containers": [{"name": "nginx", "image": "nginx"}]})).is_empty());
}

#[test]
fn baseline_refusals_read_as_kube_words_them() {
    assert_eq!(
        baseline(json!({"containers": [
            {"name": "init-nodejs", "securityContext": {"privileged": true}},
            {"name": "nginx", "securityContext": {"privileged": true}}
        ]})),
        [
            r#"privileged (containers "init-nodejs", "nginx" must not set securityContext.privileged=true)"#
        ]
    );
    assert_eq!(
        baseline(
            json!({"containers": [{"name": "c"}], "volumes": [{"name": "host", "hostPath": {"path": "/"}}]})
        ),
        [r#"hostPath volumes (volume "host")"#]
    );
    assert_eq!(
        baseline(json!({"hostNetwork": true, "hostPID": true, "containers": [{"name": "c"}]})),
        ["host namespaces (hostNetwork=true, hostPID=true)"]
    );
    assert_eq!(
        baseline(
            json!({"containers": [{"name": "c", "securityContext": {"capabilities": {"add": ["SYS_ADMIN", "CHOWN", "NET_ADMIN"]}}}]})
        ),
        [
            r#"non-default capabilities (container "c" must not include "NET_ADMIN", "SYS_ADMIN" in securityContext.capabilities.add)"#
        ]
    );
    assert_eq!(
        baseline(json!({"containers": [
            {"name": "a", "ports": [{"containerPort": 80}]},
            {"name": "b", "ports": [{"containerPort": 80, "hostPort": 8080}, {"hostPort": 10000}]},
            {"name": "c", "ports": [{"hostPort": 8080}]}
        ]})),
        [r#"hostPort (containers "b", "c" use hostPorts 10000, 8080)"#]
    );
    assert_eq!(
        baseline(
            json!({"containers": [{"name": "c"}], "securityContext": {"sysctls": [{"name": "kernel.msgmax"}, {"name": "net.ipv4.tcp_syncookies"}, {"name": "vm.x"}]}})
        ),
        ["forbidden sysctls (kernel.msgmax, vm.x)"]
    );
    assert_eq!(
        baseline(
            json!({"containers": [{"name": "c", "securityContext": {"procMount": "Unmasked"}}]})
        ),
        [r#"procMount (container "c" must not set securityContext.procMount to "Unmasked")"#]
    );
    assert_eq!(
        baseline(
            json!({"securityContext": {"seccompProfile": {"type": "Unconfined"}}, "containers": [{"name": "c"}]})
        ),
        [
            r#"seccompProfile (pod must not set securityContext.seccompProfile.type to "Unconfined")"#
        ]
    );
    assert_eq!(
        baseline(json!({
            "securityContext": {"seLinuxOptions": {"type": "foo", "user": "u"}},
            "containers": [{"name": "e", "securityContext": {"seLinuxOptions": {"type": "bar", "role": "r"}}}]
        })),
        [
            r#"seLinuxOptions (pod and container "e" set forbidden securityContext.seLinuxOptions: types "bar", "foo"; user may not be set; role may not be set)"#
        ]
    );
    assert_eq!(
        baseline(
            json!({"containers": [{"name": "c", "livenessProbe": {"httpGet": {"host": "10.0.0.1", "port": 80}}}]})
        ),
        [r#"probe or lifecycle host (container "c" uses probe or lifecycle host "10.0.0.1")"#]
    );
    assert_eq!(
        eval(
            Level::Baseline,
            json!({"annotations": {"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}}),
            json!({"containers": [{"name": "c"}]})
        ),
        [
            r#"forbidden AppArmor profile (annotation must not set AppArmor profile type to "container.apparmor.security.beta.kubernetes.io/c="unconfined"")"#
        ]
    );
    assert_eq!(
        baseline(
            json!({"containers": [{"name": "c", "securityContext": {"windowsOptions": {"hostProcess": true}}}]})
        ),
        [
            r#"hostProcess (container "c" must not set securityContext.windowsOptions.hostProcess=true)"#
        ]
    );
}

#[test]
fn restricted_asks_for_hardening_in_kube_order() {
    assert_eq!(
        restricted(
            json!({"containers": [{"name": "nginx-120", "securityContext": {"privileged": true}}]})
        ),
        [
            r#"privileged (container "nginx-120" must not set securityContext.privileged=true)"#,
            r#"allowPrivilegeEscalation != false (container "nginx-120" must set securityContext.allowPrivilegeEscalation=false)"#,
            r#"unrestricted capabilities (container "nginx-120" must set securityContext.capabilities.drop=["ALL"])"#,
            r#"runAsNonRoot != true (pod or container "nginx-120" must set securityContext.runAsNonRoot=true)"#,
            r#"seccompProfile (pod or container "nginx-120" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")"#,
        ]
    );
    assert!(restricted(json!({"containers": [hardened("a")]})).is_empty());
    // Pod-level settings cover every container.
    assert!(
        restricted(json!({
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "a", "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]
        }))
        .is_empty()
    );
}

#[test]
fn restricted_replaces_baselines_capability_and_volume_checks() {
    let mut c = hardened("a");
    c["securityContext"]["capabilities"]["add"] = json!(["CHOWN", "NET_BIND_SERVICE"]);
    assert_eq!(
        restricted(
            json!({"containers": [c], "volumes": [{"name": "h", "hostPath": {"path": "/"}}, {"name": "ok", "emptyDir": {}}]})
        ),
        [
            r#"unrestricted capabilities (container "a" must not include "CHOWN" in securityContext.capabilities.add)"#,
            r#"restricted volume types (volume "h" uses restricted volume type "hostPath")"#,
        ]
    );
    let mut root = hardened("b");
    root["securityContext"]["runAsUser"] = json!(0);
    root["securityContext"]["runAsNonRoot"] = json!(false);
    assert_eq!(
        restricted(json!({"containers": [root]})),
        [
            r#"runAsNonRoot != true (container "b" must not set securityContext.runAsNonRoot=false)"#,
            r#"runAsUser=0 (container "b" must not set runAsUser=0)"#,
        ]
    );
}

#[test]
fn every_kind_of_container_is_checked() {
    assert_eq!(
        baseline(json!({
            "initContainers": [{"name": "i", "securityContext": {"privileged": true}}],
            "containers": [{"name": "c"}],
            "ephemeralContainers": [{"name": "debug", "securityContext": {"privileged": true}}]
        })),
        [r#"privileged (containers "i", "debug" must not set securityContext.privileged=true)"#]
    );
}

#[test]
fn windows_pods_are_spared_the_linux_only_checks() {
    let spec = json!({"os": {"name": "windows"}, "securityContext": {"runAsNonRoot": true}, "containers": [{"name": "w"}]});
    assert!(restricted(spec).is_empty());
}

#[test]
fn user_namespaces_relax_what_kube_relaxes() {
    let spec = json!({"hostUsers": false, "containers": [{"name": "c", "securityContext": {"procMount": "Unmasked"}}]});
    assert!(baseline(spec).is_empty());
}

#[test]
fn odd_input_never_panics() {
    for spec in [
        json!(null),
        json!([]),
        json!({"containers": "x", "volumes": [1, null, {"name": 3}]}),
        json!({"containers": [null, 1, {"securityContext": {"capabilities": {"add": [1, null]}}}]}),
        json!({"securityContext": {"sysctls": [{"name": "\u{0}\"✓"}]}, "containers": [{"name": "\"ü\n"}]}),
    ] {
        for level in [Level::Baseline, Level::Restricted] {
            let _ = eval(
                level,
                json!({"annotations": {"container.apparmor.security.beta.kubernetes.io/x": "\u{7}\"q"}}),
                spec.clone(),
            );
        }
    }
}
