#![allow(clippy::unwrap_used)]
//! A volume copied over real sockets: what arrives is what the source holds (checked by
//! walking both), a second pass fetches only what changed, an interrupted fetch resumes,
//! and a source cannot make the target write outside its volume nor serve outside its own.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;

use sluice_mover::manifest::WORK_DIR;
use sluice_mover::{Pass, pull, serve, walk};
use tokio::net::TcpListener;
use tokio::sync::watch;

async fn source(root: &Path) -> (String, watch::Sender<bool>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let (tx, rx) = watch::channel(false);
    tokio::spawn(serve(root.to_path_buf(), l, rx));
    (addr, tx)
}

fn fill(root: &Path) {
    std::fs::create_dir_all(root.join("db/wal")).unwrap();
    std::fs::write(root.join("db/records"), "one\ntwo\n".repeat(10_000)).unwrap();
    std::fs::write(root.join("db/wal/0001"), vec![7u8; 3 << 20]).unwrap();
    std::fs::write(root.join("caf\u{e9} \u{1f600}"), b"any name").unwrap();
    std::os::unix::fs::symlink("db/records", root.join("latest")).unwrap();
}

#[tokio::test]
async fn a_volume_arrives_whole_and_a_second_pass_fetches_what_changed() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    fill(a.path());
    std::fs::write(b.path().join("stale"), b"not on the source").unwrap();
    let (addr, _stop) = source(a.path()).await;
    let first = pull(&addr, b.path(), Pass::Bulk).await.unwrap();
    assert_eq!(first.fetched_files, 3);
    assert_eq!(first.removed, 1);
    assert_eq!(walk(a.path()).unwrap(), walk(b.path()).unwrap());
    assert!(!b.path().join(WORK_DIR).exists());

    // The app writes on: one file grows, one goes, a directory comes.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(a.path().join("db/records"))
        .unwrap();
    f.write_all(b"three\n").unwrap();
    std::fs::remove_file(a.path().join("db/wal/0001")).unwrap();
    std::fs::create_dir(a.path().join("db/new")).unwrap();
    let second = pull(&addr, b.path(), Pass::Final).await.unwrap();
    assert_eq!(second.fetched_files, 1, "{second:?}");
    assert_eq!(second.kept_files, 1, "{second:?}");
    assert_eq!(second.removed, 1, "{second:?}");
    assert_eq!(second.digest, walk(a.path()).unwrap().digest());
    assert_eq!(walk(a.path()).unwrap(), walk(b.path()).unwrap());
}

#[tokio::test]
async fn an_interrupted_fetch_resumes_where_it_stopped() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let data: Vec<u8> = (0..(4u32 << 20)).map(|i| (i % 251) as u8).collect();
    std::fs::write(a.path().join("big"), &data).unwrap();
    let m = walk(a.path()).unwrap();
    let sha = match &m.entries[0].kind {
        sluice_mover::manifest::Kind::File { sha256, .. } => sha256.clone(),
        k => panic!("{k:?}"),
    };
    // What a killed mover left: the first megabyte, under the checksum it should reach.
    std::fs::create_dir_all(b.path().join(WORK_DIR)).unwrap();
    std::fs::write(
        b.path().join(WORK_DIR).join(format!("{sha}.part")),
        &data[..1 << 20],
    )
    .unwrap();
    let (addr, _stop) = source(a.path()).await;
    let p = pull(&addr, b.path(), Pass::Final).await.unwrap();
    assert_eq!(p.fetched_bytes, (3 << 20) as u64, "{p:?}");
    assert_eq!(std::fs::read(b.path().join("big")).unwrap(), data);
}

/// A source that lies: its manifest names a path outside the volume.
async fn liar(manifest: &'static str) -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let mut s = s.unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{manifest}",
                manifest.len()
            );
        }
    });
    addr
}

#[tokio::test]
async fn a_source_cannot_make_the_target_write_outside_its_volume() {
    let outer = tempfile::tempdir().unwrap();
    let b = outer.path().join("volume");
    std::fs::create_dir(&b).unwrap();
    for m in [
        r#"{"entries":[{"path":"../escaped","mode":420,"type":"file","size":1,"sha256":"00"}]}"#,
        r#"{"entries":[{"path":"/tmp/escaped","mode":420,"type":"dir"}]}"#,
        r#"{"entries":[{"path":"a/b","mode":420,"type":"dir"}]}"#,
        r#"{"entries":[{"path":".sluice-mover/x","mode":420,"type":"dir"}]}"#,
    ] {
        let addr = liar(m).await;
        let e = pull(&addr, &b, Pass::Final).await.unwrap_err();
        assert!(
            matches!(
                e,
                sluice_mover::MoverError::UnsafePath(_) | sluice_mover::MoverError::Orphan(_)
            ),
            "{m}: {e}"
        );
    }
    assert_eq!(std::fs::read_dir(outer.path()).unwrap().count(), 1);
    assert_eq!(std::fs::read_dir(&b).unwrap().count(), 0);
}

// The requests below block: the server needs a thread of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_serves_only_the_files_of_its_manifest() {
    let a = tempfile::tempdir().unwrap();
    let vol = a.path().join("volume");
    std::fs::create_dir(&vol).unwrap();
    std::fs::write(a.path().join("secret"), b"outside").unwrap();
    std::fs::write(vol.join("f"), b"inside").unwrap();
    std::os::unix::fs::symlink("../secret", vol.join("link")).unwrap();
    let (addr, _stop) = source(&vol).await;
    let get = |path: &str| {
        let mut s = TcpStream::connect(&addr).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    // Nothing before a manifest was asked for; then only its files, never through a link.
    assert!(get("/files/f").starts_with("HTTP/1.1 404"));
    assert!(get("/manifest").starts_with("HTTP/1.1 200"));
    assert!(get("/files/f").ends_with("inside"));
    for p in [
        "/files/link",
        "/files/..%2Fsecret",
        "/files/../secret",
        "/files/%2E%2E/secret",
    ] {
        let r = get(p);
        assert!(!r.contains("outside"), "{p}: {r}");
    }
}
