//! What every built-in controller shares: the read-only caches of the cluster, the
//! expectations that keep a controller from acting twice before its writes show, and the
//! small readings of objects they all make.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Pod, ReplicationController, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::Value;
use sluice_kube::informer::Store;

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

    /// How long `key`'s expectation has left: its object is looked at again then, even if
    /// no watch event comes (the write it waited for may never show). `None` when it has
    /// none, or it lapsed.
    pub fn remaining(&mut self, key: &str) -> Option<Duration> {
        if !self.pending(key) {
            return None;
        }
        let t = self.0.get(key)?;
        Some(Self::WAIT.saturating_sub(t.elapsed()))
    }
}

/// The `Instant` at which the wall-clock time `t` comes (now when it is past).
pub fn instant_at(t: k8s_openapi::jiff::Timestamp) -> Instant {
    let left = t.duration_since(k8s_openapi::jiff::Timestamp::now());
    Instant::now() + Duration::try_from(left).unwrap_or(Duration::ZERO)
}

pub fn value<T: serde::Serialize>(o: &T) -> Value {
    serde_json::to_value(o).unwrap_or(Value::Null)
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
