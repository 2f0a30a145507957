//! Watch: chunked newline-delimited JSON events. The initial state comes from one scan of
//! the in-memory store; live events come from the store's per-resource broadcast, so no
//! watcher ever reads storage.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;

use super::respond::{Ctx, Resp};
use super::scope::{Filter, Scope, collection_prefix};
use crate::errors::{ApiError, ApiResult};
use crate::metrics::ResourceLabels;
use crate::state::SharedState;
use crate::storage::{Event, EventType, Revision};

/// How a watch starts.
#[derive(Debug, PartialEq, Eq)]
enum Start {
    /// Send the current state as ADDED events, then changes.
    Snapshot { end_bookmark: bool },
    /// Send changes after this revision.
    From(Revision),
}

fn start_of(ctx: &Ctx) -> ApiResult<Start> {
    let rv = ctx.query.get("resourceVersion");
    let send_initial = ctx.query.get("sendInitialEvents").map(|v| v == "true");
    match send_initial {
        Some(true) => {
            if ctx.query.get("resourceVersionMatch") != Some("NotOlderThan") {
                return Err(ApiError::UnprocessableEntity(
                    "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless resourceVersionMatch is set to NotOlderThan".into(),
                ));
            }
            if !ctx.query.flag("allowWatchBookmarks") {
                return Err(ApiError::UnprocessableEntity(
                    "allowWatchBookmarks: Forbidden: allowWatchBookmarks must be true when sendInitialEvents is set".into(),
                ));
            }
            Ok(Start::Snapshot { end_bookmark: true })
        }
        Some(false) | None => match rv {
            None | Some("0") if send_initial.is_none() => Ok(Start::Snapshot {
                end_bookmark: false,
            }),
            None | Some("0") => Ok(Start::From(Revision(u64::MAX))),
            Some(v) => v
                .parse()
                .map(Start::From)
                .map_err(|_| ApiError::BadRequest(format!("invalid resource version: {v:?}"))),
        },
    }
}

fn frame(kind: &str, object: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(object.len() + 32);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    out.extend_from_slice(object);
    out.extend_from_slice(b"}\n");
    Bytes::from(out)
}

fn bookmark(kind: &str, api_version: &str, rv: Revision, initial_end: bool) -> Bytes {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    frame(
        "BOOKMARK",
        json!({"kind": kind, "apiVersion": api_version, "metadata": meta})
            .to_string()
            .as_bytes(),
    )
}

/// Which event (if any) a watcher with `filter` sees for `e`.
fn translate(filter: &Filter, e: &Event) -> Option<&'static str> {
    if filter.is_empty() {
        return Some(match e.kind {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        });
    }
    let now = filter.matches_bytes(&e.value);
    let before = e.previous.as_ref().is_some_and(|p| filter.matches_bytes(p));
    match (e.kind, before, now) {
        (EventType::Added, _, true) => Some("ADDED"),
        (EventType::Modified, false, true) => Some("ADDED"),
        (EventType::Modified, true, true) => Some("MODIFIED"),
        (EventType::Modified, true, false) => Some("DELETED"),
        (EventType::Deleted, _, true) => Some("DELETED"),
        _ => None,
    }
}

pub async fn serve(state: &SharedState, ctx: &Ctx, scope: &Scope<'_>) -> ApiResult<Resp> {
    let filter = Filter::from_ctx(ctx)?;
    let start = start_of(ctx)?;
    let bookmarks = ctx.query.flag("allowWatchBookmarks");
    let timeout = ctx
        .query
        .number::<u64>("timeoutSeconds")?
        .unwrap_or(state.limits.max_watch_seconds)
        .min(state.limits.max_watch_seconds);
    let prefix = collection_prefix(scope);
    let t = scope.t.clone();
    let cluster = scope.cluster.clone();
    let (tx, rx) = mpsc::channel::<Bytes>(64);

    // Initial state and the subscription, consistent with each other.
    let mut initial = Vec::new();
    let (from, end_bookmark) = match start {
        Start::Snapshot { end_bookmark } => {
            let rv = state.store.scan(&prefix, None, |_, e| {
                if filter.matches_bytes(&e.value) {
                    initial.push(e.value.clone());
                }
                true
            });
            (rv, end_bookmark)
        }
        Start::From(Revision(u64::MAX)) => (state.store.revision(), false),
        Start::From(rv) => (rv, false),
    };
    let subscription = state.store.watch(&t.prefix, from);
    let mut subscription = match subscription {
        Ok(s) => s,
        Err(e) => {
            // kube-apiserver reports an expired start revision as an ERROR event.
            let status = ApiError::from(e).to_status();
            let body = frame("ERROR", status.to_string().as_bytes());
            let mut r = Response::new(super::respond::full(body));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            return Ok(r);
        }
    };

    let api_version = t.api_version();
    let state2 = state.clone();
    let mut table = crate::table::wants_table(ctx.accept()).map(|v| TableFrames {
        version: v,
        include_object: ctx
            .query
            .get("includeObject")
            .unwrap_or("Metadata")
            .to_string(),
        columns_sent: false,
    });
    let labels = ResourceLabels {
        resource: t.resource.to_string(),
    };
    tokio::spawn(async move {
        let gauge = state2.metrics.open_watches.get_or_create(&labels).clone();
        gauge.inc();
        let _guard = scopeguard(move || {
            gauge.dec();
        });
        for obj in initial {
            let frame = event_frame(&state2, cluster.as_ref(), &mut table, &t, "ADDED", &obj).await;
            if tx.send(frame).await.is_err() {
                return;
            }
        }
        let mut last = from;
        if end_bookmark
            && tx
                .send(bookmark(&t.kind, &api_version, from, true))
                .await
                .is_err()
        {
            return;
        }
        let deadline = tokio::time::sleep(Duration::from_secs(timeout));
        tokio::pin!(deadline);
        let mut ticker =
            tokio::time::interval(Duration::from_secs(state2.limits.bookmark_seconds.max(1)));
        ticker.tick().await;
        loop {
            tokio::select! {
                _ = &mut deadline => return,
                _ = tx.closed() => return,
                _ = ticker.tick(), if bookmarks => {
                    if tx.send(bookmark(&t.kind, &api_version, last, false)).await.is_err() {
                        return;
                    }
                }
                event = subscription.next() => {
                    let event = match event {
                        Ok(e) => e,
                        Err(e) => {
                            let status = ApiError::from(e).to_status();
                            let _ = tx.send(frame("ERROR", status.to_string().as_bytes())).await;
                            return;
                        }
                    };
                    last = event.revision;
                    if !event.key.as_str().starts_with(&prefix) {
                        continue;
                    }
                    if let Some(kind) = translate(&filter, &event) {
                        let frame = event_frame(&state2, cluster.as_ref(), &mut table, &t, kind, &event.value).await;
                        if tx.send(frame).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
    });

    let stream = ReceiverStream::new(rx).map(|b| Ok::<_, std::convert::Infallible>(Frame::data(b)));
    let mut r = Response::new(StreamBody::new(stream).boxed());
    *r.status_mut() = StatusCode::OK;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(r)
}

/// Watch events rendered as one-row Tables; column definitions go with the first only.
struct TableFrames {
    version: &'static str,
    include_object: String,
    columns_sent: bool,
}

/// One event as the watcher asked for it: in its version (converted by the CRD's webhook
/// where one converts; an ERROR event when that fails), as a Table row if it asked for one.
async fn event_frame(
    state: &crate::state::ApiState,
    cluster: Option<&sluice_api::LogicalClusterPath>,
    table: &mut Option<TableFrames>,
    t: &crate::resources::ResourceType,
    kind: &str,
    object: &Bytes,
) -> Bytes {
    let object = &match super::scope::present_one(state, cluster, t, object.clone()).await {
        Ok(b) => b,
        Err(e) => return frame("ERROR", e.to_status().to_string().as_bytes()),
    };
    let Some(tf) = table else {
        return frame(kind, object);
    };
    let Ok(obj) = serde_json::from_slice::<serde_json::Value>(object) else {
        return frame(kind, object);
    };
    let rv = obj["metadata"]["resourceVersion"].clone();
    let rendered = crate::table::table(
        t,
        tf.version,
        &[obj],
        json!({"resourceVersion": rv}),
        &tf.include_object,
        !tf.columns_sent,
    );
    tf.columns_sent = true;
    frame(kind, rendered.to_string().as_bytes())
}

/// Runs a closure when dropped (metrics bookkeeping on every exit path).
struct Guard<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> Drop for Guard<F> {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

fn scopeguard<F: FnOnce()>(f: F) -> Guard<F> {
    Guard(Some(f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn frames_are_ndjson() {
        let f = frame("ADDED", br#"{"a":1}"#);
        let v: Value = serde_json::from_slice(&f[..f.len() - 1]).unwrap();
        assert_eq!(v["type"], "ADDED");
        assert_eq!(f.last(), Some(&b'\n'));
        let b = bookmark("Pod", "v1", Revision(7), true);
        let v: Value = serde_json::from_slice(&b[..b.len() - 1]).unwrap();
        assert_eq!(
            v["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
            "true"
        );
    }
}
