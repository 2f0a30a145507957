//! The controllers a local physical cluster needs (the kube-controller-manager's part):
//! ReplicaSets keep their Pods, Deployments roll ReplicaSets, EndpointSlices follow Pods.
//!
//! Reflectors keep local caches; every change (and a periodic tick) triggers a
//! level-triggered pass over all objects: each controller computes the desired state from
//! the caches and writes only differences.

pub mod deployment;
pub mod endpointslice;
pub mod replicaset;
pub mod statefulset;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::{Notify, watch};

/// Read-only caches of the cluster.
#[derive(Clone)]
pub struct Caches {
    pub pods: Store<Pod>,
    pub replicasets: Store<ReplicaSet>,
    pub deployments: Store<Deployment>,
    pub statefulsets: Store<StatefulSet>,
    pub services: Store<Service>,
    pub slices: Store<EndpointSlice>,
}

/// Objects acted on recently, not to be acted on again before the caches caught up.
#[derive(Default)]
pub struct Expectations(HashMap<String, Instant>);

impl Expectations {
    const WAIT: Duration = Duration::from_secs(2);

    pub fn pending(&mut self, key: &str) -> bool {
        match self.0.get(key) {
            Some(t) if t.elapsed() < Self::WAIT => true,
            Some(_) => {
                self.0.remove(key);
                false
            }
            None => false,
        }
    }

    pub fn expect(&mut self, key: &str) {
        self.0.insert(key.to_string(), Instant::now());
    }

    pub fn satisfied(&mut self, key: &str) {
        self.0.remove(key);
    }
}

fn cache<K>(client: &kube::Client, notify: Arc<Notify>) -> (Store<K>, tokio::task::JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store::<K>();
    let stream = reflector::reflector(
        writer,
        watcher(Api::<K>::all(client.clone()), watcher::Config::default()),
    )
    .default_backoff()
    .touched_objects()
    .for_each(move |_| {
        notify.notify_one();
        async {}
    });
    (reader, tokio::spawn(stream))
}

pub fn value<T: serde::Serialize>(o: &T) -> Value {
    serde_json::to_value(o).unwrap_or(Value::Null)
}

/// True when a Pod counts as ready.
pub fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

pub fn pod_active(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && !matches!(
            p.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
}

/// Labels match a `matchLabels` selector.
pub fn selects(
    selector: &Value,
    labels: Option<&std::collections::BTreeMap<String, String>>,
) -> bool {
    let Some(ml) = selector["matchLabels"].as_object() else {
        return false;
    };
    !ml.is_empty()
        && ml
            .iter()
            .all(|(k, v)| labels.and_then(|l| l.get(k)).map(String::as_str) == v.as_str())
}

pub fn owned_by(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    uid: &str,
) -> bool {
    meta.owner_references
        .as_ref()
        .is_some_and(|r| r.iter().any(|o| o.uid == uid && o.controller == Some(true)))
}

/// Run the controllers until `shutdown` flips.
pub async fn run(client: kube::Client, mut shutdown: watch::Receiver<bool>) -> anyhow::Result<()> {
    let notify = Arc::new(Notify::new());
    let (pods, t1) = cache::<Pod>(&client, notify.clone());
    let (replicasets, t2) = cache::<ReplicaSet>(&client, notify.clone());
    let (deployments, t3) = cache::<Deployment>(&client, notify.clone());
    let (services, t4) = cache::<Service>(&client, notify.clone());
    let (statefulsets, t6) = cache::<StatefulSet>(&client, notify.clone());
    // Slice changes do not wake the loop: the controllers only compare against them, most
    // slices in a clusterset are other controllers' (MCS), and the tick repairs drift.
    let (slices, t5) = cache::<EndpointSlice>(&client, Arc::new(Notify::new()));
    for ready in [
        pods.wait_until_ready().await,
        replicasets.wait_until_ready().await,
        deployments.wait_until_ready().await,
    ] {
        ready?;
    }
    services.wait_until_ready().await?;
    slices.wait_until_ready().await?;
    statefulsets.wait_until_ready().await?;
    let caches = Caches {
        pods,
        replicasets,
        deployments,
        statefulsets,
        services,
        slices,
    };
    let mut rs_expect = Expectations::default();
    let mut sts_expect = Expectations::default();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            _ = notify.notified() => {}
            _ = tick.tick() => {}
        }
        deployment::reconcile_all(&client, &caches).await;
        replicaset::reconcile_all(&client, &caches, &mut rs_expect).await;
        statefulset::reconcile_all(&client, &caches, &mut sts_expect).await;
        endpointslice::reconcile_all(&client, &caches).await;
    }
    for t in [t1, t2, t3, t4, t5, t6] {
        t.abort();
    }
    Ok(())
}
