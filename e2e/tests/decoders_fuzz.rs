//! Every decoder a tenant's bytes reach, fed random and mutated input for a time budget:
//! the API server's bodies (JSON, YAML, Kubernetes protobuf), its three patch types, label
//! and field selectors and `continue` tokens; the tunnel's stream preamble and SPIFFE ids.
//! (The DNS datagram path has its own, `dns_bad_input.rs` `fuzz_datagrams`.) No input may
//! panic; the expansion attacks (YAML aliases, deep nesting) are refused with bounded
//! memory. `SLUICE_FUZZ_SECS=N` gives each decoder N seconds (default 2); the counts are
//! printed and recorded in docs/benchmarks.md.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};
use sluice_control::handlers::objects::decode_continue;
use sluice_control::patch::{json_patch, merge_patch, strategic_patch};
use sluice_control::pipeline::decode::parse_yaml;
use sluice_control::pipeline::parse_json;
use sluice_control::schema::SchemaSet;
use sluice_control::selectors::{FieldSelector, LabelSelector};

fn budget() -> Duration {
    let secs = std::env::var("SLUICE_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    Duration::from_secs_f64(secs)
}

/// Feed `f` values of `strategy` until the budget is spent; the count.
fn run<S: Strategy>(name: &str, strategy: S, f: impl Fn(S::Value)) -> u64
where
    S::Value: std::fmt::Debug + Clone,
{
    let mut runner = TestRunner::new(Config::default());
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < budget() || n < 100 {
        let input = strategy.new_tree(&mut runner).unwrap().current();
        let kept = input.clone();
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(input))).is_err() {
            panic!("{name} panicked on {kept:?}");
        }
        n += 1;
    }
    println!(
        "{name}: {n} inputs in {:.1} s, no panic",
        start.elapsed().as_secs_f64()
    );
    n
}

/// Bytes: random, or a valid `seed` with a few bytes changed, inserted, removed or cut.
fn mutated(seed: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    let edits = (
        proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 0..8),
        any::<usize>(),
    )
        .prop_map(move |(edits, cut)| {
            let mut p = seed.clone();
            for (at, b, op) in edits {
                let at = at % (p.len() + 1);
                match op {
                    0 if at < p.len() => p[at] = b,
                    1 => p.insert(at, b),
                    _ if at < p.len() => {
                        p.remove(at);
                    }
                    _ => {}
                }
            }
            if cut % 7 == 0 && !p.is_empty() {
                p.truncate(cut % p.len());
            }
            p
        });
    prop_oneof![3 => edits, 1 => proptest::collection::vec(any::<u8>(), 0..512)]
}

/// Text over the characters a selector is made of.
fn selector_text() -> impl Strategy<Value = String> {
    proptest::string::string_regex(
        r"[a-z0-9./=!,() \-_~é\x00]{0,64}( in | notin )?[a-z(),=! ]{0,16}",
    )
    .unwrap()
}

fn deployment() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [
            {"name": "web", "image": "echo:1", "env": [{"name": "A", "value": "1"}], "ports": [{"containerPort": 80}]}]}}}})
}

/// Peak resident memory of this process (VmHWM), in KiB.
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

#[test]
fn api_server_bodies_never_panic() {
    let obj = serde_json::to_vec(&deployment()).unwrap();
    run("JSON bodies", mutated(obj), |b| {
        let _ = parse_json(&b);
    });
    let yaml = b"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  labels: {app: web}\nspec:\n  replicas: 1\n  template:\n    spec:\n      containers:\n      - {name: web, image: 'echo:1'}\n".to_vec();
    run("YAML bodies", mutated(yaml), |b| {
        let _ = parse_yaml(&b);
    });
    let mut proto = b"k8s\x00".to_vec();
    // TypeMeta{apiVersion: v1, kind: Pod}, raw: {}, contentType: "".
    proto.extend_from_slice(&[
        0x0a, 0x0b, 0x0a, 0x02, b'v', b'1', 0x12, 0x03, b'P', b'o', b'd', 0x12, 0x00, 0x1a, 0x00,
    ]);
    run("protobuf bodies", mutated(proto), |b| {
        let _ = sluice_control::codec::protobuf::decode(&b, "io.k8s.api.core.v1.Pod");
    });
}

#[test]
fn patches_never_panic() {
    let target = deployment();
    let json_seed = br#"[{"op":"add","path":"/metadata/labels/x","value":"y"},{"op":"copy","from":"/spec","path":"/metadata/annotations"},{"op":"remove","path":"/spec/replicas"}]"#.to_vec();
    run("JSON patches", mutated(json_seed), |b| {
        let _ = json_patch(&target, &b);
    });
    let merge_seed =
        br#"{"metadata":{"labels":{"app":null,"x":"y"}},"spec":{"replicas":3}}"#.to_vec();
    run("merge patches", mutated(merge_seed), |b| {
        let _ = merge_patch(&target, &b);
    });
    let smp_seed = br#"{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"echo:2","$patch":"replace"},{"name":"side","image":"s"}],"$setElementOrder/containers":[{"name":"side"},{"name":"web"}]}}}}"#.to_vec();
    run("strategic merge patches", mutated(smp_seed), |b| {
        let _ = strategic_patch(
            SchemaSet::builtin(),
            "io.k8s.api.apps.v1.Deployment",
            &target,
            &b,
        );
    });
}

#[test]
fn selectors_and_continue_tokens_never_panic() {
    let o = deployment();
    run("label selectors", selector_text(), |s| {
        if let Ok(sel) = LabelSelector::parse(&s) {
            let _ = sel.matches(&o);
        }
    });
    run("field selectors", selector_text(), |s| {
        if let Ok(sel) = FieldSelector::parse(&s) {
            let _ = sel.matches(&o);
        }
    });
    use base64::Engine;
    let token = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(br#"{"k":"/registry/core/configmaps/root/default/a","rv":42}"#);
    let tokens = prop_oneof![
        mutated(token.into_bytes()).prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        mutated(br#"{"k":"/registry/core/configmaps/root/","rv":1}"#.to_vec())
            .prop_map(|b| { base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b) }),
    ];
    run("continue tokens", tokens, |t| {
        let _ = decode_continue(&t, "/registry/core/configmaps/root/");
    });
}

#[test]
fn tunnel_preambles_and_identities_never_panic() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut seed = b"SLT1".to_vec();
    seed.extend_from_slice(&14u16.to_be_bytes());
    seed.extend_from_slice(b"127.0.0.1:8080");
    run("tunnel stream preambles", mutated(seed), |b| {
        rt.block_on(async {
            let _ = sluice_dataplane::tunnel::frame::read_request(&mut &b[..]).await;
            let _ = sluice_dataplane::tunnel::frame::read_verdict(&mut &b[..]).await;
        });
    });
    run(
        "SPIFFE ids",
        mutated(b"spiffe://sluice/cluster/east/gateway".to_vec())
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        |s| {
            let _ = sluice_dataplane::tunnel::identity::SpiffeId::parse(&s);
        },
    );
}

/// Run alone in a child process (this test binary, this test only), so the peak resident
/// memory measured is this test's, not the fuzzers' running beside it.
#[test]
fn expansion_attacks_are_refused_with_bounded_memory() {
    const CHILD: &str = "SLUICE_EXPANSION_CHILD";
    if std::env::var_os(CHILD).is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "expansion_attacks_are_refused_with_bounded_memory",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        print!("{}", String::from_utf8_lossy(&out.stdout));
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    // Billion laughs: nine levels of ten aliases each.
    let mut laughs = String::from(
        "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
    );
    for (prev, name) in "abcdefgh".chars().zip("bcdefghi".chars()) {
        let refs = vec![format!("*{prev}"); 10].join(",");
        laughs.push_str(&format!("{name}: &{name} [{refs}]\n"));
    }
    let before = peak_rss_kib();
    let start = Instant::now();
    assert!(parse_yaml(laughs.as_bytes()).is_err(), "a billion laughs");
    // Nesting far deeper than any object: refused, not a stack overflow.
    let deep_yaml = format!("{}x{}", "[".repeat(100_000), "]".repeat(100_000));
    assert!(parse_yaml(deep_yaml.as_bytes()).is_err());
    let deep_json = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
    assert!(parse_json(deep_json.as_bytes()).is_err());
    let grown = peak_rss_kib().saturating_sub(before);
    println!(
        "expansion attacks refused in {:?}, peak RSS grew {grown} KiB",
        start.elapsed()
    );
    assert!(grown < 64 * 1024, "peak RSS grew {grown} KiB");
}
