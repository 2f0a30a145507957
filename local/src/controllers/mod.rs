//! The controllers a local physical cluster needs (the kube-controller-manager's part):
//! ReplicaSets (and ReplicationControllers) keep their Pods, Deployments roll ReplicaSets,
//! StatefulSets keep ordinals, Jobs run Pods to completion, CronJobs make Jobs on schedule,
//! EndpointSlices follow Pods.
//!
//! They run on the shared controller runtime ([`sluice_kube::Controller`]), one object at a
//! time: informers keep local caches, and each event touches the keys it concerns (a Pod
//! its controlling owner and its namespace's Services, a ReplicaSet itself and its
//! Deployment, a Job itself and its CronJob, an EndpointSlice its Service); a reconcile
//! computes one object's desired state from the caches and writes only differences, and
//! asks to be looked at again when an expectation lapses or a Job's deadline or a CronJob's
//! next run comes. Nothing runs while nothing changes.

pub mod cronjob;
pub mod deployment;
pub mod endpointslice;
pub mod job;
pub mod replicaset;
pub mod shared;
pub mod statefulset;
pub mod statefulset_claims;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Pod, ReplicationController, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::runtime::watcher;
use serde::de::DeserializeOwned;
use sluice_kube::controller::ControllerMetrics;
use sluice_kube::events::Recorder;
use sluice_kube::informer::Store;
use sluice_kube::{Action, Controller, Informer, Queue, Reconciler};
use tokio::sync::watch;

pub use shared::{Caches, Expectations};

/// How long a touched key waits for the events that come with it (a Deployment's new
/// ReplicaSet and its Pods arrive in steps).
const DEBOUNCE: Duration = Duration::from_millis(5);

/// Why the built-in controllers stopped before they were told to.
#[derive(Debug, thiserror::Error)]
pub enum ControllersError {
    #[error("an informer stopped before it synced")]
    Stopped,
    #[error("the stop signal's sender is gone")]
    Orphaned,
}

/// A namespace and a name.
pub type ObjectKey = (String, String);

/// What the built-in controllers reconcile.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    Deployment(ObjectKey),
    ReplicaSet(ObjectKey),
    ReplicationController(ObjectKey),
    StatefulSet(ObjectKey),
    Job(ObjectKey),
    CronJob(ObjectKey),
    /// A Service's EndpointSlice.
    Endpoints(ObjectKey),
    /// A Pod of this namespace changed: each Service here may select it (before or after).
    ServicesIn(String),
    /// A watch re-listed (objects deleted meanwhile have no event): every object.
    All,
}

fn key_of(meta: &ObjectMeta) -> ObjectKey {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// The controlling owner of `meta`, as a key when it is of a kind reconciled here.
fn owner_key(meta: &ObjectMeta) -> Option<Key> {
    let owner = meta
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))?;
    let k = (
        meta.namespace.clone().unwrap_or_default(),
        owner.name.clone(),
    );
    Some(match owner.kind.as_str() {
        "Deployment" => Key::Deployment(k),
        "ReplicaSet" => Key::ReplicaSet(k),
        "ReplicationController" => Key::ReplicationController(k),
        "StatefulSet" => Key::StatefulSet(k),
        "Job" => Key::Job(k),
        "CronJob" => Key::CronJob(k),
        _ => return None,
    })
}

/// The keys an event of an object touches.
type Touches<K> = fn(&K) -> Vec<Key>;

/// An informer on every object of kind `K` whose events touch the keys `touches` gives, and
/// [`Key::All`] at the end of each re-list.
fn informer<K>(
    client: &kube::Client,
    queue: &Arc<Queue<Key>>,
    what: &str,
    touches: Touches<K>,
) -> Informer<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let queue = queue.clone();
    Informer::start_with(
        Api::<K>::all(client.clone()),
        watcher::Config::default(),
        what,
        move |e| match e {
            watcher::Event::Apply(o) | watcher::Event::Delete(o) => {
                for k in touches(o) {
                    queue.touch(k);
                }
            }
            watcher::Event::InitDone => queue.touch(Key::All),
            watcher::Event::Init | watcher::Event::InitApply(_) => {}
        },
    )
}

/// The built-in controllers' reconciler: the caches, the client, what each controller
/// expects to see, and its Event recorders.
struct Controllers {
    client: kube::Client,
    caches: Caches,
    queue: Arc<Queue<Key>>,
    rs_expect: Expectations,
    sts_expect: Expectations,
    job_expect: Expectations,
    deployment_events: Recorder,
    replicaset_events: Recorder,
    job_events: Recorder,
    cronjob_events: Recorder,
}

impl Reconciler for Controllers {
    type Key = Key;
    type Error = kube::Error;

    async fn reconcile(&mut self, key: &Key) -> Result<Action, kube::Error> {
        let (client, caches) = (&self.client, &self.caches);
        let live = |meta: &ObjectMeta| meta.deletion_timestamp.is_none();
        match key {
            Key::All => {
                let queue = &self.queue;
                touch_every(queue, &caches.deployments, Key::Deployment);
                touch_every(queue, &caches.replicasets, Key::ReplicaSet);
                touch_every(
                    queue,
                    &caches.replicationcontrollers,
                    Key::ReplicationController,
                );
                touch_every(queue, &caches.statefulsets, Key::StatefulSet);
                touch_every(queue, &caches.jobs, Key::Job);
                touch_every(queue, &caches.cronjobs, Key::CronJob);
                touch_every(queue, &caches.services, Key::Endpoints);
                Ok(Action::AwaitChange)
            }
            Key::ServicesIn(ns) => {
                for svc in caches.services.in_namespace("", ns) {
                    self.queue.touch(Key::Endpoints(key_of(&svc.metadata)));
                }
                Ok(Action::AwaitChange)
            }
            Key::Deployment((ns, name)) => {
                if let Some(d) = caches
                    .deployments
                    .get(ns, name)
                    .filter(|d| live(&d.metadata))
                {
                    deployment::reconcile(client, caches, &d, &self.deployment_events).await?;
                }
                Ok(Action::AwaitChange)
            }
            Key::ReplicaSet((ns, name)) => {
                if let Some(rs) = caches
                    .replicasets
                    .get(ns, name)
                    .filter(|o| live(&o.metadata))
                {
                    replicaset::reconcile(
                        client,
                        caches,
                        &*rs,
                        &mut self.rs_expect,
                        &self.replicaset_events,
                    )
                    .await?;
                }
                let k = replicaset::expectation_key("ReplicaSet", ns, name);
                Ok(after(self.rs_expect.remaining(&k), None))
            }
            Key::ReplicationController((ns, name)) => {
                if let Some(rc) = caches
                    .replicationcontrollers
                    .get(ns, name)
                    .filter(|o| live(&o.metadata))
                {
                    replicaset::reconcile(
                        client,
                        caches,
                        &*rc,
                        &mut self.rs_expect,
                        &self.replicaset_events,
                    )
                    .await?;
                }
                let k = replicaset::expectation_key("ReplicationController", ns, name);
                Ok(after(self.rs_expect.remaining(&k), None))
            }
            Key::StatefulSet((ns, name)) => {
                if let Some(sts) = caches
                    .statefulsets
                    .get(ns, name)
                    .filter(|o| live(&o.metadata))
                {
                    statefulset::reconcile(client, caches, &sts, &mut self.sts_expect).await?;
                }
                let k = statefulset::expectation_key(ns, name);
                Ok(after(self.sts_expect.remaining(&k), None))
            }
            Key::Job((ns, name)) => {
                let mut timer = None;
                if let Some(job) = caches.jobs.get(ns, name).filter(|o| live(&o.metadata)) {
                    timer = job::reconcile(
                        client,
                        caches,
                        &job,
                        &mut self.job_expect,
                        &self.job_events,
                    )
                    .await?;
                }
                let k = job::expectation_key(ns, name);
                Ok(after(self.job_expect.remaining(&k), timer))
            }
            Key::CronJob((ns, name)) => {
                let mut timer = None;
                if let Some(cj) = caches.cronjobs.get(ns, name).filter(|o| live(&o.metadata)) {
                    timer = cronjob::reconcile(client, caches, &cj, &self.cronjob_events).await?;
                }
                Ok(after(None, timer))
            }
            Key::Endpoints((ns, name)) => {
                if let Some(svc) = caches.services.get(ns, name) {
                    endpointslice::reconcile(client, caches, &svc).await?;
                }
                Ok(Action::AwaitChange)
            }
        }
    }
}

/// Touch the key `key` makes of every object in `store`.
fn touch_every<K: kube::Resource>(queue: &Queue<Key>, store: &Store<K>, key: fn(ObjectKey) -> Key) {
    for o in store.state() {
        queue.touch(key(key_of(o.meta())));
    }
}

/// Look again when an expectation lapses or a timer comes, whichever is first.
fn after(expectation: Option<Duration>, timer: Option<Instant>) -> Action {
    let timer = timer.map(|t| t.saturating_duration_since(Instant::now()));
    match expectation.into_iter().chain(timer).min() {
        Some(d) => Action::Requeue(d),
        None => Action::AwaitChange,
    }
}

/// Run the controllers until `shutdown` flips, counting their reconciles in `metrics`.
pub async fn run(
    client: kube::Client,
    metrics: ControllerMetrics,
    shutdown: watch::Receiver<bool>,
) -> Result<(), ControllersError> {
    let queue: Arc<Queue<Key>> = Arc::new(Queue::new(DEBOUNCE));
    let pods = informer::<Pod>(&client, &queue, "pods", |p| {
        let mut keys = vec![Key::ServicesIn(
            p.metadata.namespace.clone().unwrap_or_default(),
        )];
        keys.extend(owner_key(&p.metadata));
        keys
    });
    let replicasets = informer::<ReplicaSet>(&client, &queue, "replicasets", |o| {
        let mut keys = vec![Key::ReplicaSet(key_of(&o.metadata))];
        keys.extend(owner_key(&o.metadata));
        keys
    });
    let replicationcontrollers =
        informer::<ReplicationController>(&client, &queue, "replicationcontrollers", |o| {
            vec![Key::ReplicationController(key_of(&o.metadata))]
        });
    let deployments = informer::<Deployment>(&client, &queue, "deployments", |o| {
        vec![Key::Deployment(key_of(&o.metadata))]
    });
    let services = informer::<Service>(&client, &queue, "services", |o| {
        vec![Key::Endpoints(key_of(&o.metadata))]
    });
    let statefulsets = informer::<StatefulSet>(&client, &queue, "statefulsets", |o| {
        vec![Key::StatefulSet(key_of(&o.metadata))]
    });
    let slices = informer::<EndpointSlice>(&client, &queue, "endpointslices", |o| {
        let service = o
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("kubernetes.io/service-name"));
        service
            .map(|s| Key::Endpoints((o.metadata.namespace.clone().unwrap_or_default(), s.clone())))
            .into_iter()
            .collect()
    });
    let jobs = informer::<Job>(&client, &queue, "jobs", |o| {
        let mut keys = vec![Key::Job(key_of(&o.metadata))];
        keys.extend(owner_key(&o.metadata));
        keys
    });
    let cronjobs = informer::<CronJob>(&client, &queue, "cronjobs", |o| {
        vec![Key::CronJob(key_of(&o.metadata))]
    });
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
    let recorder = |component: &str| Recorder::new(client.clone(), component, None);
    queue.touch(Key::All);
    let mut controllers = Controllers {
        deployment_events: recorder("deployment-controller"),
        replicaset_events: recorder("replicaset-controller"),
        job_events: recorder("job-controller"),
        cronjob_events: recorder("cronjob-controller"),
        client,
        caches,
        queue: queue.clone(),
        rs_expect: Expectations::default(),
        sts_expect: Expectations::default(),
        job_expect: Expectations::default(),
    };
    Controller::new("built-in controllers", queue, metrics)
        .run(&mut controllers, shutdown)
        .await
        .map_err(|_| ControllersError::Orphaned)
}
