//! Raw block volumes on a local node (`volumeMode: Block`): a claim's volume is a sparse
//! image file `<volumes>/claims/<claim uid>.img` of the size it asked for, attached to a
//! loop device when a container asks for it in `volumeDevices` and bind-mounted at its
//! `devicePath` ([`super::mounts`]), as a CSI driver stages a block volume and kubelet
//! publishes it. The loop device stays attached while the claim lives (a restarted
//! container finds the same bytes), and is detached when the claim's volume is reclaimed
//! ([`super::reclaim`]) or the node stops. Needs root and util-linux's `losetup`; without
//! them a block claim is refused with a reason, never served as a directory.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::claim_volume::claim_dir;

/// Why a block volume could not be served.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BlockError {
    #[error(
        "block volumes need loop devices: run the node agent as root, with util-linux's losetup"
    )]
    NoLoopDevices,
    #[error("claim uid {0:?} cannot name a file")]
    BadUid(String),
    #[error("{path}: {reason}")]
    Image { path: String, reason: String },
    #[error("losetup {path}: {reason}")]
    Losetup { path: String, reason: String },
}

/// The image file of the block claim of `claim_uid` under `volumes`.
pub fn image(volumes: &Path, claim_uid: &str) -> Result<PathBuf, BlockError> {
    let dir = claim_dir(volumes, claim_uid).ok_or_else(|| BlockError::BadUid(claim_uid.into()))?;
    Ok(dir.with_extension("img"))
}

/// `losetup`, when this machine lets the agent attach loop devices.
fn losetup() -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let tool = super::mounts::which("losetup", &path)?;
    Path::new("/dev/loop-control").exists().then_some(tool)
}

/// Whether this node can serve block volumes.
pub fn available() -> bool {
    losetup().is_some() && super::mounts::available()
}

/// Make the image of `bytes` (sparse: it takes disk as it is written), unless it exists.
pub fn create(image: &Path, bytes: u64) -> Result<(), BlockError> {
    if !available() {
        return Err(BlockError::NoLoopDevices);
    }
    let fail = |e: std::io::Error| BlockError::Image {
        path: image.display().to_string(),
        reason: e.to_string(),
    };
    if let Some(parent) = image.parent() {
        std::fs::create_dir_all(parent).map_err(fail)?;
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(image)
        .map_err(fail)?;
    // Never shrunk: an image that exists keeps its bytes.
    if file.metadata().map_err(fail)?.len() < bytes {
        file.set_len(bytes).map_err(fail)?;
    }
    Ok(())
}

/// The loop device `image` is attached to, attaching it if it is not.
pub fn attach(image: &Path) -> Result<PathBuf, BlockError> {
    let tool = losetup().ok_or(BlockError::NoLoopDevices)?;
    if !image.is_file() {
        return Err(BlockError::Image {
            path: image.display().to_string(),
            reason: "no such image: the claim is not provisioned on this node".into(),
        });
    }
    if let Some(dev) = attached(&tool, image)?.into_iter().next() {
        return Ok(dev);
    }
    let out = run(&tool, &["--find", "--show"], image)?;
    let dev = out.trim();
    if !dev.starts_with("/dev/") {
        return Err(BlockError::Losetup {
            path: image.display().to_string(),
            reason: format!("unexpected answer {dev:?}"),
        });
    }
    tracing::info!(image = %image.display(), device = dev, "block volume attached");
    Ok(PathBuf::from(dev))
}

/// Detach every loop device `image` is attached to and remove it (the claim is gone).
pub fn remove(image: &Path) -> Result<(), BlockError> {
    if let Some(tool) = losetup() {
        detach_all(&tool, image)?;
    }
    match std::fs::remove_file(image) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(BlockError::Image {
            path: image.display().to_string(),
            reason: e.to_string(),
        }),
    }
}

/// Detach the loop devices of every image under `volumes` (the node stops: the images stay
/// for the next start, the devices go back to the machine).
pub fn detach_node(volumes: &Path) {
    let Some(tool) = losetup() else { return };
    let Ok(entries) = std::fs::read_dir(volumes.join("claims")) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().is_some_and(|x| x == "img")
            && let Err(err) = detach_all(&tool, &path)
        {
            tracing::warn!(error = %err, "detaching a block volume");
        }
    }
}

fn detach_all(tool: &Path, image: &Path) -> Result<(), BlockError> {
    if !image.exists() {
        return Ok(());
    }
    for dev in attached(tool, image)? {
        let dev = dev.display().to_string();
        run(tool, &["--detach", &dev], Path::new(""))?;
        tracing::info!(image = %image.display(), device = dev, "block volume detached");
    }
    Ok(())
}

/// The loop devices `image` is attached to (`losetup --associated`).
fn attached(tool: &Path, image: &Path) -> Result<Vec<PathBuf>, BlockError> {
    let out = run(tool, &["--associated"], image)?;
    Ok(out.lines().filter_map(device_of).collect())
}

/// The device of one line of `losetup --associated`: `/dev/loop3: [2049]:1234 (/path)`.
fn device_of(line: &str) -> Option<PathBuf> {
    let (dev, _) = line.split_once(':')?;
    dev.starts_with("/dev/").then(|| PathBuf::from(dev))
}

/// `losetup ARGS [image]`: its standard output, or why it failed.
fn run(tool: &Path, args: &[&str], image: &Path) -> Result<String, BlockError> {
    let mut cmd = Command::new(tool);
    cmd.args(args);
    if !image.as_os_str().is_empty() {
        cmd.arg(image);
    }
    let fail = |reason: String| BlockError::Losetup {
        path: image.display().to_string(),
        reason,
    };
    let out = cmd.output().map_err(|e| fail(e.to_string()))?;
    if !out.status.success() {
        return Err(fail(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_is_named_after_the_claim_uid_only() {
        let root = Path::new("/v");
        assert_eq!(
            image(root, "abc").unwrap(),
            PathBuf::from("/v/claims/abc.img")
        );
        for bad in ["", "..", "a/b"] {
            assert!(image(root, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn losetup_lines_name_their_device() {
        assert_eq!(
            device_of("/dev/loop3: [2049]:1234 (/v/claims/x.img)"),
            Some(PathBuf::from("/dev/loop3"))
        );
        assert_eq!(device_of("garbage"), None);
        assert_eq!(device_of("x: y"), None);
    }

    #[test]
    fn an_image_attaches_once_keeps_its_bytes_and_detaches_on_removal() {
        if !available() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let img = image(dir.path(), "u1").unwrap();
        create(&img, 1 << 20).unwrap();
        let dev = attach(&img).unwrap();
        assert_eq!(attach(&img).unwrap(), dev, "attached once");
        std::fs::write(&dev, b"hello").unwrap();
        // Created again: not truncated.
        create(&img, 1 << 20).unwrap();
        assert_eq!(&std::fs::read(&img).unwrap()[..5], b"hello");
        assert_eq!(std::fs::metadata(&img).unwrap().len(), 1 << 20);
        // In a container, the device is at its devicePath, written through to the image.
        let target = dir.path().join("dev/xvda");
        let argv = super::super::mounts::wrap(
            vec![
                "sh".into(),
                "-c".into(),
                "test -b \"$0\" && printf world | dd of=\"$0\" bs=5 seek=1 conv=notrunc,fsync 2>/dev/null"
                    .into(),
                target.display().to_string(),
            ],
            &[super::super::mounts::Mount {
                source: dev.clone(),
                target: target.display().to_string(),
                read_only: false,
                kind: super::super::mounts::MountKind::Device,
            }],
        )
        .unwrap();
        let out = Command::new(&argv[0]).args(&argv[1..]).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        assert!(
            target.is_file(),
            "the host sees the mount point, not the device"
        );
        detach_node(dir.path());
        assert_eq!(&std::fs::read(&img).unwrap()[..10], b"helloworld");
        let tool = losetup().unwrap();
        assert!(attached(&tool, &img).unwrap().is_empty());
        let again = attach(&img).unwrap();
        remove(&img).unwrap();
        assert!(!img.exists());
        let still = Command::new(&tool).arg("--list").output().unwrap();
        assert!(
            !String::from_utf8_lossy(&still.stdout).contains(&img.display().to_string()),
            "{again:?} detached"
        );
    }
}
