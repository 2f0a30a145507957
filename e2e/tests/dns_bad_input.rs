//! Malformed and hostile input: FORMERR and friends for bad queries, nothing for
//! non-queries, and a server that keeps answering legitimate queries throughout.
//! The fuzz test feeds mutated packets (seeded from tests/corpus/seeds.hex) straight into
//! the datagram path; `SLUICE_FUZZ_SECS=600` runs it for ten minutes.

#![allow(clippy::unwrap_used)]

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;
use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestRunner};
use serde_json::json;
use sluice_dns::handler::Datagram;
use sluice_dns::responder::{Reply, Responder};
use support::{Cluster, answers, query};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UdpSocket;

fn seeds() -> Vec<Vec<u8>> {
    include_str!("corpus/seeds.hex")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            (0..l.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&l[i..i + 2], 16).unwrap())
                .collect()
        })
        .collect()
}

/// Send one datagram; the response, or `None` after `wait`.
async fn exchange(addr: SocketAddr, packet: &[u8], wait: Duration) -> Option<Vec<u8>> {
    let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    s.send_to(packet, addr).await.unwrap();
    let mut buf = vec![0u8; 65535];
    match tokio::time::timeout(wait, s.recv(&mut buf)).await {
        Ok(Ok(n)) => Some(buf[..n].to_vec()),
        _ => None,
    }
}

async fn rcode_of(addr: SocketAddr, packet: &[u8]) -> ResponseCode {
    let resp = exchange(addr, packet, Duration::from_secs(2))
        .await
        .expect("a response");
    let m = Message::from_vec(&resp).expect("response parses");
    assert_eq!(m.metadata.id, u16::from_be_bytes([packet[0], packet[1]]));
    m.metadata.response_code
}

async fn server() -> (Cluster, sluice_dns::Bound) {
    let c = Cluster::start().await;
    c.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}))
        .await;
    c.create(json!({"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"type": "ClusterSetIP", "ips": ["127.60.0.10"], "ports": [{"name": "http", "port": 80}]}}))
        .await;
    let dns = c.dns("east").await;
    (c, dns)
}

async fn still_answers(addr: SocketAddr) {
    let m = query(addr, "web.shop.svc.clusterset.local.", RecordType::A, false).await;
    assert_eq!(answers(&m), ["127.60.0.10"]);
}

#[tokio::test]
async fn malformed_queries_get_precise_errors() {
    let (_c, dns) = server().await;
    let a = dns.addr;
    let s = seeds();

    // Shorter than a header: nothing to answer to (no id); the server keeps serving.
    assert!(
        exchange(a, &[1, 2, 3, 4, 5], Duration::from_millis(300))
            .await
            .is_none()
    );
    still_answers(a).await;

    // A header announcing a question that is garbage: FORMERR with the same id.
    let mut garbage = s[0][..12].to_vec();
    garbage.extend_from_slice(&[0xff; 40]);
    assert_eq!(rcode_of(a, &garbage).await, ResponseCode::FormErr);
    // A question cut short.
    assert_eq!(rcode_of(a, &s[0][..20]).await, ResponseCode::FormErr);
    // A name over 255 octets on the wire (over 253 characters as text).
    let mut long = s[0][..12].to_vec();
    for _ in 0..5 {
        long.push(63);
        long.extend_from_slice(&[b'a'; 63]);
    }
    long.extend_from_slice(&[0, 0, 1, 0, 1]);
    assert_eq!(rcode_of(a, &long).await, ResponseCode::FormErr);
    // A label pointer loop.
    let mut lp = s[0][..12].to_vec();
    lp.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
    assert_eq!(rcode_of(a, &lp).await, ResponseCode::FormErr);

    // Well-formed but not answerable as asked.
    let by_id = |id: u8| s.iter().find(|p| p[1] == id).unwrap().clone();
    assert_eq!(
        rcode_of(a, &by_id(17)).await,
        ResponseCode::FormErr,
        "two questions"
    );
    // BADVERS is 16, an extended rcode (which hickory also reads as BADSIG).
    assert_eq!(
        u16::from(rcode_of(a, &by_id(16)).await),
        16,
        "EDNS version 1"
    );
    assert_eq!(
        rcode_of(a, &by_id(19)).await,
        ResponseCode::NotImp,
        "UPDATE opcode"
    );
    assert_eq!(rcode_of(a, &by_id(15)).await, ResponseCode::Refused, "AXFR");
    assert_eq!(
        rcode_of(a, &by_id(18)).await,
        ResponseCode::Refused,
        "class CH, no upstream"
    );

    // A response (QR set) is never answered: no reflection loops.
    let mut resp = s[0].clone();
    resp[2] |= 0x80;
    assert!(
        exchange(a, &resp, Duration::from_millis(300))
            .await
            .is_none()
    );

    // TCP: a garbage frame ends that connection only.
    let mut t = tokio::net::TcpStream::connect(a).await.unwrap();
    t.write_all(&[0, 4, 0xde, 0xad, 0xbe, 0xef]).await.unwrap();
    let mut buf = [0u8; 64];
    // Too short for a header: no answer; the connection is closed at the latest when idle.
    let n = tokio::time::timeout(Duration::from_millis(500), t.read(&mut buf)).await;
    assert!(!matches!(n, Ok(Ok(k)) if k > 0), "{n:?}");
    still_answers(a).await;
    let m = query(a, "web.shop.svc.clusterset.local.", RecordType::A, true).await;
    assert_eq!(answers(&m), ["127.60.0.10"]);
}

#[tokio::test]
async fn a_flood_does_not_stop_the_next_legitimate_query() {
    let (_c, dns) = server().await;
    let a = dns.addr;
    let s = seeds();
    // 4 senders × 25,000 datagrams, never reading their answers, half garbage.
    let start = Instant::now();
    let mut floods = Vec::new();
    for f in 0..4u8 {
        let packets = s.clone();
        floods.push(tokio::spawn(async move {
            let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            for i in 0..25_000usize {
                let mut p = packets[i % packets.len()].clone();
                if i % 2 == 1 {
                    let at = 12 + (i % (p.len() - 12));
                    p[at] ^= f.wrapping_add(0x5a);
                }
                let _ = sock.send_to(&p, a).await;
            }
        }));
    }
    // Idle TCP connections hold no worker hostage either.
    let mut idle = Vec::new();
    for _ in 0..200 {
        idle.push(tokio::net::TcpStream::connect(a).await.unwrap());
    }
    for f in floods {
        f.await.unwrap();
    }
    let flood_time = start.elapsed();
    let t = Instant::now();
    still_answers(a).await;
    println!(
        "100,000 datagrams sent in {flood_time:?}; next legitimate query answered in {:?}",
        t.elapsed()
    );
    let m = query(a, "web.shop.svc.clusterset.local.", RecordType::A, true).await;
    assert_eq!(answers(&m), ["127.60.0.10"]);
    drop(idle);
}

/// Random and mutated packets through the datagram path: no panic, and every response
/// parses and carries the query's id.
/// A handler over a model with a ClusterSetIP service `web` and a headless `db` (two
/// endpoints in `east`) in namespace `shop`, no upstream.
fn model_handler() -> sluice_dns::handler::DnsHandler {
    let zones = sluice_dns::answer::Zones::new(
        hickory_proto::rr::Name::from_ascii("clusterset.local.").unwrap(),
        Some(hickory_proto::rr::Name::from_ascii("cluster.local.").unwrap()),
        5,
        "127.0.0.1".parse().unwrap(),
    );
    let state = Arc::new(sluice_dns::state::DnsState::new(zones, 0, None));
    {
        let mut model = state.model.write().unwrap();
        for (name, ty) in [("web", "ClusterSetIP"), ("db", "Headless")] {
            let si: sluice_api::mcs::ServiceImport = serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "shop"},
                "spec": {"type": ty, "ips": ["127.60.0.10"], "ports": [{"name": "pg", "port": 5432}]}
            }))
            .unwrap();
            model.apply_import(&si);
        }
        let slice: k8s_openapi::api::discovery::v1::EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "db-east", "namespace": "shop", "labels": {
                "multicluster.kubernetes.io/service-name": "db",
                "multicluster.kubernetes.io/source-cluster": "east"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["127.20.1.5"], "hostname": "db-0"},
                          {"addresses": ["127.20.1.6"]}]
        }))
        .unwrap();
        model.apply_slice(&slice);
    }
    sluice_dns::handler::DnsHandler { state }
}

#[test]
fn fuzz_datagrams() {
    let handler = model_handler();
    let responder =
        std::sync::Mutex::new(Responder::new(handler.clone(), sluice_dns::memo::MAX_BYTES));
    let src: SocketAddr = "127.0.0.1:5300".parse().unwrap();
    let seeds = seeds();
    let n_seeds = seeds.len();
    let mutated = (
        0..n_seeds,
        proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..4), 0..8),
        any::<usize>(),
    )
        .prop_map(move |(i, edits, cut)| {
            let mut p = seeds[i].clone();
            for (at, b, op) in edits {
                let at = at % (p.len() + 1);
                match op {
                    0 if at < p.len() => p[at] = b,
                    1 => p.insert(at, b),
                    2 if at < p.len() => {
                        p.remove(at);
                    }
                    _ => {
                        if at < p.len() {
                            p[at] ^= b
                        }
                    }
                }
            }
            if cut % 5 == 0 && !p.is_empty() {
                p.truncate(cut % p.len());
            }
            p
        });
    let strategy = prop_oneof![
        3 => mutated,
        1 => proptest::collection::vec(any::<u8>(), 0..600),
    ];
    let secs: u64 = std::env::var("SLUICE_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let deadline = Instant::now() + Duration::from_secs(secs);
    let executed = std::sync::atomic::AtomicU64::new(0);
    while Instant::now() < deadline {
        // A fresh runner per batch: each starts from a new random seed.
        let mut runner = TestRunner::new(RunnerConfig {
            cases: 2_000,
            failure_persistence: None,
            ..RunnerConfig::default()
        });
        runner
            .run(&strategy, |packet| {
                executed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let reference = handler.answer_datagram(&packet, src);
                // The memoized path answers exactly as the reference, on a miss and a hit.
                let mut responder = responder.lock().unwrap();
                for _ in 0..2 {
                    let got = match responder.answer(&packet, src) {
                        Reply::Send(b) => Some(b.to_vec()),
                        _ => None,
                    };
                    let want = match &reference {
                        Datagram::Reply(b) => Some(b.clone()),
                        _ => None,
                    };
                    prop_assert!(
                        same_answer(got.as_deref(), want.as_deref()),
                        "packet {:02x?}: {:02x?} is not {:02x?}",
                        packet,
                        got,
                        want
                    );
                }
                match reference {
                    Datagram::Reply(resp) => {
                        let m = Message::from_vec(&resp).map_err(|e| {
                            TestCaseError::fail(format!("unparsable response: {e}"))
                        })?;
                        prop_assert_eq!(m.metadata.id, u16::from_be_bytes([packet[0], packet[1]]));
                        prop_assert!(resp.len() <= 65535);
                    }
                    Datagram::Drop => prop_assert!(packet.len() < 12 || packet[2] & 0x80 != 0),
                    // Needs forwarding: only possible with an upstream, and there is none.
                    Datagram::Forward(_) => {
                        prop_assert!(false, "asked to forward without an upstream")
                    }
                }
                Ok(())
            })
            .unwrap();
    }
    // The remembered path was exercised, not only the full one.
    let hits = handler.state.metrics.remembered.get();
    assert!(hits > 0, "no packet was answered from a remembered answer");
    println!(
        "fuzz: {} packets in {secs} s, no panic; {hits} answered from remembered bytes, alike",
        executed.into_inner()
    );
}

/// Whether a remembered answer says what the full path's does: the same bytes, or — when
/// the remembered bytes came from a query that spelt the name in another case — the same
/// header, question bytes and records (names compare case-insensitively; hickory's encoder
/// compresses only against names of the same case, the remembered bytes point at the
/// question as asked).
fn same_answer(got: Option<&[u8]>, want: Option<&[u8]>) -> bool {
    let (Some(got), Some(want)) = (got, want) else {
        return got.is_none() && want.is_none();
    };
    if got == want {
        return true;
    }
    let (Ok(g), Ok(w)) = (Message::from_vec(got), Message::from_vec(want)) else {
        return false;
    };
    let question = |m: &Message| {
        m.queries
            .iter()
            .map(|q| q.name().to_string())
            .collect::<Vec<_>>()
    };
    g.metadata == w.metadata
        && g.queries == w.queries
        && question(&g) == question(&w)
        && g.answers == w.answers
        && g.authorities == w.authorities
        && g.additionals == w.additionals
        && g.edns == w.edns
}

/// A query for `name`/`qtype` with id `id`, RD set, and an OPT offering `payload`.
fn typed_query(id: u16, name: &str, qtype: RecordType, payload: Option<u16>) -> Vec<u8> {
    use hickory_proto::op::{Edns, Query};
    let mut m = Message::query();
    m.metadata.id = id;
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(
        hickory_proto::rr::Name::from_ascii(name).unwrap(),
        qtype,
    ));
    if let Some(p) = payload {
        let mut e = Edns::new();
        e.set_max_payload(p);
        m.set_edns(e);
    }
    m.to_vec().unwrap()
}

#[test]
fn remembered_answers_are_the_full_paths_bytes_and_follow_the_model() {
    let handler = model_handler();
    let mut responder = Responder::new(handler.clone(), sluice_dns::memo::MAX_BYTES);
    let src: SocketAddr = "127.0.0.1:5300".parse().unwrap();
    let names = [
        "web.shop.svc.clusterset.local.",
        "WEB.Shop.svc.ClusterSet.LOCAL.",
        "db.shop.svc.clusterset.local.",
        "db-0.east.db.shop.svc.clusterset.local.",
        "_pg._tcp.db.shop.svc.clusterset.local.",
        "_PG._TCP.web.shop.svc.clusterset.local.",
        "nosuch.shop.svc.clusterset.local.",
        "clusterset.local.",
        "dns-version.clusterset.local.",
        "web.shop.svc.cluster.local.",
        "elsewhere.example.",
    ];
    let types = [
        RecordType::A,
        RecordType::AAAA,
        RecordType::SRV,
        RecordType::ANY,
        RecordType::TXT,
        RecordType::SOA,
        RecordType::NS,
    ];
    let check = |responder: &mut Responder, packet: &[u8]| {
        let want = match handler.answer_datagram(packet, src) {
            Datagram::Reply(b) => b,
            _ => panic!("no reply to {packet:02x?}"),
        };
        for round in 0..2 {
            match responder.answer(packet, src) {
                Reply::Send(got) => assert!(
                    same_answer(Some(got), Some(&want)),
                    "round {round}, {packet:02x?}: {got:02x?} is not {want:02x?}"
                ),
                _ => panic!("no reply"),
            }
        }
        want
    };
    let mut id = 0u16;
    for name in names {
        for qtype in types {
            for payload in [None, Some(100), Some(600), Some(4096)] {
                id = id.wrapping_add(1);
                check(&mut responder, &typed_query(id, name, qtype, payload));
            }
        }
    }
    // One per name (in any case) and type, whatever the OPT; none for the name outside
    // the zones (refused, not authoritative).
    assert_eq!(responder.remembered(), (names.len() - 2) * types.len());

    // A change to the model is seen at once: web goes, api comes.
    let web = typed_query(1, "web.shop.svc.clusterset.local.", RecordType::A, None);
    let api = typed_query(2, "api.shop.svc.clusterset.local.", RecordType::A, None);
    let rcode = |b: &[u8]| Message::from_vec(b).unwrap().metadata.response_code;
    assert_eq!(rcode(&check(&mut responder, &web)), ResponseCode::NoError);
    assert_eq!(rcode(&check(&mut responder, &api)), ResponseCode::NXDomain);
    {
        let state = &handler.state;
        let mut model = state.model.write().unwrap();
        model.delete_import(&sluice_dns::model::ServiceKey::new("shop", "web"));
        let si: sluice_api::mcs::ServiceImport = serde_json::from_value(json!({
            "metadata": {"name": "api", "namespace": "shop"},
            "spec": {"type": "ClusterSetIP", "ips": ["127.60.0.11"], "ports": [{"port": 80}]}
        }))
        .unwrap();
        model.apply_import(&si);
        state.changed();
    }
    assert_eq!(rcode(&check(&mut responder, &web)), ResponseCode::NXDomain);
    assert_eq!(rcode(&check(&mut responder, &api)), ResponseCode::NoError);
}

/// A UDP query with an EDNS OPT offering `payload` bytes (none without).
fn udp_query(id: u16, name: &str, payload: Option<u16>) -> Vec<u8> {
    use hickory_proto::op::{Edns, Query};
    let mut m = Message::query();
    m.metadata.id = id;
    m.add_query(Query::query(
        hickory_proto::rr::Name::from_ascii(name).unwrap(),
        RecordType::A,
    ));
    if let Some(p) = payload {
        let mut e = Edns::new();
        e.set_max_payload(p);
        m.set_edns(e);
    }
    m.to_vec().unwrap()
}

#[tokio::test]
async fn udp_answers_fit_1232_bytes_and_larger_ones_are_truncated_to_tcp() {
    let (c, dns) = server().await;
    // A headless service with 150 ready endpoints: about 2.4 KB of A records.
    c.create(
        json!({"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
        "metadata": {"name": "big", "namespace": "shop"},
        "spec": {"type": "Headless", "ports": [{"name": "pg", "port": 5432}]}}),
    )
    .await;
    let endpoints: Vec<_> = (0..150)
        .map(|i| json!({"addresses": [format!("127.30.{}.{}", i / 200, 1 + i % 200)], "conditions": {"ready": true}}))
        .collect();
    c.create(
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "big-east", "namespace": "shop", "labels": {
            "multicluster.kubernetes.io/service-name": "big",
            "multicluster.kubernetes.io/source-cluster": "east",
            "endpointslice.kubernetes.io/managed-by": "sluice-mcs"}},
        "addressType": "IPv4",
        "ports": [{"name": "pg", "protocol": "TCP", "port": 5432}],
        "endpoints": endpoints}),
    )
    .await;
    let name = "big.shop.svc.clusterset.local.";
    let mut whole = Vec::new();
    for _ in 0..100 {
        whole = answers(&query(dns.addr, name, RecordType::A, true).await);
        if whole.len() == 150 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(whole.len(), 150, "over TCP, every record");
    // Whatever the client offers, a UDP answer is at most 1232 bytes (no amplifier for a
    // spoofed source); one that does not fit is cut short with TC set, and the client asks
    // again over TCP.
    for (id, offer, limit) in [
        (1, Some(65_535), 1232),
        (2, Some(4096), 1232),
        (3, None, 512),
    ] {
        let resp = exchange(
            dns.addr,
            &udp_query(id, name, offer),
            Duration::from_secs(2),
        )
        .await
        .expect("an answer");
        assert!(resp.len() <= limit, "{offer:?}: {} bytes", resp.len());
        let m = Message::from_vec(&resp).unwrap();
        assert_eq!(m.metadata.id, id);
        assert!(m.metadata.truncation, "{offer:?}: TC");
        assert!(m.answers.len() < 150);
        assert_eq!(m.queries.len(), 1);
    }
    // An answer that fits is whole.
    let resp = exchange(
        dns.addr,
        &udp_query(4, "web.shop.svc.clusterset.local.", Some(65_535)),
        Duration::from_secs(2),
    )
    .await
    .expect("an answer");
    let m = Message::from_vec(&resp).unwrap();
    assert!(!m.metadata.truncation);
    assert_eq!(answers(&m), ["127.60.0.10"]);
}
