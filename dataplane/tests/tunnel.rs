//! Cross-cluster traffic: a proxy in "east" reaches endpoints in "west" through west's
//! gateway, over mTLS/HTTP/2 CONNECT and over QUIC; peers that are untrusted, expired, of
//! another clusterset, or not TLS at all are refused while the gateway keeps serving;
//! only exported endpoints are reachable; a silent peer is noticed within a second.

#![allow(clippy::unwrap_used)]

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sluice_dataplane::tunnel::TunnelError;
use sluice_dataplane::tunnel::ca::Authority;
use sluice_dataplane::tunnel::identity::{Identity, SpiffeId, TrustBundle};
use sluice_dataplane::tunnel::pool::Peer;
use sluice_dataplane::{
    AppProtocol, EndpointConfig, IngressConfig, IngressRoute, Locality, PeerConfig, ProxyConfig,
    ServiceConfig, TunnelConfig, TunnelTransport,
};
use sluice_local::echo::{self, EchoConfig};
use sluice_local::loadgen::{self, LoadgenConfig, Protocol, Targets};
use support::{get, roundtrip};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CLUSTERSET: &str = "test";

struct Pki {
    dir: tempfile::TempDir,
    ca: Authority,
}

impl Pki {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ca = Authority::generate("test-clusterset").unwrap();
        std::fs::write(dir.path().join("ca.crt"), ca.cert_pem()).unwrap();
        Self { dir, ca }
    }

    fn path(&self, f: &str) -> String {
        self.dir.path().join(f).display().to_string()
    }

    /// Issue `cluster`'s certificate; returns a tunnel config using it.
    fn tunnel(&self, cluster: &str) -> TunnelConfig {
        let id = SpiffeId::new(CLUSTERSET, cluster, "proxy").unwrap();
        let issued = self.ca.issue(&id, 1).unwrap();
        write(self.dir.path(), cluster, &issued.cert_pem, &issued.key_pem);
        TunnelConfig {
            cert: self.path(&format!("{cluster}.crt")),
            key: self.path(&format!("{cluster}.key")),
            trust_bundle: vec![self.path("ca.crt")],
            gateway: None,
            peers: vec![],
        }
    }

    fn bundle(&self) -> TrustBundle {
        TrustBundle::from_pem(self.ca.cert_pem().as_bytes(), "ca").unwrap()
    }
}

fn write(dir: &Path, name: &str, cert: &str, key: &str) {
    std::fs::write(dir.join(format!("{name}.crt")), cert).unwrap();
    std::fs::write(dir.join(format!("{name}.key")), key).unwrap();
}

async fn backend(ip: [u8; 4], cluster: &str, pod: &str) -> echo::Bound {
    echo::build(EchoConfig::on(ip.into(), cluster, pod, "shop"))
        .await
        .unwrap()
}

fn service(name: &str, protocol: AppProtocol, endpoints: Vec<EndpointConfig>) -> ServiceConfig {
    ServiceConfig {
        name: name.into(),
        listen: "127.0.0.1:0".parse().unwrap(),
        protocol,
        endpoints,
        timeouts: Default::default(),
        retry_ratio: 0.2,
        exported: false,
        locality: Default::default(),
    }
}

fn endpoint(address: SocketAddr, cluster: &str, via: Option<&str>) -> EndpointConfig {
    EndpointConfig {
        cluster: cluster.into(),
        via: via.map(str::to_string),
        ..EndpointConfig::new(address)
    }
}

/// West: a gateway in front of an exported web service (HTTP and TCP ports of two echo
/// pods) and a private, unexported one.
struct West {
    proxy: sluice_dataplane::Bound,
    gateway: SocketAddr,
    web: Vec<echo::Bound>,
    private: echo::Bound,
}

async fn west(pki: &Pki) -> West {
    let web = vec![
        backend([127, 0, 1, 11], "west", "web-0").await,
        backend([127, 0, 1, 12], "west", "web-1").await,
    ];
    let private = backend([127, 0, 1, 13], "west", "db-0").await;
    let mut exported_http = service(
        "shop/web",
        AppProtocol::Http,
        web.iter().map(|b| endpoint(b.http, "west", None)).collect(),
    );
    exported_http.exported = true;
    let mut exported_tcp = service(
        "shop/web-tcp",
        AppProtocol::Tcp,
        web.iter().map(|b| endpoint(b.tcp, "west", None)).collect(),
    );
    exported_tcp.exported = true;
    let hidden = service(
        "shop/db",
        AppProtocol::Tcp,
        vec![endpoint(private.tcp, "west", None)],
    );
    let mut tunnel = pki.tunnel("west");
    tunnel.gateway = Some("127.0.0.1:0".parse().unwrap());
    let config = ProxyConfig {
        services: vec![exported_http, exported_tcp, hidden],
        tunnel: Some(tunnel),
        ingress: None,
    };
    let proxy = sluice_dataplane::build(&config, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let gateway = proxy.proxy.tunnels.gateway_addr().unwrap();
    West {
        proxy,
        gateway,
        web,
        private,
    }
}

/// East: services whose endpoints are all in west, reached through west's gateway.
async fn east(pki: &Pki, w: &West, transport: TunnelTransport) -> sluice_dataplane::Bound {
    let mut tunnel = pki.tunnel("east");
    tunnel.peers = vec![PeerConfig {
        cluster: "west".into(),
        address: w.gateway,
        transport,
    }];
    let remote = |f: fn(&echo::Bound) -> SocketAddr| -> Vec<EndpointConfig> {
        w.web
            .iter()
            .map(|b| endpoint(f(b), "west", Some("west")))
            .collect()
    };
    let config = ProxyConfig {
        services: vec![
            service("shop/web", AppProtocol::Http, remote(|b| b.http)),
            service("shop/web-grpc", AppProtocol::Grpc, remote(|b| b.http)),
            service("shop/web-tcp", AppProtocol::Tcp, remote(|b| b.tcp)),
            service(
                "shop/db",
                AppProtocol::Tcp,
                vec![endpoint(w.private.tcp, "west", Some("west"))],
            ),
        ],
        tunnel: Some(tunnel),
        ingress: Some(IngressConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            routes: vec![IngressRoute {
                host: "shop.example".into(),
                path: None,
                path_type: Default::default(),
                service: "shop/web".into(),
            }],
        }),
    };
    sluice_dataplane::build(&config, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

async fn wait_up(peer: &Peer) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !peer.is_up() {
        assert!(
            Instant::now() < deadline,
            "peer {} never came up",
            peer.cluster
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn load(target: SocketAddr, protocol: Protocol) -> loadgen::Report {
    loadgen::run(LoadgenConfig {
        targets: Targets::Fixed(vec![target]),
        protocol,
        rate: 200,
        duration: Duration::from_millis(1500),
        path: "/".into(),
        host: None,
        timeout: Duration::from_secs(5),
        live: false,
        observe: None,
        stop: None,
    })
    .await
}

async fn traffic_through_the_gateway(transport: TunnelTransport) {
    let pki = Pki::new();
    let w = west(&pki).await;
    let e = east(&pki, &w, transport).await;
    wait_up(&e.proxy.tunnels.peer("west").unwrap()).await;
    if transport == TunnelTransport::Quic {
        // MTU discovery runs on the idle probe connection and goes past what an Ethernet
        // frame carries on loopback (each end advertises and searches up to 6,550).
        let mut mtu = 0.0;
        for _ in 0..200 {
            let metrics = get(e.admin, "x", "/metrics").await;
            mtu = metrics
                .lines()
                .find(|l| l.starts_with("sluice_proxy_tunnel_path_mtu_bytes{"))
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            if mtu > 1500.0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(mtu > 1500.0, "path MTU toward west stayed at {mtu}");
    }

    let web = e.proxy.addr_of("shop/web").unwrap();
    let answer = get(web, "shop", "/").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"cluster\":\"west\""), "{answer}");

    // The trace continues: same trace id, this hop's span id.
    let client_trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut s = tokio::net::TcpStream::connect(web).await.unwrap();
    s.write_all(
        format!("GET / HTTP/1.1\r\nHost: shop\r\ntraceparent: {client_trace}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    let mut traced = String::new();
    s.read_to_string(&mut traced).await.unwrap();
    let seen = traced
        .split("\"traceparent\":\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_else(|| panic!("no traceparent upstream: {traced}"));
    assert!(
        seen.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
        "{seen}"
    );
    assert_ne!(
        seen, client_trace,
        "the proxy's span id replaces the client's"
    );

    let grpc = e.proxy.addr_of("shop/web-grpc").unwrap();
    let (h1, h2, g) = tokio::join!(
        load(web, Protocol::Http1),
        load(web, Protocol::H2),
        load(grpc, Protocol::Grpc)
    );
    for r in [&h1, &h2, &g] {
        assert!(r.ok > 200, "{transport:?}: {r:?}");
        assert_eq!(r.failed, 0, "{transport:?}: {r:?}");
    }

    // TCP: a megabyte each way on one tunnelled connection, and several at once.
    let tcp = e.proxy.addr_of("shop/web-tcp").unwrap();
    let mut conns = Vec::new();
    for _ in 0..8 {
        conns.push(tokio::net::TcpStream::connect(tcp).await.unwrap());
    }
    let big: Vec<u8> = (0..1_048_576u32).map(|i| (i % 251) as u8).collect();
    roundtrip(&mut conns[0], &big).await;
    for c in conns.iter_mut() {
        roundtrip(c, b"hello across clusters").await;
    }

    // Ingress: by Host, to wherever the service's endpoints are.
    let ingress = e.proxy.ingress_addr().unwrap();
    let routed = get(ingress, "Shop.Example:80", "/x").await;
    assert!(routed.starts_with("HTTP/1.1 200"), "{routed}");
    assert!(routed.contains("\"cluster\":\"west\""), "{routed}");
    let unrouted = get(ingress, "other.example", "/").await;
    assert!(unrouted.starts_with("HTTP/1.1 404"), "{unrouted}");
    assert!(unrouted.contains("x-sluice-error: no_route"), "{unrouted}");

    let label = match transport {
        TunnelTransport::H2 => "h2",
        TunnelTransport::Quic => "quic",
    };
    let gw_metrics = get(w.proxy.admin, "x", "/metrics").await;
    assert!(
        gw_metrics.contains(&format!(
            "sluice_proxy_gateway_streams_total{{transport=\"{label}\",source_cluster=\"east\"}}"
        )),
        "{gw_metrics}"
    );
    let dump = get(e.admin, "x", "/config_dump").await;
    assert!(dump.contains("\"via\": \"west\""), "{dump}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_grpc_tcp_and_ingress_through_an_mtls_http2_tunnel() {
    traffic_through_the_gateway(TunnelTransport::H2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_grpc_tcp_and_ingress_through_a_quic_tunnel() {
    traffic_through_the_gateway(TunnelTransport::Quic).await;
}

fn peer_with(
    identity: &Identity,
    bundle: &TrustBundle,
    gateway: SocketAddr,
    cluster: &str,
    transport: TunnelTransport,
) -> Arc<Peer> {
    Peer::new(
        &PeerConfig {
            cluster: cluster.into(),
            address: gateway,
            transport,
        },
        identity,
        bundle,
        Default::default(),
    )
    .unwrap()
}

fn identity(pem: &sluice_dataplane::tunnel::ca::Issued) -> Identity {
    Identity::from_pem(pem.cert_pem.as_bytes(), pem.key_pem.as_bytes(), "test").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_peers_and_garbage_are_refused_while_the_gateway_serves() {
    let pki = Pki::new();
    let w = west(&pki).await;
    let target = w.web[0].tcp;
    let good_id = SpiffeId::new(CLUSTERSET, "east", "proxy").unwrap();
    let good = identity(&pki.ca.issue(&good_id, 1).unwrap());

    let now = time::OffsetDateTime::now_utc();
    let expired = identity(
        &pki.ca
            .issue_between(
                &good_id,
                now - time::Duration::days(10),
                now - time::Duration::days(1),
            )
            .unwrap(),
    );
    let stranger_ca = Authority::generate("someone-else").unwrap();
    let untrusted = identity(&stranger_ca.issue(&good_id, 1).unwrap());
    let other_set = identity(
        &pki.ca
            .issue(&SpiffeId::new("other", "east", "proxy").unwrap(), 1)
            .unwrap(),
    );

    for transport in [TunnelTransport::H2, TunnelTransport::Quic] {
        for (what, ident) in [
            ("expired", &expired),
            ("untrusted", &untrusted),
            ("other clusterset", &other_set),
        ] {
            let peer = peer_with(ident, &pki.bundle(), w.gateway, "west", transport);
            match peer.open(target).await {
                Err(TunnelError::Handshake(..)) | Err(TunnelError::Protocol(..)) => {}
                // How the refusal reaches the client depends on timing (an alert, a
                // reset, a close the client sees late); that the gateway refused it in
                // the handshake is checked on its metrics below.
                Err(e) => eprintln!("{what} over {transport:?}: refused as {e}"),
                Ok(_) => panic!("{what} over {transport:?}: a stream was opened"),
            }
        }
        // The gateway refused all three in the handshake (it counts after refusing, so
        // the count may trail the client's error by a moment).
        let label = match transport {
            TunnelTransport::H2 => "h2",
            TunnelTransport::Quic => "quic",
        };
        let mut refused = 0.0;
        for _ in 0..100 {
            let metrics = get(w.proxy.admin, "x", "/metrics").await;
            refused = counter(&metrics, label, "handshake").unwrap_or(0.0);
            if refused >= 3.0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            refused >= 3.0,
            "{transport:?}: {refused} handshakes refused"
        );
        // The client checks the gateway too: west's gateway is not "north".
        let impostor = peer_with(&good, &pki.bundle(), w.gateway, "north", transport);
        assert!(
            matches!(impostor.open(target).await, Err(TunnelError::Handshake(..))),
            "{transport:?}: a gateway with another cluster's identity was accepted"
        );
    }

    // Garbage: plain text and random bytes on TCP, junk datagrams on UDP.
    for junk in [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        (0..4096u32).map(|i| (i * 7 % 256) as u8).collect(),
    ] {
        let mut s = tokio::net::TcpStream::connect(w.gateway).await.unwrap();
        let _ = s.write_all(&junk).await;
        let mut buf = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf)).await;
        assert!(closed.is_ok(), "the gateway kept a garbage connection open");
    }
    let udp = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    for i in 0..1000u32 {
        let len = 1 + (i as usize * 13) % 1200;
        let junk: Vec<u8> = (0..len).map(|j| (j as u32 ^ i) as u8).collect();
        udp.send_to(&junk, w.gateway).await.unwrap();
    }

    // A trusted QUIC peer sending a garbage preamble gets a BadRequest verdict on that
    // stream, not a hang, and its connection keeps working for the next stream.
    {
        use sluice_dataplane::tunnel::frame::{self, Verdict};
        use sluice_dataplane::tunnel::{
            identity::client_config,
            transport::{ALPN_QUIC, quic_transport},
        };
        let tls = client_config(&good, &pki.bundle(), "west", ALPN_QUIC).unwrap();
        let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
        let mut config = quinn::ClientConfig::new(Arc::new(crypto));
        config.transport_config(Arc::new(quic_transport()));
        let endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
        let conn = endpoint
            .connect_with(config, w.gateway, "gateway.sluice")
            .unwrap()
            .await
            .unwrap();
        for junk in [
            &b"GET / HTTP/1.1\r\n\r\n"[..],
            b"SLT1\x00\x05hello",
            b"SLT1\xff\xff",
        ] {
            let (mut send, mut recv) = conn.open_bi().await.unwrap();
            send.write_all(junk).await.unwrap();
            let (verdict, msg) =
                tokio::time::timeout(Duration::from_secs(5), frame::read_verdict(&mut recv))
                    .await
                    .expect("a verdict in time")
                    .unwrap();
            assert_eq!(verdict, Verdict::BadRequest, "{junk:?}: {msg}");
        }
        let (mut send, mut recv) = conn.open_bi().await.unwrap();
        frame::write_request(&mut send, target).await.unwrap();
        let (verdict, _) = frame::read_verdict(&mut recv).await.unwrap();
        assert_eq!(verdict, Verdict::Connected);
    }

    // The gateway still serves trusted peers on both transports.
    for transport in [TunnelTransport::H2, TunnelTransport::Quic] {
        let peer = peer_with(&good, &pki.bundle(), w.gateway, "west", transport);
        let mut s = peer.open(target).await.unwrap();
        roundtrip(&mut s, b"still serving").await;
    }
    let metrics = get(w.proxy.admin, "x", "/metrics").await;
    for (t, reason) in [
        ("h2", "handshake"),
        ("quic", "handshake"),
        ("quic", "bad_request"),
    ] {
        assert!(
            counter(&metrics, t, reason).is_some(),
            "missing {t} {reason}:\n{metrics}"
        );
    }
}

/// A trusted peer that speaks HTTP/2 to the gateway by hand gets, for each bad stream — a
/// method other than CONNECT, a target that is no ip:port, one not exported — a status
/// with the reason in `x-sluice-error` and a message, on the same connection, which then
/// still carries a good stream both ways and a large transfer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_streams_of_a_trusted_h2_peer_get_a_status_and_its_connection_serves_on() {
    use sluice_dataplane::tunnel::h2_stream::H2Stream;
    use sluice_dataplane::tunnel::{identity::client_config, transport::ALPN_H2};

    let pki = Pki::new();
    let w = west(&pki).await;
    let id = SpiffeId::new(CLUSTERSET, "east", "proxy").unwrap();
    let good = identity(&pki.ca.issue(&id, 1).unwrap());
    let tls = client_config(&good, &pki.bundle(), "west", ALPN_H2).unwrap();
    let tcp = tokio::net::TcpStream::connect(w.gateway).await.unwrap();
    let name = rustls::pki_types::ServerName::IpAddress(w.gateway.ip().into());
    let tls = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(name, tcp)
        .await
        .unwrap();
    let (send, conn) = h2::client::handshake(tls).await.unwrap();
    tokio::spawn(conn);
    let open = |method: http::Method, uri: String| {
        let send = send.clone();
        async move {
            let mut send = send.ready().await.unwrap();
            let req = http::Request::builder()
                .method(method)
                .uri(uri)
                .body(())
                .unwrap();
            let (response, stream) = send.send_request(req, false).unwrap();
            (response.await.unwrap(), stream)
        }
    };
    for (method, uri, status, reason) in [
        (http::Method::GET, "http://west/".to_string(), 405, "method"),
        (
            http::Method::POST,
            format!("http://{}/", w.web[0].tcp),
            405,
            "method",
        ),
        (
            http::Method::CONNECT,
            "web.shop:8080".to_string(),
            400,
            "bad_request",
        ),
        (
            http::Method::CONNECT,
            w.private.tcp.to_string(),
            403,
            "not_exported",
        ),
    ] {
        let (response, _stream) = open(method.clone(), uri.clone()).await;
        assert_eq!(response.status().as_u16(), status, "{method} {uri}");
        assert_eq!(
            response.headers()["x-sluice-error"],
            reason,
            "{method} {uri}"
        );
        let mut body = response.into_body();
        let mut said = Vec::new();
        while let Some(data) = body.data().await {
            said.extend_from_slice(&data.unwrap());
        }
        assert!(!said.is_empty(), "{method} {uri}: no message");
    }
    let (response, stream) = open(http::Method::CONNECT, w.web[0].tcp.to_string()).await;
    assert_eq!(response.status(), http::StatusCode::OK);
    let mut s = H2Stream::new(stream, response.into_body());
    roundtrip(&mut s, b"after the refusals").await;
    // More than the stream's and the connection's windows, echoed back.
    let big: Vec<u8> = (0..24 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let (mut r, mut wr) = tokio::io::split(s);
    let sent = big.clone();
    let writer = tokio::spawn(async move {
        wr.write_all(&sent).await.unwrap();
        wr.shutdown().await.unwrap();
    });
    let mut echoed = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), r.read_to_end(&mut echoed))
        .await
        .expect("the echo in time")
        .unwrap();
    writer.await.unwrap();
    assert!(
        echoed == big,
        "echoed {} of {} bytes, or not the same",
        echoed.len(),
        big.len()
    );
}

/// The gateway's rejections for `transport` and `reason`, from its metrics.
fn counter(metrics: &str, transport: &str, reason: &str) -> Option<f64> {
    let line = format!(
        "sluice_proxy_gateway_rejected_total{{transport=\"{transport}\",reason=\"{reason}\"}} "
    );
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&line))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_exported_endpoints_are_reachable() {
    let pki = Pki::new();
    let w = west(&pki).await;
    let id = SpiffeId::new(CLUSTERSET, "east", "proxy").unwrap();
    let good = identity(&pki.ca.issue(&id, 1).unwrap());
    for transport in [TunnelTransport::H2, TunnelTransport::Quic] {
        let peer = peer_with(&good, &pki.bundle(), w.gateway, "west", transport);
        // The private database, and an address that is no endpoint at all.
        for target in [w.private.tcp, "127.0.0.1:1".parse().unwrap()] {
            match peer.open(target).await {
                Err(TunnelError::NotExported(_, t)) => assert_eq!(t, target),
                Err(e) => panic!("{transport:?} {target}: {e}"),
                Ok(_) => panic!("{transport:?}: reached unexported {target}"),
            }
        }
        let mut ok = peer.open(w.web[1].tcp).await.unwrap();
        roundtrip(&mut ok, b"exported").await;
    }
    // Through a proxy: the connection to the unexported service is closed, not served.
    let e = east(&pki, &w, TunnelTransport::H2).await;
    wait_up(&e.proxy.tunnels.peer("west").unwrap()).await;
    let db = e.proxy.addr_of("shop/db").unwrap();
    let mut s = tokio::net::TcpStream::connect(db).await.unwrap();
    let _ = s.write_all(b"hello").await;
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf))
        .await
        .unwrap();
    assert!(
        buf.is_empty(),
        "unexported service answered: {read:?} {buf:?}"
    );
    let metrics = get(w.proxy.admin, "x", "/metrics").await;
    assert!(
        metrics.contains(
            "sluice_proxy_gateway_rejected_total{transport=\"h2\",reason=\"not_exported\"}"
        ),
        "{metrics}"
    );
}

/// Requests at 200/s for `secs` through `target`: the report and who answered each.
async fn answered(
    target: SocketAddr,
    protocol: Protocol,
    secs: f64,
) -> (loadgen::Report, std::collections::BTreeMap<String, u64>) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let report = loadgen::run(LoadgenConfig {
        targets: Targets::Fixed(vec![target]),
        protocol,
        rate: 200,
        duration: Duration::from_secs_f64(secs),
        path: "/".into(),
        host: None,
        timeout: Duration::from_secs(5),
        live: false,
        observe: Some(tx),
        stop: None,
    })
    .await;
    let mut by = std::collections::BTreeMap::new();
    while let Ok(s) = rx.try_recv() {
        if let Ok(Some(c)) = s.outcome {
            *by.entry(c).or_insert(0) += 1;
        }
    }
    (report, by)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefer_close_keeps_traffic_local_and_spills_over_when_local_endpoints_die() {
    let pki = Pki::new();
    let w = west(&pki).await;
    let local = backend([127, 0, 2, 11], "east", "web-east").await;
    let mut tunnel = pki.tunnel("east");
    tunnel.peers = vec![PeerConfig {
        cluster: "west".into(),
        address: w.gateway,
        transport: TunnelTransport::H2,
    }];
    let mut endpoints = vec![endpoint(local.http, "east", None)];
    endpoints.extend(w.web.iter().map(|b| endpoint(b.http, "west", Some("west"))));
    let mut web = service("shop/web", AppProtocol::Http, endpoints);
    web.locality = Locality::PreferClose;
    let mut config = ProxyConfig {
        services: vec![web],
        tunnel: Some(tunnel),
        ingress: None,
    };
    let e = sluice_dataplane::build(&config, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    wait_up(&e.proxy.tunnels.peer("west").unwrap()).await;
    let addr = e.proxy.addr_of("shop/web").unwrap();

    // Local first: every answer from east, over HTTP/1.1 and HTTP/2.
    for protocol in [Protocol::Http1, Protocol::H2] {
        let (r, by) = answered(addr, protocol, 1.0).await;
        assert_eq!(r.failed, 0, "{r:?}");
        assert_eq!(by.get("west"), None, "{protocol:?}: {by:?}");
        assert!(by["east"] > 150, "{by:?}");
    }
    // Without the preference, west's two endpoints take their part.
    config.services[0].locality = Locality::Any;
    e.proxy.apply(&config).unwrap();
    let (r, by) = answered(addr, Protocol::Http1, 1.0).await;
    assert_eq!(r.failed, 0, "{r:?}");
    assert!(by.get("west").copied().unwrap_or(0) > 50, "{by:?}");
    config.services[0].locality = Locality::PreferClose;
    e.proxy.apply(&config).unwrap();

    // The local endpoint dies under load: idempotent requests spill over to west, none fails.
    let load = tokio::spawn(answered(addr, Protocol::Http1, 3.0));
    tokio::time::sleep(Duration::from_millis(1000)).await;
    local.shutdown().await;
    let (r, by) = load.await.unwrap();
    assert_eq!(r.failed, 0, "{r:?}");
    assert!(by["east"] > 100 && by["west"] > 200, "{by:?}");
    let (r, by) = answered(addr, Protocol::Http1, 1.0).await;
    assert_eq!(r.failed, 0, "{r:?}");
    assert_eq!(by.get("east"), None, "{by:?}");
}

/// A TCP relay (or UDP, for QUIC) that can be frozen: it stops forwarding without
/// closing anything, as a partitioned or hung peer looks.
struct Relay {
    addr: SocketAddr,
    frozen: Arc<AtomicBool>,
}

async fn tcp_relay(to: SocketAddr) -> Relay {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let frozen = Arc::new(AtomicBool::new(false));
    let f = frozen.clone();
    tokio::spawn(async move {
        while let Ok((down, _)) = listener.accept().await {
            let up = tokio::net::TcpStream::connect(to).await.unwrap();
            let (dr, dw) = down.into_split();
            let (ur, uw) = up.into_split();
            tokio::spawn(pump(dr, uw, f.clone()));
            tokio::spawn(pump(ur, dw, f.clone()));
        }
    });
    Relay { addr, frozen }
}

async fn pump(
    mut r: tokio::net::tcp::OwnedReadHalf,
    mut w: tokio::net::tcp::OwnedWriteHalf,
    frozen: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 65536];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while frozen.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if w.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

async fn udp_relay(to: SocketAddr) -> Relay {
    let front = Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let back = Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap());
    back.connect(to).await.unwrap();
    let addr = front.local_addr().unwrap();
    let frozen = Arc::new(AtomicBool::new(false));
    let client: Arc<std::sync::Mutex<Option<SocketAddr>>> = Default::default();
    let (f1, b1, c1, fr1) = (front.clone(), back.clone(), client.clone(), frozen.clone());
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok((n, from)) = f1.recv_from(&mut buf).await {
            *c1.lock().unwrap() = Some(from);
            if !fr1.load(Ordering::Relaxed) {
                let _ = b1.send(&buf[..n]).await;
            }
        }
    });
    let fr2 = frozen.clone();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok(n) = back.recv(&mut buf).await {
            let to = *client.lock().unwrap();
            if let Some(to) = to
                && !fr2.load(Ordering::Relaxed)
            {
                let _ = front.send_to(&buf[..n], to).await;
            }
        }
    });
    Relay { addr, frozen }
}

/// A peer that goes silent (no FIN, no RST: frozen) is marked down in under a second,
/// and requests go to the endpoints that remain; idempotent requests caught on the frozen
/// tunnel are retried there, so none fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_peer_is_noticed_within_a_second() {
    let pki = Pki::new();
    let w = west(&pki).await;
    let local = backend([127, 0, 1, 21], "east", "web-local").await;
    for transport in [TunnelTransport::H2, TunnelTransport::Quic] {
        let relay = match transport {
            TunnelTransport::H2 => tcp_relay(w.gateway).await,
            TunnelTransport::Quic => udp_relay(w.gateway).await,
        };
        let mut tunnel = pki.tunnel("east");
        tunnel.peers = vec![PeerConfig {
            cluster: "west".into(),
            address: relay.addr,
            transport,
        }];
        let config = ProxyConfig {
            services: vec![service(
                "shop/web",
                AppProtocol::Http,
                vec![
                    endpoint(w.web[0].http, "west", Some("west")),
                    endpoint(local.http, "east", None),
                ],
            )],
            tunnel: Some(tunnel),
            ingress: None,
        };
        let e = sluice_dataplane::build(&config, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let peer = e.proxy.tunnels.peer("west").unwrap();
        wait_up(&peer).await;
        let web = e.proxy.addr_of("shop/web").unwrap();
        let during = tokio::spawn(load(web, Protocol::H2));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let frozen_at = Instant::now();
        relay.frozen.store(true, Ordering::Relaxed);
        while peer.is_up() {
            assert!(
                frozen_at.elapsed() < Duration::from_secs(3),
                "{transport:?}: still up after 3 s"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let noticed = frozen_at.elapsed();
        eprintln!("{transport:?}: silent peer noticed after {noticed:?}");
        assert!(
            noticed < Duration::from_secs(1),
            "{transport:?}: {noticed:?}"
        );
        let after = load(web, Protocol::Http1).await;
        assert_eq!(after.failed, 0, "{after:?}");
        let during = during.await.unwrap();
        assert_eq!(
            during.failed, 0,
            "{transport:?}: requests in flight when the peer froze: {during:?}"
        );
    }
}

/// Streams spread over connections: at most 100 per connection, at most 4 connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_are_capped_per_connection() {
    let pki = Pki::new();
    let w = west(&pki).await;
    let id = SpiffeId::new(CLUSTERSET, "east", "proxy").unwrap();
    let good = identity(&pki.ca.issue(&id, 1).unwrap());
    for transport in [TunnelTransport::H2, TunnelTransport::Quic] {
        let peer = peer_with(&good, &pki.bundle(), w.gateway, "west", transport);
        wait_up(&peer).await;
        let mut streams = Vec::new();
        for i in 0..250u32 {
            let mut s = peer.open(w.web[(i % 2) as usize].tcp).await.unwrap();
            roundtrip(&mut s, b"x").await;
            streams.push(s);
        }
        assert_eq!(peer.connections(), 3, "{transport:?}");
        drop(streams);
    }
}
