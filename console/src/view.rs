//! What the page shows, made from the objects the control plane serves: clusters (Ready,
//! cordoned, draining, capacity and allocation, addresses), namespaces (where each runs,
//! its `Placed` condition, the weights and drain counts of a move), Placements and
//! Events. Pure functions of JSON objects; the page gets these as JSON.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;
use sluice_api::sync::{
    DRAINING_ANNOTATION_PREFIX, IMPORTS_ANNOTATION_PREFIX, ImportReport, LABEL_CLUSTER,
    STATE_LABEL_PREFIX, WEIGHT_ANNOTATION_PREFIX,
};

/// How many Events the page gets, newest first.
pub const EVENTS_SHOWN: usize = 60;

/// A physical cluster as registered (`Cluster` of the root logical cluster).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterView {
    pub name: String,
    pub ready: bool,
    /// The `Ready` condition's message (why not, when not).
    pub ready_message: String,
    pub cordoned: bool,
    pub draining: bool,
    pub capacity: Value,
    pub allocated: Value,
    pub placed_namespaces: i64,
    pub gateways: Vec<String>,
    pub ingresses: Vec<String>,
    /// Where its dataplanes' counts are read (`spec.metrics`).
    pub metrics: Vec<String>,
    /// Namespaces still running here while it drains.
    pub left: usize,
}

/// The phase of a namespace's placement, from its `Placed` condition and the annotations
/// a move writes: what the timeline records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Phase {
    /// Runs where it should.
    Placed,
    /// The new cluster is being added; the old stays until the new is available and
    /// imported everywhere.
    Moving,
    /// The new cluster is available and imported everywhere; traffic leaves the old by
    /// weight.
    Shifting,
    /// The old cluster's weight is 0 and its endpoints drain.
    Draining,
    /// Waiting for its turn to leave a draining cluster.
    Queued,
    /// The move was rolled back.
    RolledBack,
    /// Not where it should be, for a reason the condition gives.
    Pending,
    /// No condition yet.
    Unknown,
}

impl Phase {
    /// Whether this phase is part of a move under way.
    pub fn moving(self) -> bool {
        matches!(self, Phase::Moving | Phase::Shifting | Phase::Draining)
    }
}

/// A namespace of some logical cluster, as placement reports it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceView {
    pub logical_cluster: String,
    pub name: String,
    /// The clusters it runs on (its state labels).
    pub clusters: Vec<String>,
    /// The break-glass label `sluice.dev/cluster`, when set.
    pub pinned: Option<String>,
    pub phase: Option<Phase>,
    /// The `Placed` condition's reason and message.
    pub reason: String,
    pub message: String,
    /// Traffic weights of clusters being shifted off (0..100).
    pub weights: BTreeMap<String, u64>,
    /// Clusters whose endpoints are marked draining.
    pub draining: Vec<String>,
    /// Live connections and requests to each draining cluster, summed over the members'
    /// reports.
    pub active: BTreeMap<String, u64>,
    /// The `Drained` condition's message of the last drain.
    pub drained: String,
    /// Its name in every physical cluster.
    pub downstream: String,
}

impl NamespaceView {
    /// `<logical cluster>/<namespace>`: how the page names it.
    pub fn key(&self) -> String {
        format!("{}/{}", self.logical_cluster, self.name)
    }
}

/// A Placement and what it selects.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlacementView {
    pub logical_cluster: String,
    pub name: String,
    pub selected: Vec<String>,
    pub ready: bool,
    pub message: String,
}

/// An Event, as `kubectl get events` shows it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventView {
    /// RFC 3339: the last time it happened.
    pub time: String,
    pub logical_cluster: String,
    pub namespace: String,
    pub kind: String,
    pub reason: String,
    pub object: String,
    pub message: String,
}

fn str_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

fn logical_cluster(obj: &Value, default: &str) -> String {
    obj["metadata"]["annotations"][sluice_api::LOGICAL_CLUSTER_ANNOTATION]
        .as_str()
        .unwrap_or(default)
        .to_string()
}

/// A `Cluster` object's view (`left` is filled in from the namespaces).
pub fn cluster(obj: &Value) -> ClusterView {
    let spec = &obj["spec"];
    let ready = condition(obj, "Ready");
    ClusterView {
        name: str_of(&obj["metadata"]["name"]),
        ready: ready.is_some_and(|c| c["status"] == "True"),
        ready_message: ready.map_or_else(|| "no heartbeat yet".into(), |c| str_of(&c["message"])),
        cordoned: spec["unschedulable"] == true,
        draining: spec["drain"] == true,
        capacity: spec["capacity"].clone(),
        allocated: obj["status"]["allocated"].clone(),
        placed_namespaces: obj["status"]["placedNamespaces"].as_i64().unwrap_or(0),
        gateways: strings(&spec["gateways"]),
        ingresses: strings(&spec["ingresses"]),
        metrics: strings(&spec["metrics"]),
        left: 0,
    }
}

/// The phase a `Placed` condition (reason) and the move's annotations say.
pub fn phase(reason: &str, draining: bool) -> Phase {
    match reason {
        "" => Phase::Unknown,
        "Placed" | "Unplaced" => Phase::Placed,
        "Moving" => Phase::Moving,
        "Shifting" if draining => Phase::Draining,
        "Shifting" => Phase::Shifting,
        "Draining" => Phase::Draining,
        "DrainQueued" => Phase::Queued,
        "MoveFailed" => Phase::RolledBack,
        _ => Phase::Pending,
    }
}

/// A Namespace object's view; `default_lc` is the logical cluster of a namespace read
/// without the stamp (it always has one when served).
pub fn namespace(obj: &Value, default_lc: &str) -> NamespaceView {
    let meta = &obj["metadata"];
    let labels = meta["labels"].as_object();
    let annotations = meta["annotations"].as_object();
    let mut clusters: Vec<String> = labels
        .into_iter()
        .flatten()
        .filter_map(|(k, _)| k.strip_prefix(STATE_LABEL_PREFIX).map(str::to_string))
        .collect();
    clusters.sort();
    let mut weights = BTreeMap::new();
    let mut draining = Vec::new();
    let mut active: BTreeMap<String, u64> = BTreeMap::new();
    for (k, v) in annotations.into_iter().flatten() {
        if let Some(c) = k.strip_prefix(WEIGHT_ANNOTATION_PREFIX) {
            if let Some(w) = v.as_str().and_then(|s| s.parse().ok()) {
                weights.insert(c.to_string(), w);
            }
        } else if let Some(c) = k.strip_prefix(DRAINING_ANNOTATION_PREFIX) {
            if v == "true" {
                draining.push(c.to_string());
            }
        } else if k.starts_with(IMPORTS_ANNOTATION_PREFIX) {
            let Some(report) = v
                .as_str()
                .and_then(|s| serde_json::from_str::<ImportReport>(s).ok())
            else {
                continue;
            };
            for sources in report.values() {
                for (source, s) in sources {
                    if let Some(n) = s.active {
                        *active.entry(source.clone()).or_default() += n;
                    }
                }
            }
        }
    }
    active.retain(|c, _| draining.contains(c));
    let placed = condition(obj, "Placed");
    let reason = placed.map(|c| str_of(&c["reason"])).unwrap_or_default();
    NamespaceView {
        logical_cluster: logical_cluster(obj, default_lc),
        name: str_of(&meta["name"]),
        clusters,
        pinned: labels
            .and_then(|l| l.get(LABEL_CLUSTER))
            .and_then(|v| v.as_str())
            .map(str::to_string),
        phase: Some(phase(&reason, !draining.is_empty())),
        reason,
        message: placed.map(|c| str_of(&c["message"])).unwrap_or_default(),
        weights,
        draining,
        active,
        drained: condition(obj, "Drained")
            .map(|c| str_of(&c["message"]))
            .unwrap_or_default(),
        downstream: annotations
            .and_then(|a| a.get(sluice_api::sync::ANNOTATION_DOWNSTREAM_NAMESPACE))
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string(),
    }
}

/// A Placement object's view.
pub fn placement(obj: &Value, default_lc: &str) -> PlacementView {
    let ready = condition(obj, "Ready");
    PlacementView {
        logical_cluster: logical_cluster(obj, default_lc),
        name: str_of(&obj["metadata"]["name"]),
        selected: strings(&obj["status"]["selectedClusters"]),
        ready: ready.is_some_and(|c| c["status"] == "True"),
        message: ready.map(|c| str_of(&c["message"])).unwrap_or_default(),
    }
}

/// An Event object's view.
pub fn event(obj: &Value, default_lc: &str) -> EventView {
    let time = ["lastTimestamp", "eventTime", "firstTimestamp"]
        .iter()
        .find_map(|f| obj[*f].as_str())
        .or_else(|| obj["metadata"]["creationTimestamp"].as_str())
        .unwrap_or_default();
    let involved = &obj["involvedObject"];
    EventView {
        time: time.to_string(),
        logical_cluster: logical_cluster(obj, default_lc),
        namespace: str_of(&obj["metadata"]["namespace"]),
        kind: str_of(&obj["type"]),
        reason: str_of(&obj["reason"]),
        object: format!(
            "{}/{}",
            str_of(&involved["kind"]),
            str_of(&involved["name"])
        ),
        message: str_of(&obj["message"]),
    }
}

/// The newest [`EVENTS_SHOWN`] events, newest first (RFC 3339 times sort as text).
pub fn newest(mut events: Vec<EventView>) -> Vec<EventView> {
    events.sort_by(|a, b| b.time.cmp(&a.time));
    events.truncate(EVENTS_SHOWN);
    events
}

/// Fill each draining cluster's `left`: the namespaces still running there.
pub fn count_left(clusters: &mut [ClusterView], namespaces: &[NamespaceView]) {
    for c in clusters.iter_mut() {
        c.left = if c.draining {
            namespaces
                .iter()
                .filter(|n| n.clusters.contains(&c.name))
                .count()
        } else {
            0
        };
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_namespace_mid_move_shows_weights_draining_and_live_counts() {
        let ns = json!({
            "metadata": {
                "name": "shop",
                "labels": {"state.sluice.dev/east": "Sync", "state.sluice.dev/west": "Sync",
                           "sluice.dev/cluster": "west"},
                "annotations": {
                    "sluice.dev/logical-cluster": "root:a",
                    "sluice.dev/downstream-namespace": "shop-x",
                    "weight.sluice.dev/east": "0",
                    "draining.sluice.dev/east": "true",
                    "imports.sluice.dev/east": "{\"web\":{\"east\":{\"ready\":2,\"weight\":0,\"draining\":true,\"active\":3},\"west\":{\"ready\":2}}}",
                    "imports.sluice.dev/west": "{\"web\":{\"east\":{\"ready\":2,\"draining\":true,\"active\":1}}}",
                    "imports.sluice.dev/bad": "not json",
                }
            },
            "status": {"conditions": [{"type": "Placed", "status": "False", "reason": "Shifting",
                                        "message": "east: weight 0, draining"}]}
        });
        let v = namespace(&ns, "root");
        assert_eq!(v.key(), "root:a/shop");
        assert_eq!(v.clusters, ["east", "west"]);
        assert_eq!(v.pinned.as_deref(), Some("west"));
        assert_eq!(v.phase, Some(Phase::Draining));
        assert_eq!(v.weights["east"], 0);
        assert_eq!(v.active["east"], 4);
        assert_eq!(v.downstream, "shop-x");
        assert_eq!(namespace(&json!({}), "root").phase, Some(Phase::Unknown));
    }

    #[test]
    fn phases_follow_the_placed_reasons() {
        assert_eq!(phase("Moving", false), Phase::Moving);
        assert_eq!(phase("Shifting", false), Phase::Shifting);
        assert_eq!(phase("Shifting", true), Phase::Draining);
        assert_eq!(phase("MoveFailed", false), Phase::RolledBack);
        assert_eq!(phase("InsufficientCapacity", false), Phase::Pending);
        assert!(Phase::Shifting.moving() && !Phase::Placed.moving());
    }

    #[test]
    fn a_draining_cluster_counts_what_is_left() {
        let mut clusters = vec![cluster(&json!({
            "metadata": {"name": "east"},
            "spec": {"drain": true, "unschedulable": true, "gateways": ["127.20.0.1:15443"],
                     "metrics": ["http://127.20.0.1:15000/metrics"]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "placedNamespaces": 2}
        }))];
        assert!(clusters[0].ready && clusters[0].cordoned && clusters[0].draining);
        let on = |c: &str| NamespaceView {
            clusters: vec![c.to_string()],
            ..Default::default()
        };
        count_left(&mut clusters, &[on("east"), on("west"), on("east")]);
        assert_eq!(clusters[0].left, 2);
    }

    #[test]
    fn events_newest_first_and_bounded() {
        let events = (0..100)
            .map(|i| {
                event(
                    &json!({"lastTimestamp": format!("2026-11-30T10:{:02}:00Z", i % 60),
                            "reason": "Moved", "involvedObject": {"kind": "Namespace", "name": "shop"}}),
                    "root",
                )
            })
            .collect();
        let shown = newest(events);
        assert_eq!(shown.len(), EVENTS_SHOWN);
        assert_eq!(shown[0].time, "2026-11-30T10:59:00Z");
        assert_eq!(shown[0].object, "Namespace/shop");
    }
}
