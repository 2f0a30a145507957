#![allow(clippy::unwrap_used)]
//! The syncer between a real control plane (with its placement controllers) and a real
//! physical cluster's API server, both in process: a namespace placed on the cluster by its
//! break-glass label appears there in its downstream namespace, one not placed does not,
//! drift is reverted, and unplacing or deleting upstream removes it downstream.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use sluice_api::sluice::Cluster;
use sluice_api::sync::ANNOTATION_DOWNSTREAM_NAMESPACE;
use sluice_api::{ClusterName, LogicalClusterPath};
use sluice_test_support::client::client;
use sluice_test_support::poll::eventually;

const WITHIN: Duration = Duration::from_secs(60);

/// The Events in namespace `ns` of `client`'s logical cluster with `reason`, about the
/// object of `kind` named `name`.
async fn events_about(
    client: &kube::Client,
    ns: &str,
    reason: &str,
    kind: &str,
    name: &str,
) -> Vec<k8s_openapi::api::core::v1::Event> {
    Api::<k8s_openapi::api::core::v1::Event>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter(|e| {
                    e.reason.as_deref() == Some(reason)
                        && e.involved_object.kind.as_deref() == Some(kind)
                        && e.involved_object.name.as_deref() == Some(name)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The downstream name the control plane stamped on namespace `ns` of `client`'s logical
/// cluster.
async fn downstream_of(client: &kube::Client, ns: &str) -> String {
    let namespace = Api::<Namespace>::all(client.clone()).get(ns).await.unwrap();
    namespace.metadata.annotations.unwrap()[ANNOTATION_DOWNSTREAM_NAMESPACE].clone()
}

/// A control plane (with its placement controllers), one physical cluster `east` (a real
/// API server), and a syncer between them, all in process.
struct Clusterset {
    control: sluice_control::Bound,
    _east: sluice_control::Bound,
    root: kube::Client,
    downstream: kube::Client,
    stop: tokio::sync::watch::Sender<bool>,
    syncer: tokio::task::JoinHandle<Result<(), sluice_syncer::controller::SyncError>>,
    _dirs: [tempfile::TempDir; 2],
}

impl Clusterset {
    async fn start() -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let up_dir = tempfile::tempdir().unwrap();
        let control = sluice_control::build(sluice_control::Config::new(
            up_dir.path(),
            "127.0.0.1:0".parse().unwrap(),
        ))
        .await
        .unwrap();
        let down_dir = tempfile::tempdir().unwrap();
        let mut down_config =
            sluice_control::Config::new(down_dir.path(), "127.0.0.1:0".parse().unwrap());
        down_config.single_cluster = Some("127.41.0.0/16".parse().unwrap());
        let east = sluice_control::build(down_config).await.unwrap();
        let root = client(&control.admin_kubeconfig, None).await;
        let upstream = sluice_test_support::client::config(&control.admin_kubeconfig, None).await;
        let downstream = client(&east.admin_kubeconfig, None).await;
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let syncer = tokio::spawn(sluice_syncer::controller::run(
            sluice_syncer::controller::Config {
                upstream,
                downstream: downstream.clone(),
                cluster: ClusterName::new("east"),
                logs_url: None,
                mover_image: sluice_api::claim_copy::MOVER_IMAGE.into(),
            },
            stopped,
        ));
        Self {
            control,
            _east: east,
            root,
            downstream,
            stop,
            syncer,
            _dirs: [up_dir, down_dir],
        }
    }

    /// The Cluster `east` and namespace `shop` placed on it.
    async fn place_shop(&self) {
        Api::<Cluster>::all(self.root.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "east"}, "spec": {}})).unwrap(),
            )
            .await
            .unwrap();
        Api::<Namespace>::all(self.root.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "shop",
                    "labels": {"sluice.dev/cluster": "east"}}}))
                .unwrap(),
            )
            .await
            .unwrap();
    }

    async fn stop(self) {
        let _ = self.stop.send(true);
        self.syncer.await.unwrap().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placed_objects_are_synced_kept_and_removed() {
    let set = Clusterset::start().await;
    let (control, root, downstream) = (&set.control, set.root.clone(), set.downstream.clone());

    // The cluster, and a namespace placed on it (its syncer's heartbeat makes it ready).
    let clusters: Api<Cluster> = Api::all(root.clone());
    clusters
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "east"}, "spec": {}})).unwrap(),
        )
        .await
        .unwrap();
    let namespaces: Api<Namespace> = Api::all(root.clone());
    for (name, labels) in [
        ("shop", json!({"sluice.dev/cluster": "east"})),
        ("other", json!({})),
    ] {
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))
                    .unwrap(),
            )
            .await
            .unwrap();
    }
    let cms: Api<ConfigMap> = Api::namespaced(root.clone(), "shop");
    let svcs: Api<Service> = Api::namespaced(root.clone(), "shop");
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "settings", "labels": {"app": "web"}},
            "data": {"mode": "fast"},
        }))
        .unwrap(),
    )
    .await
    .unwrap();
    Api::<ConfigMap>::namespaced(root.clone(), "other")
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "other"}, "data": {"a": "b"}}))
                .unwrap(),
        )
        .await
        .unwrap();
    let up_svc = svcs
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "web"},
                "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
            }))
            .unwrap(),
        )
        .await
        .unwrap();

    let ns = downstream_of(&root, "shop").await;
    let down_ns: Api<Namespace> = Api::all(downstream.clone());
    let down_cms: Api<ConfigMap> = Api::namespaced(downstream.clone(), &ns);
    let down_svcs: Api<Service> = Api::namespaced(downstream.clone(), &ns);
    let data = |cm: Option<ConfigMap>| cm.and_then(|c| c.data).and_then(|d| d.get("mode").cloned());
    assert!(
        eventually(WITHIN, || async {
            data(down_cms.get_opt("settings").await.ok().flatten()).as_deref() == Some("fast")
        })
        .await,
        "the placed ConfigMap reached {ns}"
    );
    let namespace = down_ns.get(&ns).await.unwrap();
    assert_eq!(
        namespace.metadata.labels.unwrap()["sluice.dev/logical-cluster"],
        "root"
    );
    assert!(
        eventually(WITHIN, || async {
            down_svcs.get_opt("web").await.ok().flatten().is_some()
        })
        .await
    );
    let svc = down_svcs.get("web").await.unwrap();
    let ip = svc.spec.unwrap().cluster_ip.unwrap();
    assert!(ip.starts_with("127.41."), "allocated downstream: {ip}");
    assert_ne!(Some(ip), up_svc.spec.unwrap().cluster_ip);
    let other = downstream_of(&root, "other").await;
    assert!(
        Api::<ConfigMap>::namespaced(downstream.clone(), &other)
            .get_opt("other")
            .await
            .unwrap()
            .is_none(),
        "not placed"
    );
    // Another logical cluster with the same namespace and object names: both travel, each
    // to its own downstream namespace (a watch across logical clusters sees `shop/settings`
    // twice, and must keep both).
    Api::<kube::api::DynamicObject>::all_with(
        root.clone(),
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("sluice.dev", "v1alpha1", "Workspace"),
            "workspaces",
        ),
    )
    .create(
        &PostParams::default(),
        &serde_json::from_value(
            json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "Workspace",
            "metadata": {"name": "team"}}),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    let team = client(
        &control.admin_kubeconfig,
        Some(&format!("{}/clusters/root:team", control.url)),
    )
    .await;
    assert!(
        eventually(WITHIN, || async {
            Api::<Namespace>::all(team.clone())
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(json!({"metadata": {"name": "shop",
                        "labels": {"sluice.dev/cluster": "east"}}}))
                    .unwrap(),
                )
                .await
                .is_ok()
        })
        .await,
        "the new logical cluster serves namespaces"
    );
    Api::<ConfigMap>::namespaced(team.clone(), "shop")
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "settings"},
                "data": {"mode": "team"}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let team_ns = downstream_of(&team, "shop").await;
    let team_cms: Api<ConfigMap> = Api::namespaced(downstream.clone(), &team_ns);
    assert!(
        eventually(WITHIN, || async {
            data(team_cms.get_opt("settings").await.ok().flatten()).as_deref() == Some("team")
        })
        .await,
        "root:team's shop/settings reached {team_ns}"
    );
    assert_eq!(
        data(down_cms.get_opt("settings").await.unwrap()).as_deref(),
        Some("fast"),
        "root's shop/settings is still root's"
    );

    // Upstream, the objects carry their namespace's placement.
    let up = cms.get("settings").await.unwrap();
    assert_eq!(
        up.metadata
            .labels
            .unwrap()
            .get("state.sluice.dev/east")
            .map(String::as_str),
        Some("Sync")
    );

    // Drift downstream is reverted.
    down_cms
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"mode": "slow"}})),
        )
        .await
        .unwrap();
    assert!(
        eventually(WITHIN, || async {
            data(down_cms.get_opt("settings").await.ok().flatten()).as_deref() == Some("fast")
        })
        .await,
        "drift reverted"
    );

    // An upstream change travels.
    cms.patch(
        "settings",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"mode": "faster"}})),
    )
    .await
    .unwrap();
    assert!(
        eventually(WITHIN, || async {
            data(down_cms.get_opt("settings").await.ok().flatten()).as_deref() == Some("faster")
        })
        .await
    );

    // Synced objects carry the cluster's finalizer: their upstream deletion waits for the
    // downstream one.
    let finalizers = |o: Option<Vec<String>>| o.unwrap_or_default();
    assert!(
        eventually(WITHIN, || async {
            svcs.get_opt("web").await.ok().flatten().is_some_and(|s| {
                finalizers(s.metadata.finalizers).contains(&"syncer.sluice.dev/east".to_string())
            })
        })
        .await,
        "the syncer holds the upstream Service"
    );

    // Deleted upstream: gone downstream, then gone upstream.
    svcs.delete("web", &DeleteParams::default()).await.unwrap();
    assert!(
        eventually(WITHIN, || async {
            matches!(down_svcs.get_opt("web").await, Ok(None))
        })
        .await,
        "deleted upstream, removed downstream"
    );
    assert!(
        eventually(WITHIN, || async {
            matches!(svcs.get_opt("web").await, Ok(None))
        })
        .await,
        "the upstream deletion finishes once the downstream copy is gone"
    );
    // Unplaced: gone downstream.
    namespaces
        .patch(
            "shop",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"sluice.dev/cluster": null}}})),
        )
        .await
        .unwrap();
    assert!(
        eventually(WITHIN, || async {
            matches!(down_cms.get_opt("settings").await, Ok(None))
        })
        .await,
        "unplaced objects removed downstream"
    );
    // Unplacing released the cluster's finalizer: the upstream object can be deleted
    // without the cluster.
    assert!(
        eventually(WITHIN, || async {
            cms.get_opt("settings")
                .await
                .ok()
                .flatten()
                .is_some_and(|c| {
                    !finalizers(c.metadata.finalizers)
                        .contains(&"syncer.sluice.dev/east".to_string())
                })
        })
        .await,
        "unplacing released the finalizer"
    );
    // Nothing is placed in the namespace any more: it goes too.
    assert!(
        eventually(WITHIN, || async {
            match down_ns.get_opt(&ns).await {
                Ok(None) => true,
                Ok(Some(n)) => n.metadata.deletion_timestamp.is_some(),
                Err(_) => false,
            }
        })
        .await,
        "the emptied namespace removed downstream"
    );

    set.stop().await;
}

/// An object the physical cluster refuses (a Service asking for a node port another
/// Service holds there) is reported upstream as a `SyncFailed` Warning Event on the object,
/// naming the cluster and what it said, once; the rest of the namespace syncs, before and
/// after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_the_cluster_refuses_is_reported_upstream_and_stalls_nothing() {
    let set = Clusterset::start().await;
    let node_port = |name: &str| -> Service {
        serde_json::from_value(
            json!({"metadata": {"name": name}, "spec": {"type": "NodePort",
            "selector": {"app": name}, "ports": [{"port": 80, "nodePort": 30080}]}}),
        )
        .unwrap()
    };
    // East's own Service holds node port 30080.
    Api::<Service>::namespaced(set.downstream.clone(), "default")
        .create(&PostParams::default(), &node_port("local"))
        .await
        .unwrap();
    set.place_shop().await;
    Api::<Service>::namespaced(set.root.clone(), "shop")
        .create(&PostParams::default(), &node_port("web"))
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(set.root.clone(), "shop");
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "before"}})).unwrap(),
    )
    .await
    .unwrap();
    let ns = downstream_of(&set.root, "shop").await;
    let down_cms: Api<ConfigMap> = Api::namespaced(set.downstream.clone(), &ns);
    assert!(
        eventually(WITHIN, || async {
            down_cms.get_opt("before").await.ok().flatten().is_some()
        })
        .await,
        "the ConfigMap beside the refused object is synced"
    );
    let refusals = || events_about(&set.root, "shop", "SyncFailed", "Service", "web");
    assert!(
        eventually(WITHIN, || async { !refusals().await.is_empty() }).await,
        "a SyncFailed Event on the Service"
    );
    let said = refusals().await;
    let message = said[0].message.clone().unwrap_or_default();
    assert!(
        message.contains("cluster east refused the Service")
            && message.contains("provided port is already allocated"),
        "{message}"
    );
    assert_eq!(said[0].type_.as_deref(), Some("Warning"));
    // Nothing stalls: a later object syncs; the refusal is not repeated every round.
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "after"}})).unwrap(),
    )
    .await
    .unwrap();
    assert!(
        eventually(WITHIN, || async {
            down_cms.get_opt("after").await.ok().flatten().is_some()
        })
        .await
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(refusals().await.len(), 1, "reported once");
    set.stop().await;
}

/// Downstream namespace names are the control plane's: keyed (not the unkeyed legacy hash
/// a tenant could search collisions of), stamped on the namespace whatever a client sends;
/// and a downstream namespace that already holds another upstream namespace (names that
/// collide) is never written into: the claimant is told with a Warning Event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downstream_namespace_is_never_shared_by_two_upstream_namespaces() {
    let set = Clusterset::start().await;
    Api::<Cluster>::all(set.root.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "east"}, "spec": {}})).unwrap(),
        )
        .await
        .unwrap();
    let namespaces: Api<Namespace> = Api::all(set.root.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "shop"}})).unwrap(),
        )
        .await
        .unwrap();
    let down = downstream_of(&set.root, "shop").await;
    let legacy = sluice_api::sync::legacy_downstream_namespace(&LogicalClusterPath::root(), "shop");
    assert!(
        down.starts_with("shop-") && down.len() == "shop-".len() + 16,
        "{down}"
    );
    assert_ne!(down, legacy, "keyed, not the legacy hash");

    // No client names a namespace's downstream namespace, on create or later.
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "forged",
                "annotations": {ANNOTATION_DOWNSTREAM_NAMESPACE: down}}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let forged = downstream_of(&set.root, "forged").await;
    assert!(forged.starts_with("forged-") && forged != down, "{forged}");
    namespaces
        .patch(
            "shop",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                ANNOTATION_DOWNSTREAM_NAMESPACE: "kube-system"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        downstream_of(&set.root, "shop").await,
        down,
        "the stamp is kept"
    );

    // East already has that namespace, holding namespace shop of root:team (a collision),
    // with an object of its own.
    Api::<Namespace>::all(set.downstream.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": down,
                "labels": {"sluice.dev/synced": "true", "sluice.dev/logical-cluster": "root.team"},
                "annotations": {"sluice.dev/logical-cluster": "root:team",
                    "sluice.dev/upstream-namespace": "shop"}}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let theirs: Api<ConfigMap> = Api::namespaced(set.downstream.clone(), &down);
    theirs
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "theirs",
                "labels": {"sluice.dev/synced": "true"}}, "data": {"k": "team"}}))
            .unwrap(),
        )
        .await
        .unwrap();

    // root's shop is placed on east, with an object.
    namespaces
        .patch(
            "shop",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"sluice.dev/cluster": "east"}}})),
        )
        .await
        .unwrap();
    Api::<ConfigMap>::namespaced(set.root.clone(), "shop")
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "mine"}, "data": {"k": "root"}}))
                .unwrap(),
        )
        .await
        .unwrap();
    let conflicts = || events_about(&set.root, "shop", "NamespaceConflict", "Namespace", "shop");
    assert!(
        eventually(WITHIN, || async { !conflicts().await.is_empty() }).await,
        "a NamespaceConflict Event on shop"
    );
    let said = conflicts().await;
    let message = said[0].message.clone().unwrap_or_default();
    assert!(
        message.contains(&down) && message.contains("root:team") && message.contains("east"),
        "{message}"
    );
    assert_eq!(said[0].type_.as_deref(), Some("Warning"));
    // A few rounds later, the namespace and its object are as they were: nothing of root's
    // was written there, nothing of root:team's removed.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        theirs.get_opt("mine").await.unwrap().is_none(),
        "root's object stays out"
    );
    assert!(
        theirs.get_opt("theirs").await.unwrap().is_some(),
        "team's object stays"
    );
    let held = Api::<Namespace>::all(set.downstream.clone())
        .get(&down)
        .await
        .unwrap();
    assert_eq!(
        held.metadata.annotations.unwrap()["sluice.dev/logical-cluster"],
        "root:team"
    );
    assert_eq!(conflicts().await.len(), 1, "reported once");
    set.stop().await;
}

/// The path from the control plane into a cluster (the syncer's log endpoint) proves a
/// per-cluster identity on both ends: it answers only the control plane's certificate, the
/// control plane sends nothing to an endpoint that cannot prove the cluster it asked for,
/// a client that stalls is let go, and only the namespaces the syncer synced are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_endpoint_answers_only_the_control_plane_and_only_for_synced_namespaces() {
    use http_body_util::BodyExt;
    use sluice_api::liveness::syncer_server_name;
    use sluice_control::agent_client::{AgentClient, AgentError};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let set = Clusterset::start().await;
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = sluice_control::pki::Pki::load_or_create(pki_dir.path(), &[]).unwrap();
    let ca_der: Vec<Vec<u8>> =
        rustls::pki_types::CertificateDer::pem_slice_iter(pki.ca_cert_pem.as_bytes())
            .map(|c| c.unwrap().to_vec())
            .collect();
    use rustls::pki_types::pem::PemObject;
    let syncer_of = |cluster: &str| {
        let (cert, key) = pki
            .issue_agent_cert(
                &format!("system:sluice:syncer:{cluster}"),
                &["system:sluice:syncers"],
                &syncer_server_name(&ClusterName::new(cluster)),
            )
            .unwrap();
        sluice_syncer::logs::Identity {
            cert_pem: cert.into_bytes(),
            key_pem: key.into_bytes(),
            ca_der: ca_der.clone(),
        }
    };
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    let addr = sluice_syncer::logs::serve(
        "127.0.0.1:0".parse().unwrap(),
        set.downstream.clone(),
        &syncer_of("east"),
        stopped,
    )
    .await
    .unwrap();
    let url = format!("https://{addr}");
    let control = AgentClient::new(pki.agent_client_config().unwrap());
    let east = ClusterName::new("east");
    let get = |path: String| {
        let (control, url, east) = (control.clone(), url.clone(), east.clone());
        async move {
            let resp = control.get(&url, &east, &path).await.unwrap();
            let status = resp.status().as_u16();
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            (status, String::from_utf8_lossy(&body).to_string())
        }
    };
    // The cluster's own namespaces are not served.
    let (status, body) = get("/logs/kube-system/x".into()).await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("not one Sluice synced"), "{body}");

    // East's endpoint cannot pass for west's syncer: nothing is sent to it.
    match control
        .get(&url, &ClusterName::new("west"), "/logs/kube-system/x")
        .await
    {
        Err(e @ AgentError::Identity { .. }) => {
            assert!(e.to_string().contains("west.syncer.sluice.internal"), "{e}")
        }
        other => panic!(
            "west's name was not checked: {:?}",
            other.map(|r| r.status())
        ),
    }
    // Nor can a plain-HTTP address be published.
    assert!(matches!(
        control
            .get(&format!("http://{addr}"), &east, "/logs/a/b")
            .await,
        Err(AgentError::NotHttps(_))
    ));

    // Another identity the same CA signed (west's syncer) is refused by east's endpoint.
    let west = syncer_of("west");
    let mut roots = rustls::RootCertStore::empty();
    for c in &ca_der {
        roots
            .add(rustls::pki_types::CertificateDer::from(c.clone()))
            .unwrap();
    }
    let certs: Vec<_> = rustls::pki_types::CertificateDer::pem_slice_iter(&west.cert_pem)
        .map(|c| c.unwrap())
        .collect();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(&west.key_pem).unwrap();
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)
        .unwrap();
    let impostor = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let answer = async {
        let mut tls = impostor
            .connect(syncer_server_name(&east).try_into().unwrap(), tcp)
            .await?;
        tls.write_all(b"GET /logs/kube-system/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await?;
        let mut out = Vec::new();
        tls.read_to_end(&mut out).await?;
        Ok::<_, std::io::Error>(out)
    }
    .await;
    assert!(
        answer.as_ref().map_or(true, |out| out.is_empty()),
        "west's syncer got an answer: {:?}",
        answer.map(|o| String::from_utf8_lossy(&o).to_string())
    );
    // A plain HTTP request gets no HTTP answer; a client that sends nothing is let go.
    let mut plain = tokio::net::TcpStream::connect(addr).await.unwrap();
    plain
        .write_all(b"GET /logs/kube-system/x HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    let _ = plain.read_to_end(&mut out).await;
    assert!(
        !out.starts_with(b"HTTP/1.1 "),
        "{}",
        String::from_utf8_lossy(&out)
    );
    let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    let closed = tokio::time::timeout(
        sluice_syncer::logs::HEAD_WITHIN * 6,
        silent.read_to_end(&mut Vec::new()),
    )
    .await;
    assert!(
        closed.is_ok(),
        "a client that sends nothing is disconnected"
    );

    // A synced namespace is asked of the cluster (which has no such Pod).
    set.place_shop().await;
    let down = downstream_of(&set.root, "shop").await;
    let ns_api: Api<Namespace> = Api::all(set.downstream.clone());
    assert!(
        eventually(WITHIN, || async {
            ns_api.get_opt(&down).await.ok().flatten().is_some()
        })
        .await,
        "shop reaches east"
    );
    let (status, body) = get(format!("/logs/{down}/nope")).await;
    assert_eq!(status, 404, "{body}");
    assert!(!body.contains("not one Sluice synced"), "{body}");
    set.stop().await;
}

/// A custom resource definition labelled `sluice.dev/syncable: "true"` in a logical cluster
/// makes its kind travel: the syncer installs the definition in the cluster, then its objects
/// are placed and synced like built-in ones (and removed when deleted upstream); the objects
/// of an unmarked definition stay upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_marked_syncable_travel() {
    use kube::api::{ApiResource, DynamicObject};
    let set = Clusterset::start().await;
    set.place_shop().await;
    let crd_api = ApiResource::erase::<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    >(&());
    let crd = |plural: &str, kind: &str, labels: serde_json::Value| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.example.com"), "labels": labels},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(), "listKind": format!("{kind}List")},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object",
                        "x-kubernetes-preserve-unknown-fields": true}}}]},
        }))
        .unwrap()
    };
    let crds: Api<DynamicObject> = Api::all_with(set.root.clone(), &crd_api);
    crds.create(
        &PostParams::default(),
        &crd("widgets", "Widget", json!({"sluice.dev/syncable": "true"})),
    )
    .await
    .unwrap();
    crds.create(&PostParams::default(), &crd("gadgets", "Gadget", json!({})))
        .await
        .unwrap();
    let resource = |plural: &str, kind: &str| ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    let (widgets, gadgets) = (resource("widgets", "Widget"), resource("gadgets", "Gadget"));
    // The logical cluster serves the kinds once their definitions are established.
    let up_widgets: Api<DynamicObject> = Api::namespaced_with(set.root.clone(), "shop", &widgets);
    let up_gadgets: Api<DynamicObject> = Api::namespaced_with(set.root.clone(), "shop", &gadgets);
    let object = |kind: &str| -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": kind,
            "metadata": {"name": "one"}, "spec": {"size": 3}}))
        .unwrap()
    };
    assert!(
        eventually(WITHIN, || async {
            up_widgets
                .create(&PostParams::default(), &object("Widget"))
                .await
                .is_ok()
        })
        .await
    );
    assert!(
        eventually(WITHIN, || async {
            up_gadgets
                .create(&PostParams::default(), &object("Gadget"))
                .await
                .is_ok()
        })
        .await
    );

    let ns = downstream_of(&set.root, "shop").await;
    let down_widgets: Api<DynamicObject> =
        Api::namespaced_with(set.downstream.clone(), &ns, &widgets);
    assert!(
        eventually(WITHIN, || async {
            down_widgets
                .get_opt("one")
                .await
                .ok()
                .flatten()
                .is_some_and(|w| w.data["spec"]["size"] == 3)
        })
        .await,
        "the Widget reached {ns}"
    );
    // The definition the cluster got is the syncer's; the unmarked one stayed upstream.
    let down_crds: Api<DynamicObject> = Api::all_with(set.downstream.clone(), &crd_api);
    let installed = down_crds.get("widgets.example.com").await.unwrap();
    assert_eq!(
        installed.metadata.labels.unwrap()["sluice.dev/synced"],
        "true"
    );
    assert!(
        down_crds
            .get_opt("gadgets.example.com")
            .await
            .unwrap()
            .is_none()
    );
    // A change to the definition reaches the cluster.
    crds.patch(
        "widgets.example.com",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"names": {"shortNames": ["wd"]}}})),
    )
    .await
    .unwrap();
    assert!(
        eventually(WITHIN, || async {
            down_crds
                .get_opt("widgets.example.com")
                .await
                .ok()
                .flatten()
                .is_some_and(|c| c.data["spec"]["names"]["shortNames"] == json!(["wd"]))
        })
        .await,
        "the changed definition reached the cluster"
    );
    // The Widget carries its namespace's placement upstream; deleted there, it goes.
    let up = up_widgets.get("one").await.unwrap();
    assert!(
        up.metadata
            .labels
            .unwrap_or_default()
            .contains_key("state.sluice.dev/east")
    );
    up_widgets
        .delete("one", &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        eventually(WITHIN, || async {
            down_widgets.get_opt("one").await.ok().flatten().is_none()
                && up_widgets.get_opt("one").await.ok().flatten().is_none()
        })
        .await,
        "deleted downstream, then upstream"
    );
    set.stop().await;
}
