//! What a volume holds, as the mover tells it: every directory, regular file (with its size
//! and SHA-256) and symbolic link under the root, by relative path, never following a link.
//! File names are bytes on Linux, not text: a path travels percent-encoded ([`EncodedPath`]),
//! and one that is absolute or climbs out (`..`) is refused on both ends.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use ring::digest::{Context, SHA256};
use serde::{Deserialize, Serialize};

use crate::error::MoverError;

/// The directory under the root where the mover keeps what it is fetching (partial files,
/// named by the checksum they should reach); never copied, never served.
pub const WORK_DIR: &str = ".sluice-mover";

/// A relative path, percent-encoded byte by byte (unreserved characters and `/` as they
/// are): valid UTF-8 for JSON and URLs whatever the file name's bytes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EncodedPath(String);

impl EncodedPath {
    /// The encoding of relative path `p`.
    pub fn of(p: &Path) -> Self {
        Self(encode(p.as_os_str().as_bytes()))
    }

    /// A path as it came encoded (checked when used: [`Self::under`]).
    pub fn from_encoded(s: &str) -> Self {
        Self(s.to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The path under `root` this names, if it is relative and stays under it: no empty,
    /// `.` or `..` component, no NUL, not the work directory.
    pub fn under(&self, root: &Path) -> Result<PathBuf, MoverError> {
        let bytes = decode(&self.0).ok_or_else(|| MoverError::UnsafePath(self.0.clone()))?;
        if bytes.is_empty() || bytes.contains(&0) {
            return Err(MoverError::UnsafePath(self.0.clone()));
        }
        let mut out = root.to_path_buf();
        for (i, c) in bytes.split(|b| *b == b'/').enumerate() {
            if c.is_empty() || c == b"." || c == b".." || (i == 0 && c == WORK_DIR.as_bytes()) {
                return Err(MoverError::UnsafePath(self.0.clone()));
            }
            out.push(std::ffi::OsStr::from_bytes(c));
        }
        Ok(out)
    }

    /// The parent's encoding (`None` at the top).
    pub fn parent(&self) -> Option<EncodedPath> {
        self.0.rsplit_once('/').map(|(p, _)| Self(p.to_string()))
    }

    /// Symlink targets and other raw bytes, encoded the same way.
    pub fn raw(bytes: &[u8]) -> Self {
        Self(encode(bytes))
    }

    /// The raw bytes (a symlink's target); `None` if the encoding is broken.
    pub fn bytes(&self) -> Option<Vec<u8>> {
        decode(&self.0)
    }
}

impl std::fmt::Display for EncodedPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn encode(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

fn decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

/// What one path is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Kind {
    Dir,
    File {
        size: u64,
        /// Lowercase hex.
        sha256: String,
    },
    Symlink {
        target: EncodedPath,
    },
}

/// One path of the volume.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub path: EncodedPath,
    /// Permission bits (`0o7777` at most).
    pub mode: u32,
    #[serde(flatten)]
    pub kind: Kind,
}

/// Every path of a volume, parents before children.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub entries: Vec<Entry>,
}

impl Manifest {
    /// Bytes of regular files.
    pub fn bytes(&self) -> u64 {
        self.entries
            .iter()
            .map(|e| match e.kind {
                Kind::File { size, .. } => size,
                _ => 0,
            })
            .sum()
    }

    /// The entries by path.
    pub fn by_path(&self) -> BTreeMap<&EncodedPath, &Entry> {
        self.entries.iter().map(|e| (&e.path, e)).collect()
    }

    /// The checksum of the whole manifest: two volumes with the same digest hold the same.
    pub fn digest(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        hex(ring::digest::digest(&SHA256, &json).as_ref())
    }
}

/// Walk `root` (not following links; the work directory skipped), hashing every file.
pub fn walk(root: &Path) -> Result<Manifest, MoverError> {
    let mut entries = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(&rel);
        let mut children: Vec<_> = std::fs::read_dir(&dir)
            .map_err(|e| MoverError::io(&dir, e))?
            .collect::<Result<_, _>>()
            .map_err(|e| MoverError::io(&dir, e))?;
        children.sort_by_key(|c| c.file_name());
        let mut subdirs = Vec::new();
        for c in children {
            let name = c.file_name();
            if rel.as_os_str().is_empty() && name.as_bytes() == WORK_DIR.as_bytes() {
                continue;
            }
            let rel_child = rel.join(&name);
            let full = root.join(&rel_child);
            let meta = std::fs::symlink_metadata(&full).map_err(|e| MoverError::io(&full, e))?;
            let mode = meta.permissions().mode() & 0o7777;
            let path = EncodedPath::of(&rel_child);
            let kind = if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&full).map_err(|e| MoverError::io(&full, e))?;
                Kind::Symlink {
                    target: EncodedPath::raw(&target.into_os_string().into_vec()),
                }
            } else if meta.is_dir() {
                subdirs.push(rel_child);
                Kind::Dir
            } else if meta.is_file() {
                let (size, sha256) = hash_file(&full)?;
                Kind::File { size, sha256 }
            } else {
                // Sockets, FIFOs and devices are not data: a volume's copy leaves them out.
                continue;
            };
            entries.push(Entry { path, mode, kind });
        }
        // Depth first, in name order: parents always come before their children.
        for d in subdirs.into_iter().rev() {
            stack.push(d);
        }
    }
    // Parents before children, siblings in order: sort by path components.
    entries.sort_by(|a, b| a.path.as_str().split('/').cmp(b.path.as_str().split('/')));
    Ok(Manifest { entries })
}

/// The size and SHA-256 of the file at `path` (the mover opens files without following a
/// link).
pub fn hash_file(path: &Path) -> Result<(u64, String), MoverError> {
    let (size, ctx) = hash_prefix(path)?;
    Ok((size, hex(ctx.finish().as_ref())))
}

/// The length of the file at `path` and its SHA-256 so far, to go on hashing what follows
/// (an interrupted fetch resumed).
pub fn hash_prefix(path: &Path) -> Result<(u64, Context), MoverError> {
    let mut f = open_nofollow(path)?;
    let mut ctx = Context::new(&SHA256);
    let mut buf = vec![0u8; 256 * 1024];
    let mut size = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(|e| MoverError::io(path, e))?;
        if n == 0 {
            return Ok((size, ctx));
        }
        size += n as u64;
        ctx.update(&buf[..n]);
    }
}

/// Open a file for reading, refusing a symbolic link in its place.
pub fn open_nofollow(path: &Path) -> Result<std::fs::File, MoverError> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(|e| MoverError::io(path, e))
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn any_file_name_travels_and_nothing_climbs_out() {
        let name = std::ffi::OsStr::from_bytes(b"caf\xc3\xa9 \xff%/x");
        let e = EncodedPath::of(Path::new(name));
        assert_eq!(e.as_str(), "caf%C3%A9%20%FF%25/x");
        let root = Path::new("/data");
        assert_eq!(e.under(root).unwrap(), root.join(name));
        for bad in [
            "..",
            "a/../..",
            "/etc/passwd",
            "a//b",
            "",
            "%00",
            ".",
            ".sluice-mover/x",
            "%2",
        ] {
            assert!(EncodedPath(bad.into()).under(root).is_err(), "{bad}");
        }
        // An encoded slash decodes to a separator (no file name holds one): checked too.
        assert!(EncodedPath("a%2F..".into()).under(root).is_err());
    }

    #[test]
    fn a_walk_lists_parents_first_hashes_files_and_follows_no_link() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("a/b")).unwrap();
        std::fs::write(d.path().join("a/b/f"), b"hello").unwrap();
        std::fs::write(d.path().join("z"), b"").unwrap();
        std::os::unix::fs::symlink("/etc", d.path().join("a/etc")).unwrap();
        std::fs::create_dir_all(d.path().join(WORK_DIR)).unwrap();
        std::fs::write(d.path().join(WORK_DIR).join("p"), b"x").unwrap();
        let m = walk(d.path()).unwrap();
        let paths: Vec<&str> = m.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["a", "a/b", "a/b/f", "a/etc", "z"]);
        assert_eq!(
            m.entries[2].kind,
            Kind::File {
                size: 5,
                sha256: "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824".into()
            }
        );
        assert_eq!(
            m.entries[3].kind,
            Kind::Symlink {
                target: EncodedPath("/etc".into())
            }
        );
        assert_eq!(m.bytes(), 5);
    }
}
