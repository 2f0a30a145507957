//! A single-cluster API server in process, a DNS server against it, and a real hickory
//! client (UDP and TCP) to ask it.

#![allow(dead_code, unused_imports)]

use std::net::SocketAddr;
use std::time::Duration;

use hickory_net::client::{Client, ClientHandle};
use hickory_net::runtime::TokioRuntimeProvider;
use hickory_net::tcp::TcpClientStream;
use hickory_net::udp::UdpClientStream;
use hickory_proto::op::Message;
use hickory_proto::rr::{DNSClass, Name, RData, RecordType};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::Value;

pub struct Cluster {
    pub control: sluice_control::Bound,
    pub client: kube::Client,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// A single-cluster API server (Service ClusterIPs from 127.40.0.0/16).
    pub async fn start() -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config =
            sluice_control::Config::new(dir.path(), "127.0.0.1:0".parse().expect("addr"));
        config.single_cluster = Some("127.40.0.0/16".parse().expect("cidr"));
        let control = sluice_control::build(config).await.expect("control");
        let client = sluice_test_support::client::client(&control.admin_kubeconfig, None).await;
        Self {
            control,
            client,
            _dir: dir,
        }
    }

    /// A DNS server for cluster `id` against this API server, once its informers synced.
    pub async fn dns(&self, id: &str) -> sluice_dns::Bound {
        let dns = sluice_dns::build(sluice_dns::Config::new(self.client.clone(), id))
            .await
            .expect("dns");
        wait_synced(&dns).await;
        dns
    }

    fn api(&self, v: &Value) -> Api<DynamicObject> {
        let api_version = v["apiVersion"].as_str().expect("apiVersion");
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let kind = v["kind"].as_str().expect("kind");
        let plural = match kind {
            "EndpointSlice" => "endpointslices".to_string(),
            "ServiceImport" => "serviceimports".to_string(),
            k => format!("{}s", k.to_lowercase()),
        };
        let ar = ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: api_version.into(),
            kind: kind.into(),
            plural,
        };
        match v["metadata"]["namespace"].as_str() {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        }
    }

    pub async fn create(&self, v: Value) -> DynamicObject {
        let obj: DynamicObject = serde_json::from_value(v.clone()).expect("object");
        self.api(&v)
            .create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("create {v}: {e}"))
    }

    /// Server-side apply (creates or updates).
    pub async fn apply(&self, v: Value) {
        let name = v["metadata"]["name"].as_str().expect("name").to_string();
        self.api(&v)
            .patch(
                &name,
                &PatchParams::apply("test").force(),
                &Patch::Apply(&v),
            )
            .await
            .unwrap_or_else(|e| panic!("apply {v}: {e}"));
    }

    /// A JSON merge patch (`null` removes a key).
    pub async fn patch(&self, v: Value) {
        let name = v["metadata"]["name"].as_str().expect("name").to_string();
        self.api(&v)
            .patch(&name, &PatchParams::default(), &Patch::Merge(&v))
            .await
            .unwrap_or_else(|e| panic!("patch {v}: {e}"));
    }

    pub async fn patch_status(&self, v: Value) {
        let name = v["metadata"]["name"].as_str().expect("name").to_string();
        self.api(&v)
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&v))
            .await
            .unwrap_or_else(|e| panic!("patch status {v}: {e}"));
    }

    pub async fn delete(&self, v: Value) {
        let name = v["metadata"]["name"].as_str().expect("name").to_string();
        self.api(&v)
            .delete(&name, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("delete {v}: {e}"));
    }
}

pub async fn wait_synced(dns: &sluice_dns::Bound) {
    for _ in 0..500 {
        if dns.state.synced() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("dns informers did not sync");
}

/// One query over UDP from the address `src` (a pod's IP).
pub async fn query_from(addr: SocketAddr, src: &str, name: &str, qtype: RecordType) -> Message {
    let name = Name::from_ascii(name).expect("name");
    let bind: SocketAddr = format!("{src}:0").parse().expect("source address");
    let stream = UdpClientStream::builder(addr, TokioRuntimeProvider::new())
        .with_timeout(Some(Duration::from_secs(2)))
        .with_bind_addr(Some(bind))
        .build();
    let (mut client, bg) = Client::<TokioRuntimeProvider>::from_sender(stream);
    let bg = tokio::spawn(bg);
    let r = client.query(name, DNSClass::IN, qtype).await;
    bg.abort();
    r.expect("dns response").into_message()
}

/// One query with hickory's client, over UDP (EDNS) or TCP.
pub async fn query(addr: SocketAddr, name: &str, qtype: RecordType, tcp: bool) -> Message {
    let name = Name::from_ascii(name).expect("name");
    let provider = TokioRuntimeProvider::new();
    let response = if tcp {
        let (stream, sender) =
            TcpClientStream::new(addr, None, Some(Duration::from_secs(2)), provider);
        let (mut client, bg) =
            Client::<TokioRuntimeProvider>::new(stream.await.expect("tcp connect"), sender);
        let bg = tokio::spawn(bg);
        let r = client.query(name, DNSClass::IN, qtype).await;
        bg.abort();
        r
    } else {
        let stream = UdpClientStream::builder(addr, provider)
            .with_timeout(Some(Duration::from_secs(2)))
            .build();
        let (mut client, bg) = Client::<TokioRuntimeProvider>::from_sender(stream);
        let bg = tokio::spawn(bg);
        let r = client.query(name, DNSClass::IN, qtype).await;
        bg.abort();
        r
    }
    .expect("dns response");
    response.into_message()
}

/// The answer section as sorted strings: addresses, `prio weight port target` for SRV,
/// the text for TXT, the target for CNAME.
pub fn answers(m: &Message) -> Vec<String> {
    let mut out: Vec<String> = m
        .answers
        .iter()
        .map(|r| match &r.data {
            RData::A(a) => a.0.to_string(),
            RData::AAAA(a) => a.0.to_string(),
            RData::SRV(s) => format!("{} {} {} {}", s.priority, s.weight, s.port, s.target),
            RData::TXT(t) => t.to_string(),
            RData::CNAME(c) => c.0.to_string(),
            other => other.to_string(),
        })
        .collect();
    out.sort();
    out
}

pub use sluice_test_support::poll::until;
