#![allow(clippy::unwrap_used)]
//! Three control replicas on a three-member etcd on loopback: kubectl writes through one
//! replica while a kube-rs reflector watches through another and ends exactly in sync;
//! `kill -9` of the leading replica and of an etcd member under continuous writes through
//! the others loses no acknowledged write; the leader-only controllers move to another
//! replica within 15 s and work there.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use sluice_test_support::etcd::{Etcd, free_port};
use support::{Control, Kubectl, kubectls};

const WITHIN: Duration = Duration::from_secs(90);

fn etcd_cluster(dir: &Path) -> Vec<Etcd> {
    let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
    let cluster = ports
        .iter()
        .enumerate()
        .map(|(i, (_, peer))| format!("e{i}=http://127.0.0.1:{peer}"))
        .collect::<Vec<_>>()
        .join(",");
    let members: Vec<Etcd> = ports
        .iter()
        .enumerate()
        .map(|(i, (client, peer))| {
            Etcd::start_member(
                &format!("e{i}"),
                &dir.join(format!("etcd{i}")),
                *client,
                *peer,
                Some(&cluster),
            )
        })
        .collect();
    for m in &members {
        m.wait_healthy(WITHIN);
    }
    members
}

fn copy_dir(from: &Path, to: &Path) {
    let status = std::process::Command::new("cp")
        .arg("-r")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success());
}

fn kubectl(c: &Control, cache: &Path) -> Kubectl {
    Kubectl::new(&kubectls().remove(0), &c.kubeconfig, cache)
}

/// The replica holding the leader Lease, by its holder identity.
fn holder(k: &Kubectl) -> String {
    k.run(&[
        "-n",
        "kube-system",
        "get",
        "lease",
        "sluice-control",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ])
    .stdout
    .iter()
    .map(|b| *b as char)
    .collect()
}

fn config_maps(prefix: &str, n: usize, value: &str) -> String {
    let items: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("{prefix}-{i:04}"), "namespace": "default"},
                "data": {"v": value}})
        })
        .collect();
    serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
}

#[test]
fn three_replicas_on_three_etcd_members_stay_in_sync_and_lose_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let members = etcd_cluster(dir.path());
    let servers = members
        .iter()
        .map(|m| m.url.clone())
        .collect::<Vec<_>>()
        .join(",");
    let flags = ["--etcd-servers", &servers, "--etcd-prefix", "/sluice/"];
    // Replica 1 makes the PKI; the others run on copies of its directory.
    let mut replicas = vec![Control::start(&dir.path().join("r1"), &flags)];
    for name in ["r2", "r3"] {
        copy_dir(&dir.path().join("r1"), &dir.path().join(name));
        replicas.push(Control::start(&dir.path().join(name), &flags));
    }
    let ks: Vec<Kubectl> = replicas
        .iter()
        .enumerate()
        .map(|(i, r)| kubectl(r, &dir.path().join(format!("cache{i}"))))
        .collect();

    // 1,000 changes through replica 1 while a reflector watches through replica 2.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let watched = Arc::new(Mutex::new(BTreeMap::<String, (String, String)>::new()));
    let out_of_order = Arc::new(AtomicBool::new(false));
    let reflector_task = {
        let kubeconfig = replicas[1].kubeconfig.clone();
        let (watched, out_of_order) = (watched.clone(), out_of_order.clone());
        rt.spawn(async move {
            let client = sluice_test_support::client::client(&kubeconfig, None).await;
            let api: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
            let (reader, writer) = reflector::store();
            let mut last_rv = 0u64;
            let stream = reflector(writer, watcher(api, watcher::Config::default()))
                .applied_objects()
                .boxed();
            let mut stream = stream;
            while let Some(Ok(cm)) = stream.next().await {
                let rv: u64 = cm
                    .metadata
                    .resource_version
                    .as_deref()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                if rv < last_rv {
                    out_of_order.store(true, Ordering::Relaxed);
                }
                last_rv = rv;
                let mut w = watched.lock().unwrap();
                for o in reader.state() {
                    let name = o.metadata.name.clone().unwrap_or_default();
                    let v = o
                        .data
                        .as_ref()
                        .and_then(|d| d.get("v").cloned())
                        .unwrap_or_default();
                    w.insert(
                        name,
                        (o.metadata.resource_version.clone().unwrap_or_default(), v),
                    );
                }
            }
        })
    };
    let file = dir.path().join("cms.json");
    std::fs::write(&file, config_maps("sync", 500, "one")).unwrap();
    ks[0].ok(&["create", "-f", file.to_str().unwrap()]);
    std::fs::write(&file, config_maps("sync", 500, "two")).unwrap();
    ks[0].ok(&["replace", "-f", file.to_str().unwrap()]);
    // What replica 1 says, then what the reflector through replica 2 has: the same.
    let listed: BTreeMap<String, (String, String)> = {
        let out = ks[0].ok(&["-n", "default", "get", "configmaps", "-o", "json"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["metadata"]["name"].as_str().unwrap().starts_with("sync-"))
            .map(|i| {
                (
                    i["metadata"]["name"].as_str().unwrap().to_string(),
                    (
                        i["metadata"]["resourceVersion"]
                            .as_str()
                            .unwrap()
                            .to_string(),
                        i["data"]["v"].as_str().unwrap().to_string(),
                    ),
                )
            })
            .collect()
    };
    assert_eq!(listed.len(), 500);
    assert!(listed.values().all(|(_, v)| v == "two"));
    let deadline = Instant::now() + WITHIN;
    loop {
        let w: BTreeMap<_, _> = watched
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, _)| k.starts_with("sync-"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if w == listed {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the reflector through replica 2 has {} of 500 in sync",
            w.iter().filter(|(k, v)| listed.get(*k) == Some(v)).count()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        !out_of_order.load(Ordering::Relaxed),
        "the watch through replica 2 went back in resourceVersion"
    );
    reflector_task.abort();

    // Who leads; writers go through the two others.
    let leader_id = holder(&ks[0]);
    assert!(!leader_id.is_empty(), "no replica holds the leader Lease");
    let leader = replicas
        .iter()
        .position(|r| leader_id.ends_with(r.url.trim_start_matches("https://")))
        .unwrap_or_else(|| panic!("the holder {leader_id} is none of the replicas"));
    let others: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let acknowledged = Arc::new(Mutex::new(Vec::<String>::new()));
    let writers: Vec<_> = others
        .iter()
        .map(|&i| {
            let (k, stop, acknowledged) = (ks[i].clone(), stop.clone(), acknowledged.clone());
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let name = format!("w{i}-{n:05}");
                    n += 1;
                    let out = k.run(&[
                        "-n",
                        "default",
                        "create",
                        "configmap",
                        &name,
                        "--from-literal=v=x",
                    ]);
                    if out.status.success() {
                        acknowledged.lock().unwrap().push(name);
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(3));
    let killed_at = Instant::now();
    let leader_replica = replicas.remove(leader);
    leader_replica.kill9();
    members[0].kill9();
    eprintln!(
        "killed replica {} (the leader) and etcd member e0",
        leader + 1
    );
    // A survivor takes the lease over.
    let survivor = &ks[others[0]];
    let moved = loop {
        let h = holder(survivor);
        if !h.is_empty() && h != leader_id {
            break killed_at.elapsed();
        }
        assert!(
            killed_at.elapsed() < WITHIN,
            "the leader Lease stayed with {h}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!("the leader-only controllers moved after {moved:?}");
    assert!(moved < Duration::from_secs(15), "{moved:?}");
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(
        acknowledged.len() > 20,
        "only {} writes",
        acknowledged.len()
    );
    // Every acknowledged write is there, through both survivors.
    for &i in &others {
        let out = ks[i].ok(&["-n", "default", "get", "configmaps", "-o", "name"]);
        let present: std::collections::BTreeSet<&str> = out
            .lines()
            .filter_map(|l| l.trim().strip_prefix("configmap/"))
            .collect();
        let missing: Vec<&String> = acknowledged
            .iter()
            .filter(|n| !present.contains(n.as_str()))
            .collect();
        assert!(
            missing.is_empty(),
            "replica {}: {} of {} acknowledged writes missing: {missing:?}",
            i + 1,
            missing.len(),
            acknowledged.len()
        );
    }
    eprintln!(
        "{} acknowledged writes through the survivors, none lost",
        acknowledged.len()
    );
    // The new leader's namespace termination works.
    survivor.ok(&["create", "namespace", "after-failover"]);
    survivor.ok(&["delete", "namespace", "after-failover", "--wait=false"]);
    let deadline = Instant::now() + WITHIN;
    while survivor
        .run(&["get", "namespace", "after-failover"])
        .status
        .success()
    {
        assert!(
            Instant::now() < deadline,
            "the namespace was never terminated"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
