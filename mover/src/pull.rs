//! The target side: make a volume hold what the source's manifest lists. Files whose size
//! and SHA-256 already match are kept; the others are fetched into the work directory
//! under the checksum they should reach (so an interrupted fetch resumes with a `Range`),
//! checked, and only then renamed into place; what the source does not have is removed.
//!
//! Two passes make a move: a [`Pass::Bulk`] while the source's app still writes (a file
//! that changes under it is taken as it arrived: the final pass mends it), then a
//! [`Pass::Final`] once the app has stopped, which must match the manifest exactly — the
//! volume is walked again and compared entry by entry before the pull reports success.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use bytes::Bytes;
use http::{Request, StatusCode, header};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use ring::digest::{Context, SHA256};
use serde::Serialize;
use tokio::io::AsyncWriteExt;

use crate::error::MoverError;
use crate::manifest::{EncodedPath, Kind, Manifest, WORK_DIR, hex, walk};

/// Which pass of a move this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    /// While the app still runs on the source: changing files are taken as they arrive.
    Bulk,
    /// Once the app has stopped: everything must match, checked after.
    Final,
}

impl std::str::FromStr for Pass {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "bulk" => Ok(Self::Bulk),
            "final" => Ok(Self::Final),
            o => Err(format!("unknown pass {o:?}: bulk or final")),
        }
    }
}

/// What a pull did.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Pulled {
    pub entries: usize,
    /// Bytes of every file the manifest lists.
    pub bytes: u64,
    /// Bytes fetched (resumed fetches count what was fetched this time).
    pub fetched_bytes: u64,
    pub fetched_files: usize,
    /// Files already there with the right checksum.
    pub kept_files: usize,
    /// Paths removed because the source no longer has them.
    pub removed: usize,
    /// Files that changed while being fetched (bulk pass only).
    pub changed_in_flight: usize,
    /// The manifest's digest: the same on both ends when they hold the same.
    pub digest: String,
    pub seconds: f64,
}

/// Pull the source at `addr` (`host:port`) into `root`.
pub async fn pull(addr: &str, root: &Path, pass: Pass) -> Result<Pulled, MoverError> {
    let started = Instant::now();
    let mut client = Client::connect(addr).await?;
    let manifest = client.manifest().await?;
    check(&manifest, root)?;
    let work = root.join(WORK_DIR);
    tokio::fs::create_dir_all(&work)
        .await
        .map_err(|e| MoverError::io(&work, e))?;
    let mut out = Pulled {
        entries: manifest.entries.len(),
        bytes: manifest.bytes(),
        digest: manifest.digest(),
        ..Pulled::default()
    };
    for e in &manifest.entries {
        let path = e.path.under(root)?;
        match &e.kind {
            Kind::Dir => blocking(move || ensure_dir(&path)).await?,
            Kind::File { size, sha256 } => {
                let (p, want) = (path.clone(), (*size, sha256.clone()));
                let have = blocking(move || same_file(&p, &want)).await?;
                if have {
                    out.kept_files += 1;
                } else {
                    let part = work.join(format!("{sha256}.part"));
                    match client.fetch(&e.path, &part, *size, sha256).await {
                        Ok(n) => {
                            out.fetched_bytes += n;
                            out.fetched_files += 1;
                        }
                        Err(MoverError::Checksum { .. } | MoverError::Status { .. })
                            if pass == Pass::Bulk =>
                        {
                            // Written or removed while the app runs: the final pass
                            // fetches it again.
                            out.changed_in_flight += 1;
                            let _ = tokio::fs::remove_file(&part).await;
                            continue;
                        }
                        Err(err) => return Err(err),
                    }
                    let p = path.clone();
                    blocking(move || {
                        clear(&p, false)?;
                        std::fs::rename(&part, &p).map_err(|e| MoverError::io(&p, e))
                    })
                    .await?;
                }
                let (p, mode) = (path, e.mode);
                blocking(move || set_mode(&p, mode)).await?;
            }
            Kind::Symlink { target } => {
                let target = target
                    .bytes()
                    .ok_or_else(|| MoverError::UnsafePath(target.to_string()))?;
                blocking(move || ensure_symlink(&path, &target)).await?;
            }
        }
    }
    // What the source does not have goes; then the directories get their modes (last, so
    // that a read-only directory was writable while it was filled).
    let (r, m) = (root.to_path_buf(), manifest.clone());
    out.removed = blocking(move || remove_extra(&r, &m)).await?;
    for e in manifest.entries.iter().rev() {
        if matches!(e.kind, Kind::Dir) {
            let (p, mode) = (e.path.under(root)?, e.mode);
            blocking(move || set_mode(&p, mode)).await?;
        }
    }
    let _ = tokio::fs::remove_dir_all(&work).await;
    if pass == Pass::Final {
        let r = root.to_path_buf();
        let now = blocking(move || walk(&r)).await?;
        if now.digest() != out.digest {
            let want = manifest.by_path();
            let differ = now
                .entries
                .iter()
                .filter(|e| want.get(&e.path) != Some(e))
                .count()
                + want.len().saturating_sub(now.entries.len());
            return Err(MoverError::Manifest(format!(
                "after the final pass {differ} entries differ from the source's"
            )));
        }
    }
    out.seconds = started.elapsed().as_secs_f64();
    Ok(out)
}

/// Every entry is a safe path whose directory is listed before it.
fn check(m: &Manifest, root: &Path) -> Result<(), MoverError> {
    let mut dirs = std::collections::HashSet::new();
    for e in &m.entries {
        e.path.under(root)?;
        if let Some(parent) = e.path.parent()
            && !dirs.contains(&parent)
        {
            return Err(MoverError::Orphan(e.path.to_string()));
        }
        if matches!(e.kind, Kind::Dir) {
            dirs.insert(e.path.clone());
        }
    }
    Ok(())
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, MoverError> + Send + 'static,
) -> Result<T, MoverError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| MoverError::Http(e.to_string()))?
}

/// Remove whatever is at `p` unless it is what is wanted there (`dir`): a link is removed,
/// never followed.
fn clear(p: &Path, dir: bool) -> Result<(), MoverError> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() && !dir => std::fs::remove_dir_all(p).map_err(|e| MoverError::io(p, e)),
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => std::fs::remove_file(p).map_err(|e| MoverError::io(p, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(MoverError::io(p, e)),
    }
}

fn ensure_dir(p: &Path) -> Result<(), MoverError> {
    clear(p, true)?;
    match std::fs::create_dir(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(MoverError::io(p, e)),
    }?;
    // Writable while it is filled; its own mode comes at the end.
    set_mode(p, 0o700)
}

fn same_file(p: &Path, (size, sha256): &(u64, String)) -> Result<bool, MoverError> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_file() && m.len() == *size => {
            let (_, have) = crate::manifest::hash_file(p)?;
            Ok(&have == sha256)
        }
        _ => Ok(false),
    }
}

fn ensure_symlink(p: &Path, target: &[u8]) -> Result<(), MoverError> {
    if let Ok(have) = std::fs::read_link(p)
        && have.as_os_str().as_bytes() == target
    {
        return Ok(());
    }
    clear(p, false)?;
    std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(target), p)
        .map_err(|e| MoverError::io(p, e))
}

fn set_mode(p: &Path, mode: u32) -> Result<(), MoverError> {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode & 0o7777))
        .map_err(|e| MoverError::io(p, e))
}

/// Remove every path under `root` that `m` does not list (deepest first); how many went.
fn remove_extra(root: &Path, m: &Manifest) -> Result<usize, MoverError> {
    let want: std::collections::HashSet<&EncodedPath> = m.entries.iter().map(|e| &e.path).collect();
    let mut extra: Vec<(PathBuf, bool)> = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(&rel);
        for c in std::fs::read_dir(&dir).map_err(|e| MoverError::io(&dir, e))? {
            let c = c.map_err(|e| MoverError::io(&dir, e))?;
            let name = c.file_name();
            if rel.as_os_str().is_empty() && name.as_bytes() == WORK_DIR.as_bytes() {
                continue;
            }
            let rel_child = rel.join(&name);
            let is_dir = c.file_type().map(|t| t.is_dir()).unwrap_or(false);
            if !want.contains(&EncodedPath::of(&rel_child)) {
                extra.push((root.join(&rel_child), is_dir));
            } else if is_dir {
                stack.push(rel_child);
            }
        }
    }
    for (p, is_dir) in &extra {
        if *is_dir {
            std::fs::remove_dir_all(p).map_err(|e| MoverError::io(p, e))?;
        } else {
            std::fs::remove_file(p).map_err(|e| MoverError::io(p, e))?;
        }
    }
    Ok(extra.len())
}

/// One HTTP/1.1 connection to the source, kept alive across requests.
struct Client {
    addr: String,
    send: SendRequest<Empty<Bytes>>,
}

impl Client {
    async fn connect(addr: &str) -> Result<Self, MoverError> {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|source| MoverError::Connect {
                addr: addr.to_string(),
                source,
            })?;
        let _ = stream.set_nodelay(true);
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| MoverError::Http(e.to_string()))?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection to the source ended");
            }
        });
        Ok(Self {
            addr: addr.to_string(),
            send,
        })
    }

    async fn get(
        &mut self,
        path: &str,
        from: u64,
    ) -> Result<http::Response<hyper::body::Incoming>, MoverError> {
        let mut req = Request::get(path).header(header::HOST, &self.addr);
        if from > 0 {
            req = req.header(header::RANGE, format!("bytes={from}-"));
        }
        let req = req
            .body(Empty::new())
            .map_err(|e| MoverError::Http(e.to_string()))?;
        self.send
            .ready()
            .await
            .map_err(|e| MoverError::Http(e.to_string()))?;
        self.send
            .send_request(req)
            .await
            .map_err(|e| MoverError::Http(e.to_string()))
    }

    async fn manifest(&mut self) -> Result<Manifest, MoverError> {
        let resp = self.get("/manifest", 0).await?;
        if resp.status() != StatusCode::OK {
            return Err(MoverError::Status {
                status: resp.status().as_u16(),
                what: "the manifest".into(),
            });
        }
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| MoverError::Http(e.to_string()))?
            .to_bytes();
        serde_json::from_slice(&body).map_err(|e| MoverError::Manifest(e.to_string()))
    }

    /// Fetch `path` into `part` (resuming what is there), check it; the bytes fetched now.
    async fn fetch(
        &mut self,
        path: &EncodedPath,
        part: &Path,
        size: u64,
        sha256: &str,
    ) -> Result<u64, MoverError> {
        // What an earlier try left: hashed again, then continued.
        let mut ctx = Context::new(&SHA256);
        let mut have = 0u64;
        if let Ok(m) = tokio::fs::symlink_metadata(part).await
            && m.is_file()
            && m.len() <= size
        {
            let p = part.to_path_buf();
            let (n, c) = blocking(move || crate::manifest::hash_prefix(&p)).await?;
            have = n;
            ctx = c;
        } else {
            let _ = tokio::fs::remove_file(part).await;
        }
        let resp = self.get(&format!("/files/{path}"), have).await?;
        match resp.status() {
            StatusCode::OK => {
                // Sent whole: start over.
                have = 0;
                ctx = Context::new(&SHA256);
                let _ = tokio::fs::remove_file(part).await;
            }
            StatusCode::PARTIAL_CONTENT => {}
            s => {
                // Drain it so the connection stays usable.
                let _ = resp.into_body().collect().await;
                return Err(MoverError::Status {
                    status: s.as_u16(),
                    what: path.to_string(),
                });
            }
        }
        let file = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(part)
            .await
            .map_err(|e| MoverError::io(part, e))?;
        let mut w = tokio::io::BufWriter::with_capacity(1 << 20, file);
        let mut body = resp.into_body();
        let mut fetched = 0u64;
        let mut total = have;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| MoverError::Http(e.to_string()))?;
            if let Ok(data) = frame.into_data() {
                ctx.update(&data);
                w.write_all(&data)
                    .await
                    .map_err(|e| MoverError::io(part, e))?;
                fetched += data.len() as u64;
                total += data.len() as u64;
            }
        }
        w.flush().await.map_err(|e| MoverError::io(part, e))?;
        let got = hex(ctx.finish().as_ref());
        if got != sha256 || total != size {
            let _ = tokio::fs::remove_file(part).await;
            return Err(MoverError::Checksum {
                path: path.to_string(),
                got,
                got_size: total,
                want: sha256.to_string(),
                want_size: size,
            });
        }
        Ok(fetched)
    }
}
