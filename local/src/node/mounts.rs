//! A container's own mount namespace: the directories a Pod's volumes and ServiceAccount
//! credentials were written to, bind-mounted where the container expects them, as kubelet
//! mounts volumes — and the block devices of its `volumeDevices`, bind-mounted at their
//! `devicePath`. The host's files stay as they were; only the container sees the mounts.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// One directory (or block device) of the node mounted into a container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    pub source: PathBuf,
    /// Where the container sees it (an absolute path).
    pub target: String,
    pub read_only: bool,
    pub kind: MountKind,
}

/// What is mounted: it decides what the mount point is made as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MountKind {
    /// A directory, mounted on a directory.
    Directory,
    /// A block device (`volumeDevices`), mounted on a file at its `devicePath`.
    Device,
}

/// The programs that give a process its own mount namespace, by absolute path (a Pod's
/// `PATH` may lack them).
struct Tools {
    unshare: PathBuf,
    sh: PathBuf,
    mount: PathBuf,
    mkdir: PathBuf,
    touch: PathBuf,
}

/// Find `name` in the agent's `PATH`.
pub fn which(name: &str, path: &str) -> Option<PathBuf> {
    if name.contains('/') {
        return Path::new(name).is_file().then(|| PathBuf::from(name));
    }
    std::env::split_paths(path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The tools, when this machine lets the agent give a process its own mount namespace
/// (root, util-linux `unshare` and `mount`): checked once.
fn tools() -> Option<&'static Tools> {
    static TOOLS: OnceLock<Option<Tools>> = OnceLock::new();
    TOOLS
        .get_or_init(|| {
            let path = std::env::var("PATH").unwrap_or_default();
            let tools = Tools {
                unshare: which("unshare", &path)?,
                sh: which("sh", &path)?,
                mount: which("mount", &path)?,
                mkdir: which("mkdir", &path)?,
                touch: which("touch", &path)?,
            };
            let works = std::process::Command::new(&tools.unshare)
                .args(["--mount", "--propagation", "private", "true"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            works.then_some(tools)
        })
        .as_ref()
}

/// Whether containers can be given mounts on this machine.
pub fn available() -> bool {
    tools().is_some()
}

/// The name the mount setup runs under (`$0` of its script) until it execs the
/// container's command: a process whose command line has it is still being set up.
pub const SETTING_UP: &str = "sluice-mounts";

/// `argv` run with `mounts` in a mount namespace of its own (the same process: `unshare`
/// and `sh` exec into it); `None` where that cannot be done. A mount point missing on the
/// host is made (empty) first, as a container runtime makes it in the image: a directory,
/// or for a device an empty file in its directory.
pub fn wrap(argv: Vec<String>, mounts: &[Mount]) -> Option<Vec<String>> {
    if mounts.is_empty() {
        return Some(argv);
    }
    let t = tools()?;
    // Paths travel as positional parameters, never inside the script: any byte is safe.
    let (mkdir, mount, touch) = (t.mkdir.display(), t.mount.display(), t.touch.display());
    let mut script = String::new();
    for m in mounts {
        match m.kind {
            MountKind::Directory => script.push_str(&format!("{mkdir} -p \"$2\" && ")),
            // `${2%/*}/` is the device path's directory ("/" for "/name").
            MountKind::Device => {
                script.push_str(&format!("{mkdir} -p \"${{2%/*}}/\" && {touch} \"$2\" && "))
            }
        }
        script.push_str(&format!("{mount} --bind \"$1\" \"$2\" && "));
        if m.read_only {
            script.push_str(&format!("{mount} -o remount,bind,ro \"$2\" && "));
        }
        script.push_str("shift 2 && ");
    }
    script.push_str("exec \"$@\"");
    let mut out = vec![
        t.unshare.display().to_string(),
        "--mount".into(),
        "--propagation".into(),
        "private".into(),
        t.sh.display().to_string(),
        "-c".into(),
        script,
        SETTING_UP.into(),
    ];
    for m in mounts {
        out.push(m.source.display().to_string());
        out.push(m.target.clone());
    }
    out.extend(argv);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_are_made_in_order_then_the_program_runs() {
        if !available() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("greeting"), "hello").unwrap();
        let target = dir.path().join("in the container/etc");
        let argv = wrap(
            vec![
                "sh".into(),
                "-c".into(),
                "cat \"$0/greeting\" && ! touch \"$0/x\" 2>/dev/null".into(),
                target.display().to_string(),
            ],
            &[Mount {
                source: src.clone(),
                target: target.display().to_string(),
                read_only: true,
                kind: MountKind::Directory,
            }],
        )
        .unwrap();
        let out = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "hello");
        // The host sees the mount point, not the mount.
        assert!(target.is_dir());
        assert!(!target.join("greeting").exists());
        assert!(!src.join("x").exists());
    }
}
