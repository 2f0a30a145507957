//! What one container runs, as kubelet and a runtime make it: its argv (built-in images,
//! `command` and `args`, `$(VAR)` expansion, the mount namespace wrapper), its environment
//! (the Pod's identity, `envFrom`, `env`, its credentials) and the start of its process
//! (its log, its stdin, its terminal). [`super::process`] runs, probes and restarts it.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use serde_json::Value;

use super::config::NodeConfig;
use super::mounts::{self, Mount};
use super::running::Stdin;
use super::service_account;
use super::terminal::Terminal;

/// The argv of a container: built-in images run the `sluice` binary.
pub fn argv(cfg: &NodeConfig, c: &Value) -> Result<Vec<String>, (String, String)> {
    let image = c["image"].as_str().unwrap_or("");
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect()
    };
    let command = strings(&c["command"]);
    let args = strings(&c["args"]);
    let repo = image.rsplit_once(':').map(|(r, _)| r).unwrap_or(image);
    let builtin = match repo {
        "sluice/echo" => Some("echo"),
        "sluice/loadgen" => Some("loadgen"),
        "sluice/mover" => Some("mover"),
        _ => None,
    };
    // The `sluice` image (any registry and tag): this binary, with the container's command
    // (a leading `sluice` dropped) and args.
    if repo.rsplit('/').next() == Some("sluice") {
        let skip = usize::from(
            command
                .first()
                .is_some_and(|c| c.rsplit('/').next() == Some("sluice")),
        );
        let rest: Vec<String> = command.into_iter().skip(skip).chain(args).collect();
        // Manifests written by others get only the test images' subcommands, not the
        // control plane's (which could read this machine's keys).
        if cfg.builtin_images_only
            && !matches!(
                rest.first().map(String::as_str),
                Some("whoami" | "echo" | "loadgen")
            )
        {
            return Err((
                "ImageNotBuiltIn".into(),
                format!(
                    "this node runs built-in images only (--builtin-images-only): the sluice image runs only whoami, echo and loadgen here, not {:?}",
                    rest.first().map(String::as_str).unwrap_or("")
                ),
            ));
        }
        let mut v = vec![cfg.sluice_bin.display().to_string()];
        v.extend(rest);
        return Ok(v);
    }
    // The mover reads and writes the directory it is given: on a node that trusts no
    // manifest, nothing but a claim's own mount would be safe to give it.
    if cfg.builtin_images_only && builtin == Some("mover") {
        return Err((
            "ImageNotBuiltIn".into(),
            "this node runs built-in images only (--builtin-images-only): the claim mover (sluice/mover) does not run here, so claims' data does not follow a move off or onto it".into(),
        ));
    }
    match (builtin, command.is_empty()) {
        (Some(sub), true) => {
            let mut v = vec![cfg.sluice_bin.display().to_string(), sub.to_string()];
            v.extend(args);
            Ok(v)
        }
        (None, false) if cfg.builtin_images_only => Err((
            "ImageNotBuiltIn".into(),
            format!(
                "image {image:?} is not built into Sluice, and this node runs built-in images only (--builtin-images-only): its command is not run"
            ),
        )),
        (_, false) => {
            let mut v = command;
            v.extend(args);
            Ok(v)
        }
        (None, true) => Err((
            "ImageNotBuiltIn".into(),
            format!(
                "image {image:?} is not built into Sluice and the container has no command: local clusters run processes, not images"
            ),
        )),
    }
}

/// Resolve a container's environment: the Pod's identity, then `envFrom`, then `env`.
pub async fn environment(
    client: &kube::Client,
    cfg: &NodeConfig,
    pod: &Value,
    c: &Value,
    ip: Ipv4Addr,
) -> Result<Vec<(String, String)>, String> {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or("default");
    let mut env = vec![
        ("POD_IP".to_string(), ip.to_string()),
        (
            "POD_NAME".to_string(),
            pod["metadata"]["name"].as_str().unwrap_or("").to_string(),
        ),
        ("POD_NAMESPACE".to_string(), ns.to_string()),
        ("SLUICE_CLUSTER".to_string(), cfg.cluster.clone()),
        (
            "HOSTNAME".to_string(),
            pod["spec"]["hostname"]
                .as_str()
                .or(pod["metadata"]["name"].as_str())
                .unwrap_or("")
                .to_string(),
        ),
    ];
    if let Some(dns) = cfg.dns {
        env.push((crate::resolve::ENV_SERVER.to_string(), dns.to_string()));
        env.push((
            crate::resolve::ENV_SEARCH.to_string(),
            format!("{ns}.svc.cluster.local svc.cluster.local cluster.local"),
        ));
    }
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let cm_data = |cm: ConfigMap| cm.data.unwrap_or_default();
    let secret_data = |s: Secret| -> std::collections::BTreeMap<String, String> {
        s.data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
            .collect()
    };
    for from in c["envFrom"].as_array().into_iter().flatten() {
        let prefix = from["prefix"].as_str().unwrap_or("");
        let data = if let Some(n) = from["configMapRef"]["name"].as_str() {
            cms.get(n)
                .await
                .map(cm_data)
                .map_err(|e| format!("configmap {n:?}: {e}"))?
        } else if let Some(n) = from["secretRef"]["name"].as_str() {
            secrets
                .get(n)
                .await
                .map(secret_data)
                .map_err(|e| format!("secret {n:?}: {e}"))?
        } else {
            continue;
        };
        env.extend(data.into_iter().map(|(k, v)| (format!("{prefix}{k}"), v)));
    }
    for e in c["env"].as_array().into_iter().flatten() {
        let name = e["name"].as_str().unwrap_or("").to_string();
        let value = if let Some(v) = e["value"].as_str() {
            v.to_string()
        } else if let Some(path) = e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            match path {
                "status.podIP" => ip.to_string(),
                "status.hostIP" => cfg.node_ip().to_string(),
                "spec.nodeName" => cfg.node_name.clone(),
                other => {
                    let mut v = pod;
                    for seg in other.split('.') {
                        v = &v[seg];
                    }
                    v.as_str().unwrap_or("").to_string()
                }
            }
        } else if let Some(r) = e["valueFrom"]["configMapKeyRef"].as_object() {
            let (n, k) = (
                r["name"].as_str().unwrap_or(""),
                r["key"].as_str().unwrap_or(""),
            );
            cm_data(
                cms.get(n)
                    .await
                    .map_err(|e| format!("configmap {n:?}: {e}"))?,
            )
            .get(k)
            .cloned()
            .ok_or(format!("configmap {n:?} has no key {k:?}"))?
        } else if let Some(r) = e["valueFrom"]["secretKeyRef"].as_object() {
            let (n, k) = (
                r["name"].as_str().unwrap_or(""),
                r["key"].as_str().unwrap_or(""),
            );
            secret_data(
                secrets
                    .get(n)
                    .await
                    .map_err(|e| format!("secret {n:?}: {e}"))?,
            )
            .get(k)
            .cloned()
            .ok_or(format!("secret {n:?} has no key {k:?}"))?
        } else {
            String::new()
        };
        env.push((name, value));
    }
    Ok(env)
}

/// The in-cluster environment for a container with credentials in `dir`, before the
/// container's own variables (which win).
pub fn with_credentials_env(
    cfg: &NodeConfig,
    dir: Option<&PathBuf>,
    env: Vec<(String, String)>,
) -> Vec<(String, String)> {
    match (dir, &cfg.api) {
        (Some(dir), Some(api)) => {
            let mut all = api.env();
            all.push((
                "SLUICE_SERVICE_ACCOUNT_DIR".into(),
                dir.display().to_string(),
            ));
            all.extend(env);
            all
        }
        _ => env,
    }
}

/// `argv` run with `mounts` (its volumes, then its credentials) where the container expects
/// them; a program that is not there is refused here, as exec would refuse it.
pub fn with_mounts_argv(
    volumes: Vec<Mount>,
    credentials: Option<&PathBuf>,
    argv: Vec<String>,
    env: &[(String, String)],
) -> Result<Vec<String>, (String, String)> {
    let mut mounts = volumes;
    let has_volumes = !mounts.is_empty();
    if let Some(dir) = credentials {
        mounts.push(Mount {
            source: dir.clone(),
            target: service_account::MOUNT.to_string(),
            read_only: true,
            kind: mounts::MountKind::Directory,
        });
    }
    if mounts.is_empty() {
        return Ok(argv);
    }
    let path = env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| std::env::var("PATH").unwrap_or_default());
    if let Some(program) = argv.first()
        && mounts::which(program, &path).is_none()
    {
        return Err((
            "RunContainerError".into(),
            format!("exec {program:?}: No such file or directory (os error 2)"),
        ));
    }
    match mounts::wrap(argv.clone(), &mounts) {
        Some(wrapped) => Ok(wrapped),
        // Credentials alone are still found through SLUICE_SERVICE_ACCOUNT_DIR.
        None if !has_volumes => Ok(argv),
        None => Err((
            "CreateContainerConfigError".into(),
            "volumes need a mount namespace of the container's own: run the node agent as root, with util-linux's unshare and mount".into(),
        )),
    }
}

/// `$(VAR)` in a command or its args replaced by the container's variable `VAR`, `$$`
/// by `$`; a reference to an unknown variable stays as written (kubelet's expansion).
pub fn expand(arg: &str, env: &[(String, String)]) -> String {
    let mut out = String::with_capacity(arg.len());
    let mut rest = arg;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
        {
            let name = &inner[..end];
            match env.iter().rev().find(|(k, _)| k == name) {
                Some((_, v)) => out.push_str(v),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// A container's process, its stdin when the node keeps one, its terminal when it has one.
pub type Spawned = (tokio::process::Child, Option<Stdin>, Option<Terminal>);

/// Start a container's process with its output appended to `out`/`err` (its log): with
/// `stdin: true` its stdin is a pipe the node keeps, with `tty: true` it runs on a
/// terminal of its own (its controlling terminal) whose output the node copies to the log
/// — so `attach` reaches both.
pub fn spawn(
    argv: &[String],
    env: Vec<(String, String)>,
    c: &Value,
    out: std::fs::File,
    err: std::fs::File,
) -> Result<Spawned, (String, String)> {
    let failed = |what: &dyn std::fmt::Display| ("RunContainerError".to_string(), what.to_string());
    let tty = c["tty"].as_bool() == Some(true);
    let stdin = c["stdin"].as_bool() == Some(true);
    let path = std::env::var("PATH").unwrap_or_default();
    let mut cmd = if tty {
        let setsid = mounts::which("setsid", &path)
            .ok_or_else(|| failed(&"tty: setsid (util-linux) is not installed on this node"))?;
        let mut cmd = tokio::process::Command::new(setsid);
        cmd.arg("--ctty").args(argv);
        cmd
    } else {
        let mut cmd = tokio::process::Command::new(&argv[0]);
        cmd.args(&argv[1..]);
        cmd
    };
    cmd.env_clear()
        .env("PATH", &path)
        .envs(env)
        .kill_on_drop(true);
    if let Some(dir) = c["workingDir"].as_str().filter(|d| !d.is_empty()) {
        cmd.current_dir(dir);
    }
    let exec_failed = |e: std::io::Error| failed(&format!("exec {:?}: {e}", argv[0]));
    if !tty {
        cmd.stdin(if stdin {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stdout(out)
        .stderr(err)
        .process_group(0);
        let mut child = cmd.spawn().map_err(exec_failed)?;
        let stdin = child.stdin.take().map(|w| Box::new(w) as Stdin);
        return Ok((child, stdin, None));
    }
    // setsid makes the process a session and process group of its own: killpg reaches it.
    let (terminal, secondary) = Terminal::open().map_err(|e| failed(&format!("tty: {e}")))?;
    let side = |t: &Terminal| t.side().map_err(|e| failed(&format!("tty: {e}")));
    let clone = || {
        secondary
            .try_clone()
            .map_err(|e| failed(&format!("tty: {e}")))
    };
    cmd.stdin(clone()?).stdout(clone()?).stderr(clone()?);
    let child = cmd.spawn().map_err(exec_failed)?;
    // Only the process holds the secondary side now: its exit ends the terminal's output.
    drop(cmd);
    drop(secondary);
    drop(err);
    let mut from = side(&terminal)?;
    let mut to = tokio::fs::File::from_std(out);
    tokio::spawn(async move {
        // Ends when the last holder of the secondary side is gone (EIO).
        let _ = tokio::io::copy(&mut from, &mut to).await;
    });
    let stdin = if stdin {
        Some(Box::new(side(&terminal)?) as Stdin)
    } else {
        None
    };
    Ok((child, stdin, Some(terminal)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_in_args_expand_as_kubelet_expands_them() {
        let env = vec![
            ("POD_IP".to_string(), "127.20.1.1".to_string()),
            ("CLUSTER".to_string(), "east".to_string()),
        ];
        assert_eq!(
            expand("--listen=$(POD_IP):53", &env),
            "--listen=127.20.1.1:53"
        );
        assert_eq!(expand("$(CLUSTER)-$(CLUSTER)", &env), "east-east");
        assert_eq!(expand("$(MISSING)", &env), "$(MISSING)");
        assert_eq!(expand("$$(POD_IP)", &env), "$(POD_IP)");
        assert_eq!(expand("cost: 5$ and $(", &env), "cost: 5$ and $(");
        assert_eq!(expand("ünïcode $(CLUSTER)", &env), "ünïcode east");
    }
}
