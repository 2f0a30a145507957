//! Recording Kubernetes Events (`core/v1`), as client-go's recorder does: one Event per
//! (object, type, reason, message), its `count` and `lastTimestamp` raised when it
//! repeats, so `kubectl describe` and `kubectl get events` read what a controller saw
//! without a flood. Best effort: an Event that cannot be written is logged, never fatal.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Event;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

/// Whether an Event reports the normal course of things or something to look at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "Normal",
            Self::Warning => "Warning",
        }
    }
}

/// The object an Event is about (its `involvedObject`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Regarding {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
}

impl Regarding {
    /// The reference to a typed object.
    pub fn of<K: Resource<DynamicType = ()>>(o: &K) -> Self {
        let meta = o.meta();
        Self {
            api_version: K::api_version(&()).into_owned(),
            kind: K::kind(&()).into_owned(),
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone(),
        }
    }
}

/// What an Event says: repeats of the same are one Event with a count.
type Said = (Regarding, EventType, String, String);
/// The Event written for it, its count, and when.
type Written = (String, i32, Instant);

/// Who records: the component (`kubelet`, `job-controller`) and the host it runs on.
pub struct Recorder {
    client: kube::Client,
    component: String,
    host: Option<String>,
    /// Events written lately, by what they say: repeats raise their count.
    recent: Mutex<HashMap<Said, Written>>,
}

/// How long a repeat counts on the Event already written instead of making a new one.
const AGGREGATE_FOR: Duration = Duration::from_secs(600);

impl Recorder {
    pub fn new(client: kube::Client, component: &str, host: Option<&str>) -> Self {
        Self {
            client,
            component: component.to_string(),
            host: host.map(str::to_string),
            recent: Mutex::default(),
        }
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, HashMap<Said, Written>> {
        self.recent.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Record that `reason` happened to `regarding` (best effort).
    pub async fn record(&self, regarding: &Regarding, ty: EventType, reason: &str, message: &str) {
        let now = crate::time::now_rfc3339();
        let key = (
            regarding.clone(),
            ty,
            reason.to_string(),
            message.to_string(),
        );
        let api: Api<Event> = Api::namespaced(self.client.clone(), &regarding.namespace);
        let seen = {
            let mut recent = self.recent();
            recent.retain(|_, (_, _, at)| at.elapsed() < AGGREGATE_FOR);
            recent.get(&key).cloned()
        };
        if let Some((name, count, _)) = seen {
            let patch = json!({"count": count + 1, "lastTimestamp": now});
            if api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .is_ok()
            {
                self.recent().insert(key, (name, count + 1, Instant::now()));
                return;
            }
        }
        let mut source = json!({"component": self.component});
        if let Some(host) = &self.host {
            source["host"] = json!(host);
        }
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": format!("{}.", regarding.name), "namespace": regarding.namespace},
            "involvedObject": {
                "apiVersion": regarding.api_version, "kind": regarding.kind,
                "namespace": regarding.namespace, "name": regarding.name, "uid": regarding.uid,
            },
            "type": ty.as_str(),
            "reason": reason,
            "message": message,
            "source": source,
            "reportingComponent": self.component,
            "reportingInstance": self.host.clone().unwrap_or_default(),
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        });
        let Ok(event) = serde_json::from_value::<Event>(event) else {
            return;
        };
        match api.create(&PostParams::default(), &event).await {
            Ok(made) => {
                if let Some(name) = made.metadata.name {
                    self.recent().insert(key, (name, 1, Instant::now()));
                }
            }
            Err(e) => {
                tracing::debug!(kind = %regarding.kind, name = %regarding.name, reason, error = %e, "event not recorded")
            }
        }
    }
}
