#![allow(clippy::unwrap_used)]
//! What an admission webhook adds to a create (issue 39, done-when 3), side by side on one
//! `dev up --clusters east,west`: ConfigMap creates through the control plane with no
//! webhook, with a validating webhook on loopback reached by URL, and with one whose Service
//! runs on east (reached through east's syncer, TLS end to end). Sequential creates with
//! kube-rs; p50 and p99 of each, and the ratio to no webhook.
//!
//!     cargo bench -p sluice --bench webhooks      (SLUICE_BENCH_OPS, default 500)

#[path = "../tests/webhooks/server.rs"]
mod server;
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::json;
use sluice_test_support::stats::{Latencies, env_usize, ms};
use support::{DevUp, eventually};

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"key": "value"}})).unwrap()
}

/// `n` sequential creates in namespace `ns`, each timed.
async fn creates(client: &kube::Client, ns: &str, n: usize) -> Latencies {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let mut out = Latencies::default();
    for i in 0..n {
        let t = Instant::now();
        api.create(&PostParams::default(), &cm(&format!("c-{i}")))
            .await
            .unwrap();
        out.0.push(t.elapsed());
    }
    out
}

fn main() {
    // Run by the node agent as the sample operator's Pod.
    if std::env::var_os(server::SERVE_ENV).is_some() {
        server::serve_from_env();
        return;
    }
    let n = env_usize("SLUICE_BENCH_OPS", 500);
    let (mut dev, _) = DevUp::start("east,west");
    let k = dev.kubectl_control();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();

    // The loopback webhook, served by this process.
    let (local_ca, local_cert, local_key) = server::certificates(&["127.0.0.1"]);
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    rt.spawn(server::serve(listener, local_cert, local_key));

    // The remote one: the sample operator on east, this binary as its process.
    let (ca, cert, key) = server::certificates(&["sample-webhook.hooks.svc"]);
    let exe = std::env::current_exe().unwrap().display().to_string();
    k.apply_stdin(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: hooks, labels: {sluice.dev/cluster: east}}\n",
    );
    k.apply_stdin(&server::sample_operator(&cert, &key, &[&exe]));
    for (ns, label) in [("none", "none"), ("local", "local"), ("remote", "remote")] {
        k.apply_stdin(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: bench-{ns}, labels: {{webhooks: {label}, sluice.dev/cluster: west}}}}\n"
        ));
    }
    k.apply_stdin(&server::configuration(
        "ValidatingWebhookConfiguration",
        "local",
        &format!("url: https://127.0.0.1:{port}/validate"),
        &local_ca,
        "Fail",
        "local",
        10,
    ));
    k.apply_stdin(&server::configuration(
        "ValidatingWebhookConfiguration",
        "remote",
        "service: {namespace: hooks, name: sample-webhook, path: /validate}",
        &ca,
        "Fail",
        "remote",
        10,
    ));
    let mut probe = 0;
    assert!(
        eventually(Duration::from_secs(120), || {
            probe += 1;
            k.run(&[
                "-n",
                "bench-remote",
                "create",
                "configmap",
                &format!("probe-{probe}"),
            ])
            .status
            .success()
        }),
        "the webhook on east never answered"
    );

    let client = rt.block_on(sluice_test_support::client::client(
        &dev.state.join("control.kubeconfig"),
        None,
    ));
    // Warm each path once, then measure them one after another.
    for ns in ["bench-none", "bench-local", "bench-remote"] {
        rt.block_on(creates(&client, ns, 20));
    }
    let rt_ref = &rt;
    let run = |ns: &str, round: usize| {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        rt_ref.block_on(async {
            let mut out = Latencies::default();
            for i in 0..n {
                let t = Instant::now();
                api.create(&PostParams::default(), &cm(&format!("r{round}-{i}")))
                    .await
                    .unwrap();
                out.0.push(t.elapsed());
            }
            out
        })
    };
    println!("ConfigMap creates through the control plane of dev up (east, west), n={n} each");
    let mut none = run("bench-none", 1);
    let mut local = run("bench-local", 1);
    let mut remote = run("bench-remote", 1);
    let base = none.line("no webhook");
    let base50 = none.pct(0.5);
    let l99 = local.line("validating webhook by URL on loopback");
    let l50 = local.pct(0.5);
    let r99 = remote.line("validating webhook on east (through its syncer)");
    let r50 = remote.pct(0.5);
    println!(
        "{:<44} p50 {:.2}x   p99 {:.2}x of no webhook",
        "ratio: loopback webhook",
        ms(l50) / ms(base50).max(0.001),
        ms(l99) / ms(base).max(0.001)
    );
    println!(
        "{:<44} p50 {:.2}x   p99 {:.2}x of no webhook",
        "ratio: webhook on east",
        ms(r50) / ms(base50).max(0.001),
        ms(r99) / ms(base).max(0.001)
    );
    drop(client);
    assert!(dev.stop());
}
