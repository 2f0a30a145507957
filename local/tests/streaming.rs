#![allow(clippy::unwrap_used)]
//! The node agent's streaming endpoint over its real socket, spoken to as the cluster's API
//! server forwards a client: both channel protocols (v5 and v4), stdin and its close, the
//! exit code on the error channel, and a client that goes away; port-forward over WebSocket
//! channels (a refused port said on its error channel, the others unharmed); attach to a
//! container's stdin and output until it exits; the Pods' usage. kubectl's SPDY
//! port-forward is tested end to end (`cli/tests/debug.rs`).

use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::Value;
use sluice_local::node::running::{Attachable, ContainerRef, Running, Stdin};
use sluice_local::node::streaming;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

struct Node {
    socket: std::path::PathBuf,
    _shutdown: tokio::sync::watch::Sender<bool>,
    _container: tokio::process::Child,
    _registered: sluice_local::node::running::Registered,
    _dir: tempfile::TempDir,
}

/// A node whose one container (`default/web/main`) is a `sleep` started here, in `dir`.
async fn node() -> Node {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("node.sock");
    let running = Arc::new(Running::default());
    let container = tokio::process::Command::new("sleep")
        .arg("60")
        .current_dir(dir.path())
        .env("GREETING", "hi")
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let registered = running.register(
        ContainerRef {
            namespace: "default".into(),
            pod: "web".into(),
            container: "main".into(),
        },
        container.id().unwrap(),
        std::net::Ipv4Addr::LOCALHOST,
        Attachable::new(dir.path().join("main.log"), None, false, None),
    );
    // `default/web/echoer` reads its stdin (`stdin: true`, `stdinOnce: true`) and answers
    // in its log, as a container of the node agent does.
    let log = dir.path().join("echoer.log");
    let out = std::fs::File::create(&log).unwrap();
    let mut echoer = tokio::process::Command::new("sh")
        .args(["-c", "while read l; do echo \"got $l\"; done; echo bye"])
        .stdin(std::process::Stdio::piped())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdin = echoer.stdin.take().map(|w| Box::new(w) as Stdin);
    let echoer_registered = running.register(
        ContainerRef {
            namespace: "default".into(),
            pod: "web".into(),
            container: "echoer".into(),
        },
        echoer.id().unwrap(),
        std::net::Ipv4Addr::LOCALHOST,
        Attachable::new(log, stdin, true, None),
    );
    // As the node agent does: the container's entry goes when it exits.
    tokio::spawn(async move {
        let _ = echoer.wait().await;
        drop(echoer_registered);
    });
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(streaming::serve(
        socket.clone(),
        running,
        Default::default(),
        rx,
    ));
    for _ in 0..100 {
        if socket.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Node {
        socket,
        _shutdown: tx,
        _container: container,
        _registered: registered,
        _dir: dir,
    }
}

type Ws = tokio_tungstenite::WebSocketStream<tokio::net::UnixStream>;

async fn connect(node: &Node, query: &str, protocol: &str) -> Result<Ws, String> {
    connect_to(
        node,
        &format!("exec?namespace=default&pod=web&container=main&{query}"),
        protocol,
    )
    .await
}

async fn connect_to(node: &Node, path: &str, protocol: &str) -> Result<Ws, String> {
    let stream = tokio::net::UnixStream::connect(&node.socket).await.unwrap();
    let mut req = format!("ws://node/{path}").into_client_request().unwrap();
    req.headers_mut()
        .insert("Sec-WebSocket-Protocol", protocol.parse().unwrap());
    tokio_tungstenite::client_async(req, stream)
        .await
        .map(|(ws, resp)| {
            assert_eq!(
                resp.headers()["Sec-WebSocket-Protocol"],
                protocol.split(',').next().unwrap().trim()
            );
            ws
        })
        .map_err(|e| match e {
            tokio_tungstenite::tungstenite::Error::Http(resp) => format!(
                "{} {}",
                resp.status(),
                String::from_utf8_lossy(resp.body().as_deref().unwrap_or_default())
            ),
            e => e.to_string(),
        })
}

/// Everything the session sends until it closes: stdout, stderr, the status.
async fn collect(ws: &mut Ws) -> (String, String, Value) {
    let (mut out, mut err, mut status) = (Vec::new(), Vec::new(), Value::Null);
    while let Some(Ok(msg)) = ws.next().await {
        match msg {
            Message::Binary(b) => match b.first() {
                Some(1) => out.extend_from_slice(&b[1..]),
                Some(2) => err.extend_from_slice(&b[1..]),
                Some(3) => status = serde_json::from_slice(&b[1..]).unwrap(),
                _ => {}
            },
            Message::Close(_) => break,
            _ => {}
        }
    }
    (
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
        status,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v5_carries_stdin_to_its_close_and_the_exit_code() {
    let node = node().await;
    let mut ws = connect(
        &node,
        "command=sh&command=-c&command=cat%3B+echo+%24GREETING%3B+pwd%3B+echo+e+%3E%262%3B+exit+4&stdin=true&stdout=true&stderr=true",
        "v5.channel.k8s.io",
    )
    .await
    .unwrap();
    ws.send(Message::Binary(b"\x00from stdin\n".to_vec().into()))
        .await
        .unwrap();
    // v5: the client closes stdin, and `cat` ends.
    ws.send(Message::Binary(vec![255, 0].into())).await.unwrap();
    let (out, err, status) = collect(&mut ws).await;
    let cwd = node._dir.path().canonicalize().unwrap();
    assert_eq!(out, format!("from stdin\nhi\n{}\n", cwd.display()));
    assert_eq!(err, "e\n");
    assert_eq!(status["status"], "Failure");
    assert_eq!(status["reason"], "NonZeroExitCode");
    assert_eq!(status["details"]["causes"][0]["message"], "4");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v4_is_served_to_a_client_that_offers_only_it() {
    let node = node().await;
    let mut ws = connect(
        &node,
        "command=echo&command=v4&stdout=true",
        "v4.channel.k8s.io",
    )
    .await
    .unwrap();
    let (out, _, status) = collect(&mut ws).await;
    assert_eq!(out, "v4\n");
    assert_eq!(status["status"], "Success");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_name_their_reason() {
    let node = node().await;
    let err = connect(&node, "command=true&stdout=true", "base64.channel.k8s.io")
        .await
        .unwrap_err();
    assert!(err.starts_with("400"), "{err}");
    assert!(err.contains("none of the protocols"), "{err}");
    let stream = tokio::net::UnixStream::connect(&node.socket).await.unwrap();
    let req = "ws://node/exec?namespace=default&pod=web&container=other&command=true&stdout=true"
        .into_client_request()
        .unwrap();
    let err = tokio_tungstenite::client_async(req, stream)
        .await
        .unwrap_err();
    let tokio_tungstenite::tungstenite::Error::Http(resp) = err else {
        panic!("{err}")
    };
    assert_eq!(resp.status(), 404);
    assert_eq!(
        String::from_utf8_lossy(resp.body().as_deref().unwrap()),
        r#"container not found ("other")"#
    );
    let mut ws = connect(
        &node,
        "command=no-such-command&stderr=true",
        "v5.channel.k8s.io",
    )
    .await
    .unwrap();
    let (_, err, status) = collect(&mut ws).await;
    assert!(err.contains("no-such-command"), "{err}");
    assert_eq!(status["details"]["causes"][0]["message"], "127");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_ends_the_commands_process_group() {
    let node = node().await;
    let mut ws = connect(
        &node,
        "command=sh&command=-c&command=echo+%24%24%3B+sleep+1000+%26+sleep+1000&stdout=true",
        "v5.channel.k8s.io",
    )
    .await
    .unwrap();
    let pid = loop {
        match ws.next().await {
            Some(Ok(Message::Binary(b))) if b.first() == Some(&1) => {
                break String::from_utf8_lossy(&b[1..]).trim().to_string();
            }
            Some(Ok(_)) => {}
            other => panic!("{other:?}"),
        }
    };
    let group_alive = || {
        // Any process of the session's group: the shell and its background sleep.
        std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            std::fs::read_to_string(e.path().join("stat")).is_ok_and(|s| {
                s.rsplit(')')
                    .next()
                    .and_then(|rest| rest.split_whitespace().nth(2))
                    == Some(pid.as_str())
                    && !s
                        .rsplit(')')
                        .next()
                        .unwrap_or("")
                        .trim_start()
                        .starts_with('Z')
            })
        })
    };
    assert!(group_alive());
    drop(ws);
    let mut gone = false;
    for _ in 0..200 {
        if !group_alive() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "the session's process group {pid} is still running");
}

/// The next binary message: its channel and payload.
async fn next_on(ws: &mut Ws) -> (u8, Vec<u8>) {
    loop {
        match tokio::time::timeout(Duration::from_secs(30), ws.next()).await {
            Ok(Some(Ok(Message::Binary(b)))) => return (b[0], b[1..].to_vec()),
            Ok(Some(Ok(_))) => continue,
            other => panic!("the session ended: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_forward_channels_carry_each_port_and_say_a_refused_one() {
    let node = node().await;
    // The pod's one listening port: an echo; and a port nobody listens on.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let open = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = c.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut ws = connect_to(
        &node,
        &format!("portforward?namespace=default&pod=web&ports={open},{closed}"),
        "v4.channel.k8s.io",
    )
    .await
    .unwrap();
    // Each channel first says its port.
    let mut firsts = Vec::new();
    for _ in 0..4 {
        firsts.push(next_on(&mut ws).await);
    }
    firsts.sort();
    let le = |p: u16| p.to_le_bytes().to_vec();
    assert_eq!(
        firsts,
        [
            (0, le(open)),
            (1, le(open)),
            (2, le(closed)),
            (3, le(closed))
        ]
    );
    let mut said_refused = false;
    for round in ["hello", "still here"] {
        ws.send(Message::Binary(
            [&[0u8][..], round.as_bytes()].concat().into(),
        ))
        .await
        .unwrap();
        let mut echoed = Vec::new();
        while echoed.len() < round.len() {
            match next_on(&mut ws).await {
                (0, data) => echoed.extend_from_slice(&data),
                (3, message) => {
                    let message = String::from_utf8(message).unwrap();
                    assert!(
                        message.contains(&format!("error forwarding port {closed}")),
                        "{message}"
                    );
                    assert!(message.contains("failed to connect"), "{message}");
                    said_refused = true;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(echoed, round.as_bytes());
    }
    // On a busy machine the refusal may come after the echoes: it still comes.
    while !said_refused {
        match tokio::time::timeout(Duration::from_secs(30), next_on(&mut ws)).await {
            Ok((3, message)) => {
                let message = String::from_utf8(message).unwrap();
                assert!(message.contains("failed to connect"), "{message}");
                said_refused = true;
            }
            Ok(other) => panic!("unexpected {other:?}"),
            Err(_) => break,
        }
    }
    assert!(
        said_refused,
        "the refused port's error channel said nothing"
    );

    // Bad queries are refused before any upgrade, with kubelet's words.
    let err = connect_to(
        &node,
        "portforward?namespace=default&pod=web",
        "v4.channel.k8s.io",
    )
    .await
    .unwrap_err();
    assert!(
        err.contains("query parameter \"port\" is required"),
        "{err}"
    );
    let err = connect_to(
        &node,
        "portforward?namespace=default&pod=web&ports=0",
        "v4.channel.k8s.io",
    )
    .await
    .unwrap_err();
    assert!(err.contains("must be > 0"), "{err}");
    let err = connect_to(
        &node,
        "portforward?namespace=default&pod=gone&ports=1",
        "v4.channel.k8s.io",
    )
    .await
    .unwrap_err();
    assert!(err.starts_with("404"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tty_session_runs_on_a_terminal_the_client_sizes() {
    let node = node().await;
    let mut ws = connect(
        &node,
        "command=sh&command=-c&command=read+x%3B+stty+size%3B+%5B+-t+0+%5D+%26%26+echo+on-a-tty%3B+exit+2&stdin=true&stdout=true&stderr=true&tty=true",
        "v5.channel.k8s.io",
    )
    .await
    .unwrap();
    ws.send(Message::Binary(
        [&[4u8][..], br#"{"Width":100,"Height":30}"#]
            .concat()
            .into(),
    ))
    .await
    .unwrap();
    ws.send(Message::Binary(b"\x00go\n".to_vec().into()))
        .await
        .unwrap();
    let (out, err, status) = collect(&mut ws).await;
    // The terminal echoes what was typed, with its line endings.
    assert!(out.contains("go\r\n"), "{out:?}");
    assert!(out.contains("30 100\r\n"), "{out:?}");
    assert!(out.contains("on-a-tty"), "{out:?}");
    assert_eq!(err, "", "a terminal has no stderr of its own");
    assert_eq!(status["details"]["causes"][0]["message"], "2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_reaches_a_containers_stdin_and_output_until_it_exits() {
    let node = node().await;
    let path = "attach?namespace=default&pod=web&container=echoer&stdin=true&stdout=true";
    let mut ws = connect_to(&node, path, "v5.channel.k8s.io").await.unwrap();
    // As the Python client writes a string: a text message, taken as kube takes it.
    ws.send(Message::Text("\u{0}hello\n".into())).await.unwrap();
    let (channel, data) = next_on(&mut ws).await;
    assert_eq!((channel, data.as_slice()), (1, b"got hello\n".as_slice()));
    // `stdinOnce`: the client's close of stdin is the container's end of input.
    ws.send(Message::Binary(vec![255, 0].into())).await.unwrap();
    let (out, _, status) = collect(&mut ws).await;
    assert_eq!(out, "bye\n");
    assert_eq!(status["status"], "Success");
    // It is gone now: as kubelet, a container not running is not found.
    let err = connect_to(&node, path, "v5.channel.k8s.io")
        .await
        .unwrap_err();
    assert!(err.starts_with("404"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pods_usage_is_served_as_json() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let node = node().await;
    let mut stream = tokio::net::UnixStream::connect(&node.socket).await.unwrap();
    stream
        .write_all(b"GET /stats/pods?namespace=default HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let body = answer.split("\r\n\r\n").nth(1).unwrap();
    let usage: Value = serde_json::from_str(body).unwrap();
    let pod = &usage["items"][0];
    assert_eq!(pod["pod"], "web", "{usage}");
    let mut names: Vec<&str> = pod["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["echoer", "main"]);
    assert!(pod["containers"][0]["memoryBytes"].as_u64().unwrap() > 0);
    assert!(pod["windowMillis"].as_u64().unwrap() >= 500);
}
