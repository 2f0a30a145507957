//! The controllers a local physical cluster needs (the kube-controller-manager's part):
//! ReplicaSets (and ReplicationControllers) keep their Pods, Deployments roll ReplicaSets,
//! StatefulSets keep ordinals, Jobs run Pods to completion, CronJobs make Jobs on schedule,
//! EndpointSlices follow Pods.
//!
//! Informers (the shared runtime's) keep local caches; every change triggers a
//! level-triggered pass over all objects: each controller computes the desired state from
//! the caches and writes only differences.

pub mod cronjob;
pub mod deployment;
pub mod endpointslice;
pub mod job;
pub mod replicaset;
pub mod statefulset;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Pod, ReplicationController, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::watcher;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sluice_kube::Informer;
use sluice_kube::informer::Store;
use tokio::sync::{Notify, watch};

/// Read-only caches of the cluster.
#[derive(Clone)]
pub struct Caches {
    pub pods: Store<Pod>,
    pub replicasets: Store<ReplicaSet>,
    pub replicationcontrollers: Store<ReplicationController>,
    pub deployments: Store<Deployment>,
    pub statefulsets: Store<StatefulSet>,
    pub services: Store<Service>,
    pub slices: Store<EndpointSlice>,
    pub jobs: Store<Job>,
    pub cronjobs: Store<CronJob>,
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

    /// When the earliest pending expectation lapses: the loop looks again then, even if
    /// no watch event comes (the write it waited for may never show).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.0.values().map(|t| *t + Self::WAIT).min()
    }
}

/// An informer on every object of kind `K` that wakes the loop through `notify`.
fn informer<K>(client: &kube::Client, notify: &Arc<Notify>, what: &str) -> Informer<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    Informer::start(
        Api::<K>::all(client.clone()),
        watcher::Config::default(),
        notify.clone(),
        what,
    )
}

/// The `Instant` at which the wall-clock time `t` comes (now when it is past).
pub fn instant_at(t: k8s_openapi::jiff::Timestamp) -> Instant {
    let left = t.duration_since(k8s_openapi::jiff::Timestamp::now());
    Instant::now() + Duration::try_from(left).unwrap_or(Duration::ZERO)
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

/// Why the built-in controllers stopped before they were told to.
#[derive(Debug, thiserror::Error)]
pub enum ControllersError {
    #[error("an informer stopped before it synced")]
    Stopped,
}

/// Run the controllers until `shutdown` flips. They are level-triggered: every watch
/// event (coalesced) starts a pass that compares the caches with what should be and
/// writes only differences; besides events, a pass runs when an expectation lapses, and a
/// slow resync repairs what no event reported.
pub async fn run(
    client: kube::Client,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), ControllersError> {
    const RESYNC: Duration = Duration::from_secs(30);
    let notify = Arc::new(Notify::new());
    let pods = informer::<Pod>(&client, &notify, "pods");
    let replicasets = informer::<ReplicaSet>(&client, &notify, "replicasets");
    let replicationcontrollers =
        informer::<ReplicationController>(&client, &notify, "replicationcontrollers");
    let deployments = informer::<Deployment>(&client, &notify, "deployments");
    let services = informer::<Service>(&client, &notify, "services");
    let statefulsets = informer::<StatefulSet>(&client, &notify, "statefulsets");
    let slices = informer::<EndpointSlice>(&client, &notify, "endpointslices");
    let jobs = informer::<Job>(&client, &notify, "jobs");
    let cronjobs = informer::<CronJob>(&client, &notify, "cronjobs");
    for ready in [
        pods.store.wait_until_ready().await,
        replicasets.store.wait_until_ready().await,
        replicationcontrollers.store.wait_until_ready().await,
        deployments.store.wait_until_ready().await,
        services.store.wait_until_ready().await,
        slices.store.wait_until_ready().await,
        statefulsets.store.wait_until_ready().await,
        jobs.store.wait_until_ready().await,
        cronjobs.store.wait_until_ready().await,
    ] {
        ready.map_err(|_| ControllersError::Stopped)?;
    }
    let caches = Caches {
        pods: pods.store.clone(),
        replicasets: replicasets.store.clone(),
        replicationcontrollers: replicationcontrollers.store.clone(),
        deployments: deployments.store.clone(),
        statefulsets: statefulsets.store.clone(),
        services: services.store.clone(),
        slices: slices.store.clone(),
        jobs: jobs.store.clone(),
        cronjobs: cronjobs.store.clone(),
    };
    let mut rs_expect = Expectations::default();
    let mut sts_expect = Expectations::default();
    let mut job_expect = Expectations::default();
    // When a Job's deadline or time to live, or a CronJob's next run, comes.
    let mut timers: Option<Instant> = None;
    let recorder =
        |component: &str| sluice_kube::events::Recorder::new(client.clone(), component, None);
    let (deployment_events, replicaset_events, job_events, cronjob_events) = (
        recorder("deployment-controller"),
        recorder("replicaset-controller"),
        recorder("job-controller"),
        recorder("cronjob-controller"),
    );
    let mut resync = tokio::time::interval(RESYNC);
    loop {
        let lapse = [
            rs_expect.next_deadline(),
            sts_expect.next_deadline(),
            job_expect.next_deadline(),
            timers,
        ]
        .into_iter()
        .flatten()
        .min();
        let lapsed = async {
            match lapse {
                Some(t) => tokio::time::sleep_until(t.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.changed() => break,
            _ = notify.notified() => {}
            _ = lapsed => {}
            _ = resync.tick() => {}
        }
        deployment::reconcile_all(&client, &caches, &deployment_events).await;
        replicaset::reconcile_all(&client, &caches, &mut rs_expect, &replicaset_events).await;
        statefulset::reconcile_all(&client, &caches, &mut sts_expect).await;
        let job_timer = job::reconcile_all(&client, &caches, &mut job_expect, &job_events).await;
        let cron_timer = cronjob::reconcile_all(&client, &caches, &cronjob_events).await;
        timers = job_timer.into_iter().chain(cron_timer).min();
        endpointslice::reconcile_all(&client, &caches).await;
    }
    Ok(())
}
