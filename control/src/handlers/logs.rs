//! `GET /api/v1/namespaces/<ns>/pods/<name>/log`: container logs that the node agent of a
//! local cluster writes to `<pod-logs-dir>/<namespace>/<pod>/<container>/<restart>.log`.
//! Supports `container`, `previous`, `tailLines`, `limitBytes` and `follow`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, header};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use super::respond::{Ctx, Resp, full};
use super::scope::Scope;
use crate::errors::{ApiError, ApiResult};
use crate::state::ApiState;

/// Restart-numbered log files of a container, oldest first.
fn log_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<(u32, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let p = e.path();
            let n = p.file_stem()?.to_str()?.parse().ok()?;
            Some((n, p))
        })
        .collect();
    files.sort();
    files.into_iter().map(|(_, p)| p).collect()
}

/// The last `lines` lines of a log. Logs are bytes, not text: a process may write anything.
fn tail(text: &[u8], lines: usize) -> &[u8] {
    if lines == 0 {
        return &[];
    }
    let trimmed = text.strip_suffix(b"\n").unwrap_or(text);
    match trimmed
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, b)| **b == b'\n')
        .nth(lines - 1)
    {
        Some((i, _)) => &text[i + 1..],
        None => text,
    }
}

/// The physical cluster a pod of a logical cluster runs on: a mirror names it; a pod made
/// in the logical cluster runs where a syncer reports it from.
pub(super) fn running_on(pod: &Value) -> Option<&str> {
    let meta = &pod["metadata"];
    meta["labels"][sluice_api::sync::LABEL_CLUSTER]
        .as_str()
        .or_else(|| {
            meta["annotations"]
                .as_object()?
                .keys()
                .find_map(|k| k.strip_prefix(sluice_api::sync::STATUS_ANNOTATION_PREFIX))
        })
}

pub async fn serve(state: &ApiState, ctx: &Ctx, scope: &Scope<'_>, name: &str) -> ApiResult<Resp> {
    let (key, pod) = super::pod_container::pod(state, scope, name)?;
    // A mirror of a pod that runs on a physical cluster, or a pod made here that a
    // cluster runs (and reports on): its logs are there.
    if state.pod_logs_dir.is_none()
        && let Some(cluster) = running_on(&pod)
        && let Some(logical) = scope.cluster.as_ref()
    {
        return super::remote_logs::serve(
            state,
            ctx,
            logical,
            scope.namespace.as_deref().unwrap_or("default"),
            name,
            &sluice_api::ClusterName::new(cluster),
        )
        .await;
    }
    let Some(root) = &state.pod_logs_dir else {
        return Err(ApiError::BadRequest(format!(
            "pod {name:?} has no logs here: logs are served by the API server of the physical cluster the pod runs on"
        )));
    };
    let container = super::pod_container::choose(&pod, name, ctx.query.get("container"))?;
    let dir = root
        .join(scope.namespace.as_deref().unwrap_or("default"))
        .join(name)
        .join(&container);
    let files = log_files(&dir);
    // The running (or next) instance is `<restartCount>.log`; the previous one is before it.
    let restarts = pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == container.as_str())
        .and_then(|c| c["restartCount"].as_u64())
        .unwrap_or(0);
    let file = if ctx.query.flag("previous") {
        let previous = restarts
            .checked_sub(1)
            .map(|r| dir.join(format!("{r}.log")))
            .filter(|p| p.exists());
        previous.ok_or_else(|| {
            ApiError::BadRequest(format!(
                "previous terminated container \"{container}\" in pod \"{name}\" not found"
            ))
        })?
    } else {
        let current = dir.join(format!("{restarts}.log"));
        if current.exists() {
            current
        } else {
            files.last().cloned().ok_or_else(|| {
                ApiError::BadRequest(format!(
                    "container \"{container}\" in pod \"{name}\" is waiting to start: no logs yet"
                ))
            })?
        }
    };
    let text = tokio::fs::read(&file)
        .await
        .map_err(|e| ApiError::Internal(format!("reading {}: {e}", file.display())))?;
    let mut out = match ctx.query.number::<usize>("tailLines")? {
        Some(n) => tail(&text, n).to_vec(),
        None => text.clone(),
    };
    // As the kubelet does: a byte limit, which may end inside a multibyte character.
    if let Some(limit) = ctx.query.number::<usize>("limitBytes")? {
        out.truncate(limit);
    }
    if !ctx.query.flag("follow") {
        let mut r = Response::new(full(out));
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        return Ok(r);
    }
    // Follow: stream what is appended until the pod goes away or the client leaves.
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    let store = state.store.clone();
    let offset = text.len() as u64;
    tokio::spawn(async move {
        if tx.send(Bytes::from(out)).await.is_err() {
            return;
        }
        let Ok(mut f) = tokio::fs::File::open(&file).await else {
            return;
        };
        if f.seek(std::io::SeekFrom::Start(offset)).await.is_err() {
            return;
        }
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match f.read(&mut buf).await {
                Ok(0) => {
                    if store.get(&key).is_none() || tx.is_closed() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok(n) => {
                    if tx.send(Bytes::copy_from_slice(&buf[..n])).await.is_err() {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
    });
    Ok(super::respond::streamed(rx))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails() {
        assert_eq!(tail(b"a\nb\nc\n", 2), b"b\nc\n");
        assert_eq!(tail(b"a\nb\nc\n", 5), b"a\nb\nc\n");
        assert_eq!(tail(b"a\nb\nc", 1), b"c");
        assert_eq!(tail(b"a\n", 0), b"");
        assert_eq!(tail(b"\xff\xfe\nok\n", 1), b"ok\n");
    }
}
