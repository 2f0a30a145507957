//! A command run beside a container's process, as a runtime runs `exec` and exec probes: in
//! that process's environment and working directory, and inside its mount namespace when
//! it has its own (the container's volumes and files where the container sees them).
//! `kubectl exec` ([`super::streaming`]), exec probes and `preStop` exec hooks
//! ([`super::probe`]) all run their commands this way.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use super::mounts;

/// The environment of process `pid`, as it started.
fn environment_of(pid: u32) -> std::io::Result<Vec<(OsString, OsString)>> {
    let raw = std::fs::read(format!("/proc/{pid}/environ"))?;
    Ok(raw
        .split(|b| *b == 0)
        .filter_map(|kv| {
            let at = kv.iter().position(|b| *b == b'=')?;
            Some((
                OsString::from_vec(kv[..at].to_vec()),
                OsString::from_vec(kv[at + 1..].to_vec()),
            ))
        })
        .collect())
}

/// Whether `pid` is still the setup of a container's mounts ([`mounts::wrap`]), not yet
/// its command; or has no command line yet (caught in the middle of its exec).
fn setting_up(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|raw| {
        raw.is_empty()
            || raw
                .split(|b| *b == 0)
                .skip(1)
                .any(|arg| arg == mounts::SETTING_UP.as_bytes())
    })
}

/// Whether `pid` lives in a mount namespace other than the agent's.
fn own_mount_namespace(pid: u32) -> bool {
    let ns = |p: &str| std::fs::read_link(Path::new(p).join("ns/mnt")).ok();
    let theirs = ns(&format!("/proc/{pid}"));
    theirs.is_some() && theirs != ns("/proc/self")
}

/// The node's path to `tool`, or why it cannot be run.
fn tool(tool: &str) -> std::io::Result<PathBuf> {
    mounts::which(tool, &std::env::var("PATH").unwrap_or_default())
        .ok_or_else(|| std::io::Error::other(format!("{tool} is not installed on this node")))
}

/// `argv` as it runs beside process `pid`, killed when dropped; `session`: in a session of
/// its own whose controlling terminal is its stdin (the caller gives it the terminal).
/// Returns the environment it was given too. The caller sets its streams.
pub fn command(
    argv: &[String],
    pid: u32,
    session: bool,
) -> std::io::Result<(tokio::process::Command, Vec<(OsString, OsString)>)> {
    let Some(first) = argv.first() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "no command",
        ));
    };
    // Until the container's own command runs, its mounts may not be there yet.
    if setting_up(pid) {
        return Err(std::io::Error::other("the container is still starting"));
    }
    let env = environment_of(pid)?;
    let mut full: Vec<OsString> = Vec::new();
    if session {
        full.extend([tool("setsid")?.into_os_string(), "--ctty".into()]);
    }
    let own_mounts = own_mount_namespace(pid);
    if own_mounts {
        full.push(tool("nsenter")?.into_os_string());
        full.extend(["--target".into(), pid.to_string().into(), "--mount".into()]);
        full.extend(["--wd".into(), "--".into()]);
    }
    full.push(OsString::from(first));
    full.extend(argv[1..].iter().map(OsString::from));
    let mut cmd = tokio::process::Command::new(&full[0]);
    cmd.args(&full[1..]);
    if !own_mounts && let Ok(cwd) = std::fs::read_link(format!("/proc/{pid}/cwd")) {
        cmd.current_dir(cwd);
    }
    cmd.env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .kill_on_drop(true);
    Ok((cmd, env))
}
