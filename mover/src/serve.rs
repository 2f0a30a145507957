//! The source side: HTTP/1.1 on one port, read-only. `GET /manifest` walks the volume now
//! and answers its [`Manifest`]; `GET /files/<path>` sends one file the last manifest
//! listed (from an offset with `Range: bytes=N-`, to resume); nothing else is served — no
//! path outside the volume, no link followed, no file the manifest did not list.

use std::collections::HashSet;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::error::MoverError;
use crate::manifest::{EncodedPath, Kind, Manifest, open_nofollow, walk};

type Body = BoxBody<Bytes, std::io::Error>;

/// How much of a file one read sends.
const CHUNK: usize = 256 * 1024;

/// The files the last manifest listed: the only ones served.
#[derive(Clone, Default)]
struct Listed(Arc<RwLock<HashSet<EncodedPath>>>);

/// Serve the volume at `root` on `listener` until `stop` turns true.
pub async fn serve(
    root: PathBuf,
    listener: TcpListener,
    mut stop: watch::Receiver<bool>,
) -> Result<(), MoverError> {
    let listed = Listed::default();
    loop {
        let (stream, peer) = tokio::select! {
            a = listener.accept() => a.map_err(|e| MoverError::io(&root, e))?,
            _ = stop.changed() => return Ok(()),
        };
        let (root, listed) = (root.clone(), listed.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let (root, listed) = (root.clone(), listed.clone());
                async move { Ok::<_, std::convert::Infallible>(answer(&root, &listed, req).await) }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%peer, error = %e, "connection ended");
            }
        });
    }
}

async fn answer(root: &std::path::Path, listed: &Listed, req: Request<Incoming>) -> Response<Body> {
    if req.method() != Method::GET {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "GET only\n");
    }
    let path = req.uri().path().to_string();
    if path == "/manifest" {
        let r = root.to_path_buf();
        let walked = tokio::task::spawn_blocking(move || walk(&r)).await;
        return match walked {
            Ok(Ok(m)) => {
                remember(listed, &m);
                tracing::info!(entries = m.entries.len(), bytes = m.bytes(), "manifest");
                let json = serde_json::to_vec(&m).unwrap_or_default();
                Response::builder()
                    .header(header::CONTENT_TYPE, "application/json")
                    .body(Full::new(Bytes::from(json)).map_err(|e| match e {}).boxed())
                    .unwrap_or_else(|_| plain(StatusCode::INTERNAL_SERVER_ERROR, "\n"))
            }
            Ok(Err(e)) => plain(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e}\n")),
            Err(e) => plain(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e}\n")),
        };
    }
    let Some(encoded) = path.strip_prefix("/files/") else {
        return plain(StatusCode::NOT_FOUND, "not found\n");
    };
    let encoded = EncodedPath::from_encoded(encoded);
    let known = listed
        .0
        .read()
        .map(|l| l.contains(&encoded))
        .unwrap_or(false);
    let full = match encoded.under(root) {
        Ok(p) if known => p,
        Ok(_) => return plain(StatusCode::NOT_FOUND, "not a file of the last manifest\n"),
        Err(e) => return plain(StatusCode::BAD_REQUEST, &format!("{e}\n")),
    };
    let from = req
        .headers()
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("bytes="))
        .and_then(|v| v.strip_suffix('-'))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    let opened = tokio::task::spawn_blocking(move || -> Result<_, MoverError> {
        let mut f = open_nofollow(&full)?;
        let len = f.metadata().map_err(|e| MoverError::io(&full, e))?.len();
        f.seek(SeekFrom::Start(from.min(len)))
            .map_err(|e| MoverError::io(&full, e))?;
        Ok((f, len))
    })
    .await;
    let (file, len) = match opened {
        Ok(Ok(x)) => x,
        Ok(Err(e)) => return plain(StatusCode::NOT_FOUND, &format!("{e}\n")),
        Err(e) => return plain(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e}\n")),
    };
    let status = if from > 0 {
        StatusCode::PARTIAL_CONTENT
    } else {
        StatusCode::OK
    };
    let body = StreamBody::new(chunks(file));
    Response::builder()
        .status(status)
        .header(header::CONTENT_LENGTH, len.saturating_sub(from))
        .body(BodyExt::boxed(body))
        .unwrap_or_else(|_| plain(StatusCode::INTERNAL_SERVER_ERROR, "\n"))
}

/// A file read in chunks on the blocking pool.
fn chunks(
    file: std::fs::File,
) -> impl futures::Stream<Item = Result<Frame<Bytes>, std::io::Error>> + Send {
    futures::stream::unfold(Some(file), |file| async move {
        let mut f = file?;
        let read = tokio::task::spawn_blocking(move || {
            let mut buf = vec![0u8; CHUNK];
            let n = f.read(&mut buf)?;
            buf.truncate(n);
            Ok::<_, std::io::Error>((f, buf))
        })
        .await
        .map_err(std::io::Error::other)
        .and_then(|r| r);
        match read {
            Ok((_, buf)) if buf.is_empty() => None,
            Ok((f, buf)) => Some((Ok(Frame::data(Bytes::from(buf))), Some(f))),
            Err(e) => Some((Err(e), None)),
        }
    })
}

fn remember(listed: &Listed, m: &Manifest) {
    let files = m
        .entries
        .iter()
        .filter(|e| matches!(e.kind, Kind::File { .. }))
        .map(|e| e.path.clone())
        .collect();
    if let Ok(mut l) = listed.0.write() {
        *l = files;
    }
}

fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let mut r = Response::new(
        Full::new(Bytes::from(text.to_string()))
            .map_err(|e| match e {})
            .boxed(),
    );
    *r.status_mut() = status;
    r
}
