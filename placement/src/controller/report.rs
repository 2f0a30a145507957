//! What placement says about what it decided: each namespace's `Placed` and `Drained`
//! conditions with an Event per change, each Placement's selected clusters, each Cluster's
//! readiness, namespaces and allocation. Each writes only what differs.

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sluice_api::ClusterName;
use sluice_kube::resources::Resources;

use super::error::{ReconcileError, Write};
use super::views::{NamespaceView, dynamic};
use crate::schedule::{self, ClusterView, Phase, PolicyView};
use crate::shift;

/// The namespace condition placement owns.
pub const CONDITION_PLACED: &str = "Placed";
/// Namespace condition: how the traffic to the clusters a namespace last left ended.
pub const CONDITION_DRAINED: &str = "Drained";
/// Namespace annotation recording that condition (written with the placement itself, so it
/// survives a status write from a stale snapshot).
pub(crate) const DRAINED_ANNOTATION: &str = "drained.sluice.dev/last";
/// The field manager of placement's writes.
pub(crate) const MANAGER: &str = sluice_api::sync::PLACEMENT_MANAGER;

/// The `Drained` condition for clusters that just left: how their traffic ended (status
/// True when nothing was cut), as a condition value and the Event's type.
pub(crate) fn drained_condition(drained: &[shift::Drained]) -> Option<(Value, &'static str)> {
    if drained.is_empty() {
        return None;
    }
    let clean = drained.iter().all(|d| d.cut == 0 && d.unknown.is_empty());
    let message = drained
        .iter()
        .map(|d| {
            let mut m = match d.waited {
                None => format!(
                    "{} left with no live connection or request to it in any cluster",
                    d.cluster
                ),
                Some(w) => format!(
                    "{} left after {} s with {} live connections or requests to it cut",
                    d.cluster,
                    w.as_secs(),
                    d.cut
                ),
            };
            if !d.unknown.is_empty() {
                m.push_str(&format!(" (unknown in {}: not reported)", join(&d.unknown)));
            }
            m
        })
        .collect::<Vec<_>>()
        .join("; ");
    let (status, reason, kind) = if clean {
        ("True", "Drained", "Normal")
    } else {
        ("False", "ConnectionsCut", "Warning")
    };
    Some((
        json!({
            "type": CONDITION_DRAINED,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": sluice_kube::time::now_rfc3339(),
        }),
        kind,
    ))
}

/// The `Placed` condition's status, reason and message for `phase` of a namespace now on
/// `on`.
fn placed_condition(phase: &Phase, on: &[ClusterName]) -> (&'static str, &'static str, String) {
    match phase {
        Phase::Placed => ("True", "Placed", format!("running on {}", join(on))),
        Phase::Unplaced => (
            "False",
            "Unplaced",
            "no placement selects this namespace".to_string(),
        ),
        Phase::Moving { from, to, waiting } => (
            "False",
            "Moving",
            format!(
                "moving from {} to {}: waiting until {}",
                join(from),
                join(to),
                waiting
                    .iter()
                    .map(|(c, w)| match w {
                        schedule::NotYet::Workloads =>
                            format!("the workloads are available on {c}"),
                        schedule::NotYet::Endpoints(unseen) => format!(
                            "the endpoints on {c} are Ready in the imports of {}",
                            join(unseen)
                        ),
                        schedule::NotYet::Copying { from, claims } => format!(
                            "the data of {} is copied from {from} to {c}",
                            claims
                                .iter()
                                .map(|(n, how)| format!("claim {n} ({how})"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    })
                    .collect::<Vec<_>>()
                    .join(", and ")
            ),
        ),
        Phase::Shifting(cs) => (
            "False",
            "Shifting",
            format!(
                "traffic shifts off {}",
                cs.iter()
                    .map(|(c, w)| if *w == 0 {
                        format!("{c} (weight 0, draining)")
                    } else {
                        format!("{c} (weight {w})")
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        Phase::RolledBack(message) => ("False", "MoveFailed", message.clone()),
        Phase::HeldBy(cs) => (
            "False",
            "Draining",
            format!(
                "waiting for the soft finalizers of {} to be released",
                join(cs)
            ),
        ),
        Phase::Pending(p) => ("False", p.reason(), p.message()),
    }
}

/// The namespace conditions (and an Event for each change) for `phase`, and for the
/// clusters that just left, how their traffic ended.
pub(crate) async fn report_phase(
    client: &kube::Client,
    ns: &NamespaceView,
    name: &str,
    phase: &Phase,
    drained: &[shift::Drained],
) -> Result<(), ReconcileError> {
    // How the last drain ended: fresh from this reconcile (with its Event), else as
    // recorded on the namespace, so that a status write from a stale snapshot is put right.
    let fresh = drained_condition(drained);
    let want_drained: Option<Value> = fresh.as_ref().map(|(c, _)| c.clone()).or_else(|| {
        ns.annotations
            .get(DRAINED_ANNOTATION)
            .and_then(|v| serde_json::from_str(v).ok())
    });
    let have_drained = ns.condition(CONDITION_DRAINED);
    let drained = want_drained.filter(|w| {
        have_drained.is_none_or(|h| {
            ["status", "reason", "message"]
                .iter()
                .any(|k| h[*k] != w[*k])
        })
    });
    let on = ns.placed();
    let (status, reason, message) = placed_condition(phase, &on);
    let have = ns.condition(CONDITION_PLACED);
    // A namespace that was never placed has nothing to say.
    let silent = have.is_none() && matches!(phase, Phase::Unplaced);
    let same = have.is_some_and(|c| {
        c["status"] == status && c["reason"] == reason && c["message"] == message.as_str()
    });
    let placed_changed = !silent && !same;
    if !placed_changed && drained.is_none() {
        return Ok(());
    }
    let mut conditions: Vec<Value> = ns
        .conditions
        .iter()
        .filter(|c| drained.is_none() || c["type"] != CONDITION_DRAINED)
        .filter(|c| c["type"] != CONDITION_PLACED)
        .cloned()
        .collect();
    if let Some(c) = have.filter(|_| !placed_changed) {
        conditions.push(c.clone());
    } else if placed_changed {
        conditions.push(json!({
            "type": CONDITION_PLACED,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": sluice_kube::time::now_rfc3339(),
        }));
    }
    if let Some(c) = &drained {
        conditions.push(c.clone());
    }
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &dynamic("", "v1", "Namespace", "namespaces"),
    );
    let patch = json!({"status": {"conditions": conditions}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| ReconcileError::write(Write::Conditions, name, e))?;
    if let Some((c, kind)) = &fresh {
        let (reason, message) = (
            c["reason"].as_str().unwrap_or_default(),
            c["message"].as_str().unwrap_or_default(),
        );
        event(client, name, reason, message, kind).await;
    }
    if !placed_changed {
        return Ok(());
    }
    let kind = if status == "True" || reason == "Moving" {
        "Normal"
    } else {
        "Warning"
    };
    event(client, name, reason, &message, kind).await;
    Ok(())
}

/// Whether two lists name the same clusters, in any order.
pub(crate) fn same_clusters(a: &[ClusterName], b: &[ClusterName]) -> bool {
    let mut a = a.to_vec();
    let mut b = b.to_vec();
    a.sort();
    b.sort();
    a == b
}

pub(crate) fn join(cs: &[ClusterName]) -> String {
    if cs.is_empty() {
        return "nothing".into();
    }
    cs.iter()
        .map(ClusterName::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Record an Event about namespace `name` (best effort: an Event that cannot be written is
/// logged, never retried).
async fn event(client: &kube::Client, name: &str, reason: &str, message: &str, kind: &str) {
    let now = sluice_kube::time::now_rfc3339();
    let ev = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": format!("{name}.")},
        "involvedObject": {"apiVersion": "v1", "kind": "Namespace", "name": name},
        "reason": reason,
        "message": message,
        "type": kind,
        "source": {"component": MANAGER},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    });
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), name, &dynamic("", "v1", "Event", "events"));
    let Ok(obj) = serde_json::from_value::<DynamicObject>(ev) else {
        return;
    };
    if let Err(e) = api.create(&PostParams::default(), &obj).await {
        tracing::debug!(namespace = name, error = %e, "event not recorded");
    }
}

/// The status a Placement should have: the clusters it selects now and whether it can
/// place anything (`None` when it has that already).
pub(crate) fn placement_status(
    have: &Value,
    view: &PolicyView,
    clusters: &[ClusterView],
) -> Option<Value> {
    let (selected, status, reason, message) = match &view.clusters {
        Err(e) => (
            Vec::new(),
            "False",
            "InvalidSelector",
            format!("locationSelector: {e}"),
        ),
        Ok(s) => {
            let sel: Vec<String> = clusters
                .iter()
                .filter(|c| s.matches(&c.labels) && c.ready && !c.unschedulable && !c.draining)
                .map(|c| c.name.to_string())
                .collect();
            match &view.namespaces {
                Err(e) => (
                    sel,
                    "False",
                    "InvalidSelector",
                    format!("namespaceSelector: {e}"),
                ),
                Ok(_) if sel.is_empty() => (
                    sel,
                    "False",
                    "NoClusterMatches",
                    "no ready, schedulable cluster matches the locationSelector".to_string(),
                ),
                Ok(_) => (sel, "True", "Ready", "clusters selected".to_string()),
            }
        }
    };
    let mut want = json!({"selectedClusters": selected, "conditions": [{
        "type": "Ready", "status": status, "reason": reason, "message": message,
    }]});
    let same = have["selectedClusters"] == want["selectedClusters"]
        && have["conditions"][0]["status"] == status
        && have["conditions"][0]["reason"] == reason
        && have["conditions"][0]["message"] == message.as_str();
    if same {
        return None;
    }
    want["conditions"][0]["lastTransitionTime"] = json!(sluice_kube::time::now_rfc3339());
    Some(want)
}

/// Write Placement `name`'s status `want` in the logical cluster `client` points at.
pub(crate) async fn write_placement_status(
    client: kube::Client,
    name: &str,
    want: Value,
) -> Result<(), ReconcileError> {
    let api: Api<DynamicObject> = Api::all_with(
        client,
        &dynamic("sluice.dev", "v1alpha1", "Placement", "placements"),
    );
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": want})),
    )
    .await
    .map(|_| ())
    .map_err(|e| ReconcileError::write(Write::PlacementStatus, name, e))
}

/// The status patch for Cluster `o` (viewed as `v`): its readiness (its syncer's
/// heartbeat), the namespaces on it (`left`, named while it drains) and what they request
/// (`used`); `None` when it says that already. Only the conditions placement owns are
/// written; the MCS controller's stay, pinned to the version read.
pub(crate) fn cluster_status(
    o: &DynamicObject,
    v: &ClusterView,
    left: &[String],
    used: Resources,
) -> Option<Value> {
    let (status, reason, message) = if v.ready {
        (
            "True",
            "SyncerHeartbeat",
            "the syncer's heartbeat is current",
        )
    } else {
        (
            "False",
            "SyncerHeartbeatMissing",
            "no current heartbeat from the cluster's syncer",
        )
    };
    let mut want =
        vec![json!({"type": "Ready", "status": status, "reason": reason, "message": message})];
    if v.draining {
        let (status, reason, message) = if left.is_empty() {
            ("True", "Drained", "no namespace runs here".to_string())
        } else {
            (
                "False",
                "Draining",
                format!("{} namespace(s) left: {}", left.len(), left.join(", ")),
            )
        };
        want.push(
            json!({"type": "Drained", "status": status, "reason": reason, "message": message}),
        );
    }
    let used = json!({
        "pods": used.pods.round() as i64,
        "cpu": format!("{}m", (used.cpu * 1000.0).round() as i64),
        "memory": format!("{}", used.memory.round() as i64),
    });
    let have = &o.data["status"];
    const OURS: [&str; 2] = ["Ready", "Drained"];
    let theirs: Vec<Value> = have["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| !OURS.iter().any(|t| c["type"] == *t))
        .cloned()
        .collect();
    let mine: Vec<&Value> = have["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| OURS.iter().any(|t| c["type"] == *t))
        .collect();
    let same = have["placedNamespaces"].as_i64() == Some(left.len() as i64)
        && have["allocated"] == used
        && mine.len() == want.len()
        && mine.iter().zip(&want).all(|(h, w)| {
            ["type", "status", "reason", "message"]
                .iter()
                .all(|f| h[f] == w[f])
        });
    if same {
        return None;
    }
    let now = sluice_kube::time::now_rfc3339();
    for c in &mut want {
        c["lastTransitionTime"] = json!(now);
    }
    let want: Vec<Value> = theirs.into_iter().chain(want).collect();
    // The list is written whole, with the MCS controller's conditions as last read:
    // pinned to that version, so a condition written since is never dropped (a stale
    // write gets 409 and is redone from the new version).
    Some(json!({
        "metadata": {"resourceVersion": o.metadata.resource_version},
        "status": {
            "placedNamespaces": left.len(),
            "allocated": used,
            "conditions": want,
        },
    }))
}

/// Write Cluster `name`'s status patch.
pub(crate) async fn write_cluster_status(
    root: &kube::Client,
    name: &ClusterName,
    patch: Value,
) -> Result<(), ReconcileError> {
    let api: Api<DynamicObject> = Api::all_with(
        root.clone(),
        &dynamic("sluice.dev", "v1alpha1", "Cluster", "clusters"),
    );
    api.patch_status(
        name.as_str(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map(|_| ())
    .map_err(|e| ReconcileError::write(Write::ClusterStatus, name.as_str(), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(name: &str, ready: bool, draining: bool) -> ClusterView {
        ClusterView {
            name: ClusterName::new(name),
            labels: [("zone".to_string(), "a".to_string())].into(),
            ready,
            unschedulable: false,
            draining,
            load: 0,
            capacity: Default::default(),
            used: Default::default(),
            allowed: true,
            quotas: Vec::new(),
        }
    }

    #[test]
    fn a_clusters_status_keeps_the_mcs_conditions_and_names_what_is_left_while_draining() {
        let o: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "Cluster",
            "metadata": {"name": "east", "resourceVersion": "9"},
            "status": {"conditions": [{"type": "MCSMember", "status": "True"}]}}))
        .unwrap();
        let left = vec!["root:t/a".to_string()];
        let p = cluster_status(&o, &view("east", true, true), &left, Resources::default()).unwrap();
        assert_eq!(p["metadata"]["resourceVersion"], "9");
        let types: Vec<&str> = p["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["MCSMember", "Ready", "Drained"]);
        assert_eq!(
            p["status"]["conditions"][2]["message"],
            "1 namespace(s) left: root:t/a"
        );
        // Written as it wants: nothing more to say.
        let mut o = o;
        o.data["status"] = p["status"].clone();
        assert_eq!(
            cluster_status(&o, &view("east", true, true), &left, Resources::default()),
            None
        );
    }

    #[test]
    fn a_placement_selects_the_ready_schedulable_clusters_its_selector_matches() {
        let policy = PolicyView {
            name: "p".into(),
            namespaces: Ok(Default::default()),
            clusters: crate::controller::views::parse_selector(
                &json!({"matchLabels": {"zone": "a"}}),
            ),
            mode: crate::schedule::Mode::Single,
            traffic_shift: Default::default(),
        };
        let clusters = [view("east", true, false), view("west", false, false)];
        let want = placement_status(&Value::Null, &policy, &clusters).unwrap();
        assert_eq!(want["selectedClusters"], json!(["east"]));
        assert_eq!(want["conditions"][0]["reason"], "Ready");
        assert_eq!(placement_status(&want, &policy, &clusters), None);
    }
}
