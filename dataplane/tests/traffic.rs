//! Real sockets, real HTTP/1.1, HTTP/2, gRPC and TCP through the proxy while its endpoints
//! change: zero failed requests is the bar.

#![allow(clippy::unwrap_used)]

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use sluice_dataplane::{AppProtocol, EndpointConfig, ProxyConfig, ServiceConfig};
use sluice_local::echo::{self, EchoConfig};
use sluice_local::loadgen::{self, LoadgenConfig, Protocol, Targets};
use support::{get, roundtrip};

async fn backend(i: u8) -> echo::Bound {
    echo::build(EchoConfig::on(
        [127, 0, 0, 10 + i].into(),
        cluster_of(i),
        &format!("echo-{i}"),
        "shop",
    ))
    .await
    .unwrap()
}

fn service(protocol: AppProtocol, endpoints: Vec<EndpointConfig>) -> ProxyConfig {
    ProxyConfig {
        services: vec![ServiceConfig {
            name: "shop/web".into(),
            listen: "127.0.0.1:0".parse().unwrap(),
            protocol,
            endpoints,
            timeouts: Default::default(),
            retry_ratio: 0.2,
            exported: false,
            locality: Default::default(),
        }],
        ..Default::default()
    }
}

/// Backend `i` (address 127.0.0.(10+i)) belongs to east when `i` is even, west otherwise.
fn cluster_of(i: u8) -> &'static str {
    if i.is_multiple_of(2) { "east" } else { "west" }
}

fn ep(addr: SocketAddr, weight: u32, draining: bool) -> EndpointConfig {
    let i = match addr.ip() {
        std::net::IpAddr::V4(v4) => v4.octets()[3].wrapping_sub(10),
        std::net::IpAddr::V6(_) => 0,
    };
    EndpointConfig {
        address: addr,
        weight,
        draining,
        cluster: cluster_of(i).into(),
        via: None,
    }
}

async fn load(target: SocketAddr, protocol: Protocol, rate: u32, secs: f64) -> loadgen::Report {
    loadgen::run(LoadgenConfig {
        targets: Targets::Fixed(vec![target]),
        protocol,
        rate,
        duration: Duration::from_secs_f64(secs),
        path: "/".into(),
        host: None,
        timeout: Duration::from_secs(5),
        live: false,
        observe: None,
        stop: None,
    })
    .await
}

/// Endpoints added, removed, reweighted and drained every 100 ms under HTTP/1.1, HTTP/2
/// and gRPC load (each a configuration reload): no request fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_every_100ms_under_load_loses_no_request() {
    let backends: Vec<echo::Bound> = futures::future::join_all((0..4).map(backend)).await;
    let addrs: Vec<SocketAddr> = backends.iter().map(|b| b.http).collect();
    let config = service(
        AppProtocol::Http,
        vec![ep(addrs[0], 100, false), ep(addrs[1], 100, false)],
    );
    let proxy = sluice_dataplane::build(&config, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let target = proxy.proxy.addr_of("shop/web").unwrap();
    let mut fixed = config.clone();
    fixed.services[0].listen = target;

    let churn_proxy = proxy.proxy.clone();
    let churn = tokio::spawn(async move {
        // A cycle of steps; every step leaves at least one serving endpoint.
        let steps: Vec<Vec<EndpointConfig>> = vec![
            vec![
                ep(addrs[0], 100, false),
                ep(addrs[1], 100, false),
                ep(addrs[2], 100, false),
            ],
            vec![
                ep(addrs[0], 10, false),
                ep(addrs[1], 90, false),
                ep(addrs[2], 100, false),
            ],
            vec![
                ep(addrs[0], 10, true),
                ep(addrs[1], 90, false),
                ep(addrs[2], 100, false),
            ],
            vec![
                ep(addrs[1], 90, false),
                ep(addrs[2], 100, false),
                ep(addrs[3], 50, false),
            ],
            vec![
                ep(addrs[1], 0, false),
                ep(addrs[2], 100, true),
                ep(addrs[3], 50, false),
            ],
            vec![ep(addrs[3], 100, false), ep(addrs[0], 100, false)],
            vec![ep(addrs[0], 100, false), ep(addrs[1], 100, false)],
        ];
        let mut applied = 0u32;
        for step in steps.iter().cycle().take(45) {
            let mut c = fixed.clone();
            c.services[0].endpoints = step.clone();
            churn_proxy.apply(&c).unwrap();
            applied += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        applied
    });
    let (h1, h2, grpc) = tokio::join!(
        load(target, Protocol::Http1, 250, 4.5),
        load(target, Protocol::H2, 250, 4.5),
        load(target, Protocol::Grpc, 250, 4.5),
    );
    let applied = churn.await.unwrap();
    for r in [&h1, &h2, &grpc] {
        println!("{}", r.to_json());
        assert_eq!(r.failed, 0, "{}", r.to_json());
        assert!(r.ok > 900, "{}", r.to_json());
    }
    assert!(applied >= 40);
    let dump = proxy.proxy.dump();
    println!("{applied} configurations applied; final: {dump}");
}

/// A backend that dies (not removed from the configuration) costs no idempotent request:
/// refused connections and resets are retried on the other endpoints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_upstream_costs_no_idempotent_request() {
    let backends: Vec<echo::Bound> = futures::future::join_all((0..3).map(backend)).await;
    let addrs: Vec<SocketAddr> = backends.iter().map(|b| b.http).collect();
    let config = service(
        AppProtocol::Http,
        addrs.iter().map(|a| ep(*a, 100, false)).collect(),
    );
    let proxy = sluice_dataplane::build(&config, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let target = proxy.proxy.addr_of("shop/web").unwrap();
    let mut backends = backends.into_iter();
    let victim = backends.next().unwrap();
    let killer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        victim.shutdown().await;
    });
    let (h1, h2) = tokio::join!(
        load(target, Protocol::Http1, 300, 3.0),
        load(target, Protocol::H2, 300, 3.0)
    );
    killer.await.unwrap();
    for r in [&h1, &h2] {
        assert_eq!(r.failed, 0, "{}", r.to_json());
    }
    let metrics = get(proxy.admin, "x", "/metrics").await;
    println!(
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("failures")
                || l.contains("retries")
                || l.contains("ejections_total"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Endpoints stopped at once before the proxy hears of it (a scale-down, a rollout) cost
/// no request: a refused connection sent nothing, so it does not spend one of the three
/// attempts, and the one endpoint left is reached behind six that refuse. Each round is a
/// fresh proxy, before outlier detection has learned which endpoints are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_stopped_together_cost_no_request() {
    let live = backend(0).await;
    // Addresses where nothing listens any more: connections to them are refused.
    let dead: Vec<u16> = (0..6)
        .map(|_| {
            let l = std::net::TcpListener::bind(("127.0.0.40", 0)).unwrap();
            l.local_addr().unwrap().port()
        })
        .collect();
    for (protocol, app, port) in [
        (Protocol::Http1, AppProtocol::Http, live.http.port()),
        (Protocol::H2, AppProtocol::Http, live.http.port()),
        (Protocol::Tcp, AppProtocol::Tcp, live.tcp.port()),
    ] {
        let mut failed = 0;
        for _round in 0..8 {
            let live_addr = SocketAddr::new(live.http.ip(), port);
            let endpoints = dead
                .iter()
                .map(|p| ep(SocketAddr::from(([127, 0, 0, 40], *p)), 100, false))
                .chain([ep(live_addr, 100, false)])
                .collect();
            let proxy =
                sluice_dataplane::build(&service(app, endpoints), "127.0.0.1:0".parse().unwrap())
                    .await
                    .unwrap();
            let target = proxy.proxy.addr_of("shop/web").unwrap();
            let r = load(target, protocol, 20, 0.25).await;
            assert!(r.ok > 0, "{}", r.to_json());
            failed += r.failed;
        }
        assert_eq!(failed, 0, "{protocol:?}");
    }
}

/// A TCP connection to an endpoint that starts draining keeps working until it ends; new
/// connections go elsewhere; the live count per cluster shows it.
#[tokio::test]
async fn a_long_tcp_connection_to_a_draining_endpoint_keeps_working() {
    let a = backend(0).await;
    let b = backend(1).await;
    let config = service(AppProtocol::Tcp, vec![ep(a.tcp, 100, false)]);
    let proxy = sluice_dataplane::build(&config, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let target = proxy.proxy.addr_of("shop/web").unwrap();
    let mut long = tokio::net::TcpStream::connect(target).await.unwrap();
    roundtrip(&mut long, b"before").await;

    let mut next = config.clone();
    next.services[0].listen = target;
    next.services[0].endpoints = vec![ep(a.tcp, 100, true), ep(b.tcp, 100, false)];
    proxy.proxy.apply(&next).unwrap();
    let mut fresh = tokio::net::TcpStream::connect(target).await.unwrap();
    roundtrip(&mut fresh, b"fresh").await;
    for i in 0..20 {
        roundtrip(&mut long, format!("during drain {i}").as_bytes()).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let active = proxy.proxy.active();
    assert!(
        active.contains(&("shop/web".into(), "east".into(), 1)),
        "{active:?}"
    );
    assert!(
        active.contains(&("shop/web".into(), "west".into(), 1)),
        "{active:?}"
    );

    // Removed entirely: still running until the client closes.
    next.services[0].endpoints = vec![ep(b.tcp, 100, false)];
    proxy.proxy.apply(&next).unwrap();
    roundtrip(&mut long, b"after removal").await;
    drop(long);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let dump = proxy.proxy.dump();
    assert_eq!(dump["services"][0]["endpoints"][0]["active"], 1, "{dump}");
}

/// Cluster mode changes one service at a time (`Proxy::apply_services`): the changed
/// listener follows, a removed one stops, the gateway's allowlist follows both, the other
/// listeners are untouched, and an invalid change changes nothing.
#[tokio::test]
async fn a_change_to_some_services_leaves_the_others_alone() {
    let (a, b, c) = (backend(0).await, backend(1).await, backend(2).await);
    let mut config = service(AppProtocol::Http, vec![ep(a.http, 100, false)]);
    config.services[0].exported = true;
    let mut other = config.services[0].clone();
    other.name = "shop/other".into();
    other.endpoints = vec![ep(c.http, 100, false)];
    let mut third = other.clone();
    third.name = "shop/third".into();
    third.exported = false;
    config.services.extend([other, third]);
    let proxy = sluice_dataplane::build(&config, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let web = proxy.proxy.addr_of("shop/web").unwrap();
    let other = proxy.proxy.addr_of("shop/other").unwrap();
    let third = proxy.proxy.addr_of("shop/third").unwrap();
    assert!(get(web, "web", "/").await.contains("echo-0"));
    let allow = &proxy.proxy.tunnels.allow;
    assert!(allow.contains(&a.http) && allow.contains(&c.http));

    let mut changed = config.services[0].clone();
    changed.listen = web;
    changed.endpoints = vec![ep(b.http, 100, false)];
    proxy
        .proxy
        .apply_services(std::slice::from_ref(&changed), &[other])
        .unwrap();
    assert!(get(web, "web", "/").await.contains("echo-1"));
    assert!(tokio::net::TcpStream::connect(other).await.is_err());
    assert!(get(third, "third", "/").await.contains("echo-2"));
    assert!(allow.contains(&b.http) && !allow.contains(&a.http) && !allow.contains(&c.http));
    let names: Vec<String> = proxy
        .proxy
        .addresses()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["shop/web", "shop/third"]);

    // Through a peer nobody configured: refused, nothing changes.
    let mut bad = changed.clone();
    bad.endpoints[0].via = Some("nowhere".into());
    let err = proxy.proxy.apply_services(&[bad], &[third]).unwrap_err();
    assert!(err.to_string().contains("nowhere"), "{err}");
    // Two changes for one address: refused.
    let err = proxy
        .proxy
        .apply_services(&[changed.clone(), changed.clone()], &[])
        .unwrap_err();
    assert!(err.to_string().contains(&web.to_string()), "{err}");
    assert!(get(web, "web", "/").await.contains("echo-1"));
    assert!(get(third, "third", "/").await.contains("echo-2"));
    assert!(allow.contains(&b.http));
}

/// A stateful move's write pause: the old endpoint drains, goes, and for a second no
/// endpoint serves before the new one is Ready. Requests arriving then are held and sent
/// when the new endpoint comes, so HTTP/1.1, HTTP/2 and gRPC clients see no failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_pause_holds_requests_instead_of_failing_them() {
    let a = backend(0).await;
    let b = backend(1).await;
    let config = service(AppProtocol::Http, vec![ep(a.http, 100, false)]);
    let proxy = sluice_dataplane::build(&config, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let target = proxy.proxy.addr_of("shop/web").unwrap();
    let mut fixed = config.clone();
    fixed.services[0].listen = target;
    let pause_proxy = proxy.proxy.clone();
    let (a_http, b_http) = (a.http, b.http);
    let pause = tokio::spawn(async move {
        let step = |endpoints: Vec<EndpointConfig>| {
            let mut c = fixed.clone();
            c.services[0].endpoints = endpoints;
            pause_proxy.apply(&c).unwrap();
        };
        tokio::time::sleep(Duration::from_millis(700)).await;
        step(vec![ep(a_http, 100, true)]);
        tokio::time::sleep(Duration::from_millis(200)).await;
        step(vec![]);
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        step(vec![ep(b_http, 100, false)]);
    });
    let (h1, h2, grpc) = tokio::join!(
        load(target, Protocol::Http1, 200, 3.0),
        load(target, Protocol::H2, 200, 3.0),
        load(target, Protocol::Grpc, 200, 3.0),
    );
    pause.await.unwrap();
    let metrics = get(proxy.admin, "x", "/metrics").await;
    println!(
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("holds_total") || l.contains("failures_total{"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    for r in [&h1, &h2, &grpc] {
        println!("{}", r.to_json());
        assert_eq!(r.failed, 0, "{}", r.to_json());
    }
    let served: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("sluice_proxy_holds_total") && l.contains("served"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    println!("{served} requests held through the pause");
    assert!(served > 100, "the pause held requests:\n{metrics}");
}

/// A hold is bounded: with no endpoint coming, the client gets the 503 after `holdMs`,
/// saying how long it waited; with `holdMs: 0` at once.
#[tokio::test]
async fn a_hold_ends_with_a_503_when_no_endpoint_comes() {
    for (hold_ms, waited) in [(300, true), (0, false)] {
        let mut config = service(AppProtocol::Http, vec![]);
        config.services[0].timeouts.hold_ms = hold_ms;
        let proxy = sluice_dataplane::build(&config, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let target = proxy.proxy.addr_of("shop/web").unwrap();
        let start = std::time::Instant::now();
        let out = get(target, "web", "/").await;
        let took = start.elapsed();
        assert!(out.starts_with("HTTP/1.1 503"), "{out}");
        assert!(out.contains("x-sluice-error: no_endpoint"), "{out}");
        assert_eq!(out.contains("waited"), waited, "{out}");
        if waited {
            assert!(took >= Duration::from_millis(300), "{took:?}");
        }
    }
}
