//! The Pod Security Standards' checks at version `latest`, as kube's PodSecurity admission
//! evaluates them: pure functions of a pod's metadata and spec that return kube's reason and
//! detail wording, in kube's order, so a refusal reads as kube-apiserver's would.

use std::collections::BTreeSet;

use serde_json::Value;

use sluice_api::tenancy::PodSecurityLevel as Level;

/// One failed check: kube's `ForbiddenReason` and `ForbiddenDetail`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub reason: &'static str,
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.detail.is_empty() {
            f.write_str(self.reason)
        } else {
            write!(f, "{} ({})", self.reason, self.detail)
        }
    }
}

/// What the checks read: a pod's (or pod template's) metadata and spec.
#[derive(Clone, Copy)]
pub struct PodView<'a> {
    pub metadata: &'a Value,
    pub spec: &'a Value,
}

type Check = fn(PodView<'_>) -> Option<Violation>;

/// The baseline level's checks, in kube's order (by check id).
const BASELINE: &[Check] = &[
    app_armor,
    capabilities_baseline,
    host_namespaces,
    host_path_volumes,
    host_ports,
    host_probes_and_lifecycle,
    privileged,
    proc_mount_baseline,
    se_linux_options,
    seccomp_baseline,
    sysctls,
    windows_host_process,
];

/// The restricted level's: the baseline checks it keeps, then its own by id (its
/// capabilities, procMount, volume and seccomp checks replace baseline's).
const RESTRICTED: &[Check] = &[
    app_armor,
    host_namespaces,
    host_ports,
    host_probes_and_lifecycle,
    privileged,
    se_linux_options,
    sysctls,
    windows_host_process,
    allow_privilege_escalation,
    capabilities_restricted,
    proc_mount_restricted,
    restricted_volumes,
    run_as_non_root,
    run_as_user,
    seccomp_restricted,
];

/// Every check that fails for `pod` at `level`, in kube's order.
pub fn evaluate(level: Level, pod: PodView<'_>) -> Vec<Violation> {
    let checks: &[Check] = match level {
        Level::Privileged => &[],
        Level::Baseline => BASELINE,
        Level::Restricted => RESTRICTED,
    };
    checks.iter().filter_map(|c| c(pod)).collect()
}

// --- helpers ---------------------------------------------------------------------------

fn pluralize<'a>(singular: &'a str, plural: &'a str, n: usize) -> &'a str {
    if n == 1 { singular } else { plural }
}

/// `"a", "b"`: each item quoted, nothing escaped (kube's `joinQuote`).
fn join_quote<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> String {
    items
        .into_iter()
        .map(|s| format!("\"{}\"", s.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `container "a"` / `containers "a", "b"`.
fn containers_phrase(names: &[&str]) -> String {
    format!(
        "{} {}",
        pluralize("container", "containers", names.len()),
        join_quote(names)
    )
}

/// Init containers, then containers, then ephemeral containers, as kube visits them.
fn containers(spec: &Value) -> impl Iterator<Item = &Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .flat_map(move |k| spec[k].as_array().into_iter().flatten())
}

fn name(c: &Value) -> &str {
    c["name"].as_str().unwrap_or_default()
}

fn is_true(v: &Value) -> bool {
    v.as_bool() == Some(true)
}

fn is_windows(spec: &Value) -> bool {
    spec["os"]["name"].as_str() == Some("windows")
}

fn host_users_false(spec: &Value) -> bool {
    spec["hostUsers"].as_bool() == Some(false)
}

/// Go's `%q` of `s`, for the few places kube quotes with it (annotation values).
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() || (c.is_whitespace() && c != ' ') => {
                if (c as u32) > 0xffff {
                    out.push_str(&format!("\\U{:08x}", c as u32));
                } else {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The container names (visit order) and the set of values of those that `bad` picks.
fn bad_containers<'a, F>(spec: &'a Value, mut bad: F) -> (Vec<&'a str>, BTreeSet<String>)
where
    F: FnMut(&'a Value) -> Option<Vec<String>>,
{
    let mut names = Vec::new();
    let mut values = BTreeSet::new();
    for c in containers(spec) {
        if let Some(v) = bad(c) {
            names.push(name(c));
            values.extend(v);
        }
    }
    (names, values)
}

// --- baseline ----------------------------------------------------------------------------

const APP_ARMOR_ANNOTATION: &str = "container.apparmor.security.beta.kubernetes.io/";

fn app_armor_type_bad(profile: &Value) -> Option<String> {
    if !profile.is_object() {
        return None;
    }
    let t = profile["type"].as_str().unwrap_or_default();
    (!matches!(t, "RuntimeDefault" | "Localhost")).then(|| t.to_string())
}

fn app_armor(pod: PodView<'_>) -> Option<Violation> {
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    if let Some(t) = app_armor_type_bad(&pod.spec["securityContext"]["appArmorProfile"]) {
        setters.push("pod".to_string());
        values.insert(t);
    }
    let (names, container_values) = bad_containers(pod.spec, |c| {
        app_armor_type_bad(&c["securityContext"]["appArmorProfile"]).map(|t| vec![t])
    });
    values.extend(container_values);
    if !names.is_empty() {
        setters.push(containers_phrase(&names));
    }
    let mut annotations: Vec<String> = pod.metadata["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with(APP_ARMOR_ANNOTATION))
        .filter_map(|(k, v)| {
            let v = v.as_str().unwrap_or_default();
            let ok = v.is_empty() || v == "runtime/default" || v.starts_with("localhost/");
            (!ok).then(|| format!("{k}={}", go_quote(v)))
        })
        .collect();
    annotations.sort();
    let mut list: Vec<String> = values.into_iter().collect();
    if !annotations.is_empty() {
        setters.push(pluralize("annotation", "annotations", annotations.len()).to_string());
    }
    list.extend(annotations);
    if setters.is_empty() {
        return None;
    }
    Some(Violation {
        reason: if list.len() == 1 {
            "forbidden AppArmor profile"
        } else {
            "forbidden AppArmor profiles"
        },
        detail: format!(
            "{} must not set AppArmor profile type to {}",
            setters.join(" and "),
            join_quote(&list)
        ),
    })
}

const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

fn strings(v: &Value) -> impl Iterator<Item = &str> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|s| s.as_str().unwrap_or_default())
}

fn capabilities_baseline(pod: PodView<'_>) -> Option<Violation> {
    let (names, caps) = bad_containers(pod.spec, |c| {
        let bad: Vec<String> = strings(&c["securityContext"]["capabilities"]["add"])
            .filter(|cap| !BASELINE_CAPABILITIES.contains(cap))
            .map(str::to_string)
            .collect();
        (!bad.is_empty()).then_some(bad)
    });
    (!names.is_empty()).then(|| Violation {
        reason: "non-default capabilities",
        detail: format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&names),
            join_quote(&caps)
        ),
    })
}

fn host_namespaces(pod: PodView<'_>) -> Option<Violation> {
    let set: Vec<&str> = [
        ("hostNetwork", "hostNetwork=true"),
        ("hostPID", "hostPID=true"),
        ("hostIPC", "hostIPC=true"),
    ]
    .into_iter()
    .filter(|(f, _)| is_true(&pod.spec[*f]))
    .map(|(_, s)| s)
    .collect();
    (!set.is_empty()).then(|| Violation {
        reason: "host namespaces",
        detail: set.join(", "),
    })
}

fn volumes(spec: &Value) -> impl Iterator<Item = &Value> {
    spec["volumes"].as_array().into_iter().flatten()
}

fn host_path_volumes(pod: PodView<'_>) -> Option<Violation> {
    let names: Vec<&str> = volumes(pod.spec)
        .filter(|v| !v["hostPath"].is_null())
        .map(name)
        .collect();
    (!names.is_empty()).then(|| Violation {
        reason: "hostPath volumes",
        detail: format!(
            "{} {}",
            pluralize("volume", "volumes", names.len()),
            join_quote(&names)
        ),
    })
}

fn host_ports(pod: PodView<'_>) -> Option<Violation> {
    let (names, ports) = bad_containers(pod.spec, |c| {
        let bad: Vec<String> = c["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["hostPort"].as_i64().filter(|h| *h != 0))
            .map(|h| h.to_string())
            .collect();
        (!bad.is_empty()).then_some(bad)
    });
    (!names.is_empty()).then(|| Violation {
        reason: "hostPort",
        detail: format!(
            "{} {} {} {}",
            containers_phrase(&names),
            pluralize("uses", "use", names.len()),
            pluralize("hostPort", "hostPorts", ports.len()),
            ports.into_iter().collect::<Vec<_>>().join(", ")
        ),
    })
}

fn host_probes_and_lifecycle(pod: PodView<'_>) -> Option<Violation> {
    let mut names = BTreeSet::new();
    let mut hosts = BTreeSet::new();
    for c in containers(pod.spec) {
        let handlers = [
            &c["livenessProbe"],
            &c["readinessProbe"],
            &c["startupProbe"],
            &c["lifecycle"]["postStart"],
            &c["lifecycle"]["preStop"],
        ];
        for h in handlers {
            for host in [&h["httpGet"]["host"], &h["tcpSocket"]["host"]] {
                if let Some(host) = host.as_str().filter(|s| !s.is_empty()) {
                    names.insert(name(c).to_string());
                    hosts.insert(host.to_string());
                }
            }
        }
    }
    (!names.is_empty()).then(|| Violation {
        reason: "probe or lifecycle host",
        detail: format!(
            "{} {} {} {} {}",
            pluralize("container", "containers", names.len()),
            join_quote(&names),
            pluralize("uses", "use", names.len()),
            pluralize(
                "probe or lifecycle host",
                "probe or lifecycle hosts",
                hosts.len()
            ),
            join_quote(&hosts)
        ),
    })
}

fn privileged(pod: PodView<'_>) -> Option<Violation> {
    let (names, _) = bad_containers(pod.spec, |c| {
        is_true(&c["securityContext"]["privileged"]).then(Vec::new)
    });
    (!names.is_empty()).then(|| Violation {
        reason: "privileged",
        detail: format!(
            "{} must not set securityContext.privileged=true",
            containers_phrase(&names)
        ),
    })
}

fn proc_mount(pod: PodView<'_>) -> Option<Violation> {
    let (names, values) = bad_containers(pod.spec, |c| {
        let m = c["securityContext"]["procMount"].as_str()?;
        (m != "Default").then(|| vec![m.to_string()])
    });
    (!names.is_empty()).then(|| Violation {
        reason: "procMount",
        detail: format!(
            "{} must not set securityContext.procMount to {}",
            containers_phrase(&names),
            join_quote(&values)
        ),
    })
}

fn proc_mount_baseline(pod: PodView<'_>) -> Option<Violation> {
    if host_users_false(pod.spec) {
        return None;
    }
    proc_mount(pod)
}

fn proc_mount_restricted(pod: PodView<'_>) -> Option<Violation> {
    proc_mount(pod)
}

const SELINUX_TYPES: &[&str] = &[
    "",
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

fn se_linux_options(pod: PodView<'_>) -> Option<Violation> {
    let mut types = BTreeSet::new();
    let (mut user_set, mut role_set) = (false, false);
    let mut bad = |o: &Value| -> bool {
        if !o.is_object() {
            return false;
        }
        let mut is_bad = false;
        let t = o["type"].as_str().unwrap_or_default();
        if !SELINUX_TYPES.contains(&t) {
            types.insert(t.to_string());
            is_bad = true;
        }
        if o["user"].as_str().is_some_and(|s| !s.is_empty()) {
            user_set = true;
            is_bad = true;
        }
        if o["role"].as_str().is_some_and(|s| !s.is_empty()) {
            role_set = true;
            is_bad = true;
        }
        is_bad
    };
    let mut setters = Vec::new();
    if bad(&pod.spec["securityContext"]["seLinuxOptions"]) {
        setters.push("pod".to_string());
    }
    let names: Vec<&str> = containers(pod.spec)
        .filter(|c| bad(&c["securityContext"]["seLinuxOptions"]))
        .map(name)
        .collect();
    if !names.is_empty() {
        setters.push(containers_phrase(&names));
    }
    if setters.is_empty() {
        return None;
    }
    let mut data = Vec::new();
    if !types.is_empty() {
        data.push(format!(
            "{} {}",
            pluralize("type", "types", types.len()),
            join_quote(&types)
        ));
    }
    if user_set {
        data.push("user may not be set".to_string());
    }
    if role_set {
        data.push("role may not be set".to_string());
    }
    Some(Violation {
        reason: "seLinuxOptions",
        detail: format!(
            "{} set forbidden securityContext.seLinuxOptions: {}",
            setters.join(" and "),
            data.join("; ")
        ),
    })
}

fn seccomp_type_bad(profile: &Value) -> Option<String> {
    if !profile.is_object() {
        return None;
    }
    let t = profile["type"].as_str().unwrap_or_default();
    (!matches!(t, "RuntimeDefault" | "Localhost")).then(|| t.to_string())
}

fn seccomp_baseline(pod: PodView<'_>) -> Option<Violation> {
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    if let Some(t) = seccomp_type_bad(&pod.spec["securityContext"]["seccompProfile"]) {
        setters.push("pod".to_string());
        values.insert(t);
    }
    let (names, container_values) = bad_containers(pod.spec, |c| {
        seccomp_type_bad(&c["securityContext"]["seccompProfile"]).map(|t| vec![t])
    });
    values.extend(container_values);
    if !names.is_empty() {
        setters.push(containers_phrase(&names));
    }
    (!setters.is_empty()).then(|| Violation {
        reason: "seccompProfile",
        detail: format!(
            "{} must not set securityContext.seccompProfile.type to {}",
            setters.join(" and "),
            join_quote(&values)
        ),
    })
}

const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.ipv4.tcp_slow_start_after_idle",
    "net.ipv4.tcp_notsent_lowat",
];

fn sysctls(pod: PodView<'_>) -> Option<Violation> {
    let bad: Vec<&str> = pod.spec["securityContext"]["sysctls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| s["name"].as_str().unwrap_or_default())
        .filter(|n| !SAFE_SYSCTLS.contains(n))
        .collect();
    (!bad.is_empty()).then(|| Violation {
        reason: "forbidden sysctls",
        detail: bad.join(", "),
    })
}

fn windows_host_process(pod: PodView<'_>) -> Option<Violation> {
    let mut setters = Vec::new();
    if is_true(&pod.spec["securityContext"]["windowsOptions"]["hostProcess"]) {
        setters.push("pod".to_string());
    }
    let (names, _) = bad_containers(pod.spec, |c| {
        is_true(&c["securityContext"]["windowsOptions"]["hostProcess"]).then(Vec::new)
    });
    if !names.is_empty() {
        setters.push(containers_phrase(&names));
    }
    (!setters.is_empty()).then(|| Violation {
        reason: "hostProcess",
        detail: format!(
            "{} must not set securityContext.windowsOptions.hostProcess=true",
            setters.join(" and ")
        ),
    })
}

// --- restricted --------------------------------------------------------------------------

fn allow_privilege_escalation(pod: PodView<'_>) -> Option<Violation> {
    if is_windows(pod.spec) {
        return None;
    }
    let (names, _) = bad_containers(pod.spec, |c| {
        (c["securityContext"]["allowPrivilegeEscalation"].as_bool() != Some(false)).then(Vec::new)
    });
    (!names.is_empty()).then(|| Violation {
        reason: "allowPrivilegeEscalation != false",
        detail: format!(
            "{} must set securityContext.allowPrivilegeEscalation=false",
            containers_phrase(&names)
        ),
    })
}

fn capabilities_restricted(pod: PodView<'_>) -> Option<Violation> {
    if is_windows(pod.spec) {
        return None;
    }
    let mut missing_drop = Vec::new();
    let mut adding = Vec::new();
    let mut caps = BTreeSet::new();
    for c in containers(pod.spec) {
        let capabilities = &c["securityContext"]["capabilities"];
        if !capabilities.is_object() {
            missing_drop.push(name(c));
            continue;
        }
        if !strings(&capabilities["drop"]).any(|d| d == "ALL") {
            missing_drop.push(name(c));
        }
        let mut forbidden = false;
        for cap in strings(&capabilities["add"]).filter(|cap| *cap != "NET_BIND_SERVICE") {
            caps.insert(cap.to_string());
            forbidden = true;
        }
        if forbidden {
            adding.push(name(c));
        }
    }
    let mut parts = Vec::new();
    if !missing_drop.is_empty() {
        parts.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            containers_phrase(&missing_drop)
        ));
    }
    if !adding.is_empty() {
        parts.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&adding),
            join_quote(&caps)
        ));
    }
    (!parts.is_empty()).then(|| Violation {
        reason: "unrestricted capabilities",
        detail: parts.join("; "),
    })
}

const ALLOWED_VOLUME_SOURCES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "image",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

const RESTRICTED_VOLUME_SOURCES: &[&str] = &[
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "nfs",
    "iscsi",
    "glusterfs",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "fc",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
];

fn restricted_volumes(pod: PodView<'_>) -> Option<Violation> {
    let mut names = Vec::new();
    let mut types = BTreeSet::new();
    for v in volumes(pod.spec) {
        let set = |k: &str| !v[k].is_null();
        if ALLOWED_VOLUME_SOURCES.iter().any(|k| set(k)) {
            continue;
        }
        names.push(name(v));
        types.insert(
            RESTRICTED_VOLUME_SOURCES
                .iter()
                .copied()
                .find(|k| set(k))
                .unwrap_or("unknown"),
        );
    }
    (!names.is_empty()).then(|| Violation {
        reason: "restricted volume types",
        detail: format!(
            "{} {} {} {} {}",
            pluralize("volume", "volumes", names.len()),
            join_quote(&names),
            pluralize("uses", "use", names.len()),
            pluralize(
                "restricted volume type",
                "restricted volume types",
                types.len()
            ),
            join_quote(&types)
        ),
    })
}

fn run_as_non_root(pod: PodView<'_>) -> Option<Violation> {
    if host_users_false(pod.spec) {
        return None;
    }
    let pod_value = pod.spec["securityContext"]["runAsNonRoot"].as_bool();
    let mut setters = Vec::new();
    if pod_value == Some(false) {
        setters.push("pod".to_string());
    }
    let pod_non_root = pod_value == Some(true);
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for c in containers(pod.spec) {
        match c["securityContext"]["runAsNonRoot"].as_bool() {
            Some(false) => explicit.push(name(c)),
            Some(true) => {}
            None if !pod_non_root => implicit.push(name(c)),
            None => {}
        }
    }
    if !explicit.is_empty() {
        setters.push(containers_phrase(&explicit));
    }
    if !setters.is_empty() {
        return Some(Violation {
            reason: "runAsNonRoot != true",
            detail: format!(
                "{} must not set securityContext.runAsNonRoot=false",
                setters.join(" and ")
            ),
        });
    }
    (!implicit.is_empty()).then(|| Violation {
        reason: "runAsNonRoot != true",
        detail: format!(
            "pod or {} must set securityContext.runAsNonRoot=true",
            containers_phrase(&implicit)
        ),
    })
}

fn run_as_user(pod: PodView<'_>) -> Option<Violation> {
    if host_users_false(pod.spec) {
        return None;
    }
    let mut setters = Vec::new();
    if pod.spec["securityContext"]["runAsUser"].as_i64() == Some(0) {
        setters.push("pod".to_string());
    }
    let (names, _) = bad_containers(pod.spec, |c| {
        (c["securityContext"]["runAsUser"].as_i64() == Some(0)).then(Vec::new)
    });
    if !names.is_empty() {
        setters.push(containers_phrase(&names));
    }
    (!setters.is_empty()).then(|| Violation {
        reason: "runAsUser=0",
        detail: format!("{} must not set runAsUser=0", setters.join(" and ")),
    })
}

fn seccomp_restricted(pod: PodView<'_>) -> Option<Violation> {
    if is_windows(pod.spec) {
        return None;
    }
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    let pod_profile = &pod.spec["securityContext"]["seccompProfile"];
    let mut pod_set = false;
    if pod_profile.is_object() {
        match seccomp_type_bad(pod_profile) {
            Some(t) => {
                setters.push("pod".to_string());
                values.insert(t);
            }
            None => pod_set = true,
        }
    }
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for c in containers(pod.spec) {
        let profile = &c["securityContext"]["seccompProfile"];
        if profile.is_object() {
            if let Some(t) = seccomp_type_bad(profile) {
                explicit.push(name(c));
                values.insert(t);
            }
        } else if !pod_set {
            implicit.push(name(c));
        }
    }
    if !explicit.is_empty() {
        setters.push(containers_phrase(&explicit));
    }
    if !setters.is_empty() {
        return Some(Violation {
            reason: "seccompProfile",
            detail: format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                setters.join(" and "),
                join_quote(&values)
            ),
        });
    }
    (!implicit.is_empty()).then(|| Violation {
        reason: "seccompProfile",
        detail: format!(
            "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
            containers_phrase(&implicit)
        ),
    })
}

#[cfg(test)]
mod tests;
