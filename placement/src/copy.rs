//! Which claims' data follows a move, and where each copy stands (docs/stateful.md). A
//! namespace moving from one cluster to another copies every claim bound on the old one:
//! a bulk pass while the app still runs there, then the app's workloads that mount the
//! claim are scaled to 0 on the old cluster (it stops gracefully and flushes), then a final
//! pass of what changed, checked whole. Until that is done the new cluster runs none of
//! those workloads, so it never starts on partial data; the move itself (traffic, removal
//! of the old cluster) waits for the copies like for anything else not yet available.
//!
//! Each step is read back from what the clusters report (the target's claim condition, the
//! old cluster's Pods), so a restarted placement controller picks the copy up where it was.

use serde_json::Value;
use sluice_api::ClusterName;
use sluice_api::claim_copy::{
    Asked, BULK_COPIED, CANNOT_COPY, COPIED, COPIED_CONDITION, DELETED_WITH_CLAIM, Holding,
    MOVER_LABEL, PASS_ANNOTATION, Pass, SHARED_CONDITION, SOURCE_ANNOTATION, STORAGE_ANNOTATION,
    Storage, TARGET_ANNOTATION, claims_of,
};

use std::collections::BTreeMap;
use std::ops::Range;

use sluice_api::statefulset::{has_templates, ordinal_of, ordinals};

use crate::status::report;

/// Where one claim's copy stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    /// The bulk pass runs while the app keeps running on the source.
    Bulk,
    /// Bulk copied, while another claim of the move cannot be copied: the whole move
    /// waits, so nothing of the app stops on the source (half an app on each cluster is
    /// not what was asked for).
    Waiting,
    /// Bulk copied: a StatefulSet's ordinal waits for the ordinals before it to run on the
    /// target before it stops on the source, so a quorum keeps all but one member.
    Queued,
    /// The bulk pass is done; the app's workloads stop on the source.
    Stopping,
    /// Nothing mounts the claim on the source any more: the final pass runs.
    Final,
    /// The target's claim holds the source's data, checked.
    Done,
}

impl Stage {
    /// The pass the movers run in this stage.
    pub fn pass(self) -> Pass {
        match self {
            Stage::Bulk | Stage::Waiting | Stage::Queued | Stage::Stopping => Pass::Bulk,
            Stage::Final | Stage::Done => Pass::Final,
        }
    }

    /// How it reads in the namespace's condition.
    pub fn describe(self) -> &'static str {
        match self {
            Stage::Bulk => "bulk copy while the app runs",
            Stage::Waiting => "bulk copied, waiting for the claims that cannot be copied",
            Stage::Queued => "bulk copied, waiting for the ordinals before it to run on the target",
            Stage::Stopping => "stopping the app to copy what changed",
            Stage::Final => "final copy while the app is stopped",
            Stage::Done => "copied",
        }
    }
}

/// Why a claim's data cannot follow a move. The move waits (the target runs none of the
/// workloads that mount the claim) and nothing of the source is touched: the app keeps
/// running there, on its data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `volumeMode: Block`: the mover copies file systems.
    Block,
    /// A `dataSource` or `dataSourceRef` (a clone, a snapshot, a populator): the target
    /// would fill the claim from its own copy of that source, not from the app's data.
    DataSource(String),
    /// The target cannot run its mover on the claim, in its own words (the class missing
    /// there, a claim larger than it has room for, the mover's image).
    Target(String),
    /// The claim is marked shared (`sluice.dev/storage: shared`) and the source has not
    /// said yet whether the volume it is bound to is network storage (nothing to copy) or
    /// its own (copied like any claim): nothing is done until it says.
    SharedUnconfirmed(ClusterName),
    /// The claim is marked shared and the source's volume is deleted with its claim: the
    /// app leaving would delete what the target mounts. In the source's words.
    SharedDeletedWithClaim(String),
}

impl Refusal {
    /// Whether the claim spec itself refuses the copy: then no mover is asked for at all.
    fn of_spec(&self) -> bool {
        !matches!(self, Refusal::Target(_))
    }

    fn describe(&self) -> String {
        match self {
            Refusal::Block => {
                "cannot be copied: it is a block-mode claim (volumeMode: Block), and the mover copies file systems".into()
            }
            Refusal::DataSource(kind) => format!(
                "cannot be copied: it is filled from a dataSource ({kind}) the target would fill it from instead"
            ),
            Refusal::Target(why) => format!("cannot be copied: {why}"),
            Refusal::SharedDeletedWithClaim(why) => {
                format!("is marked shared and cannot leave its cluster: {why}")
            }
            Refusal::SharedUnconfirmed(source) => format!(
                "is marked shared: waiting for {source} to say whether the storage it is bound to is shared"
            ),
        }
    }
}

/// One claim whose data follows the move.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimCopy {
    pub claim: String,
    pub stage: Stage,
    /// Why it cannot be copied, if it cannot: the copy stays in its bulk stage.
    pub refused: Option<Refusal>,
}

/// The copies of a namespace moving from `from` to `to`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub from: ClusterName,
    pub to: ClusterName,
    pub claims: Vec<ClaimCopy>,
    /// Claims whose copy to `from` was given up when the move was turned back before it was
    /// done: `from` runs none of the workloads that mount them (it would start them on part
    /// of the data) until it lets the namespace go, and their movers go.
    pub given_up: Vec<String>,
}

/// The copies of a namespace on `current` whose target is `wanted` (one cluster each way:
/// a move), from its `objects`; `mirrored(cluster)`: the labels of the Pods `cluster`
/// mirrors up (which the workloads' selectors tell apart). `None` when nothing is copied.
pub fn plan(
    current: &[ClusterName],
    wanted: &[ClusterName],
    objects: &[(&str, &Value)],
    mirrored: impl Fn(&ClusterName) -> Vec<Labels>,
) -> Option<Plan> {
    let [to] = wanted else {
        return None;
    };
    let leaving: Vec<&ClusterName> = current.iter().filter(|c| *c != to).collect();
    let [from] = leaving[..] else {
        return None;
    };
    // StatefulSets whose ordinals have claims of their own: those move one at a time.
    let sets: Vec<&Value> = objects
        .iter()
        .filter(|(kind, v)| *kind == "StatefulSet" && has_templates(v))
        .map(|(_, v)| *v)
        .collect();
    let from_pods = mirrored(from);
    let mut claims = Vec::new();
    let mut given_up = Vec::new();
    for &(kind, v) in objects {
        if kind != "PersistentVolumeClaim" || !v["metadata"]["deletionTimestamp"].is_null() {
            continue;
        }
        let Some(name) = v["metadata"]["name"].as_str() else {
            continue;
        };
        let done = recorded(v, to);
        let asked = asked(v);
        // A move turned back before its copy was done: the data is still whole where the
        // app ran (it never started on the copy). Told by the request while it is there,
        // and by the copy's own report once the request is gone (the first pass after the
        // turn removes it).
        let copy_unfinished = recorded(v, from) != Some(Pass::Final);
        let was_copied_to_from = asked
            .as_ref()
            .is_some_and(|a| &a.source == to && &a.target == from)
            || reported(v, from, COPIED_CONDITION).is_some();
        if was_copied_to_from && copy_unfinished {
            given_up.push(name.to_string());
            continue;
        }
        let ours = asked
            .as_ref()
            .is_some_and(|a| &a.source == from && &a.target == to);
        let bound_on = |c: &ClusterName| report(v, c).is_some_and(|r| r.status["phase"] == "Bound");
        if !ours && !bound_on(from) {
            // Bound where the namespace goes and not where it leaves (a move turned back
            // before the claim's copy was asked for): the cluster it leaves never had the
            // data, and starts nothing on it.
            if bound_on(to) {
                given_up.push(name.to_string());
            }
            continue;
        }
        // A claim on storage every cluster reaches mounts the same data wherever the app
        // runs: nothing to copy. One on the source's own storage moves like any claim.
        let shared = storage(v) == Storage::Shared;
        let says = shared.then(|| reported(v, from, SHARED_CONDITION));
        let sharing = match &says {
            Some(Some(c)) if c["status"] == "True" => continue,
            Some(Some(c)) if c["reason"] == DELETED_WITH_CLAIM => {
                Some(Refusal::SharedDeletedWithClaim(
                    c["message"]
                        .as_str()
                        .unwrap_or("no reason given")
                        .to_string(),
                ))
            }
            Some(None) => Some(Refusal::SharedUnconfirmed(from.clone())),
            _ => None,
        };
        let refused = sharing
            .or_else(|| refused_by_spec(v))
            .or_else(|| refused_by(v, to));
        let ordinal = sets
            .iter()
            .find_map(|set| Some((*set, ordinal_of(set, name)?)));
        let stage = match (done, ordinal) {
            (Some(Pass::Final), _) => Stage::Done,
            _ if refused.is_some() => Stage::Bulk,
            // Its turn is decided below, once every claim's stage is known.
            (Some(Pass::Bulk), Some((set, i))) if !ordinal_stopped(set, i, from, &from_pods) => {
                Stage::Queued
            }
            (Some(Pass::Bulk), None) if !stopped(objects, from, name, &from_pods) => {
                Stage::Stopping
            }
            (Some(Pass::Bulk), _) => Stage::Final,
            (None, _) => Stage::Bulk,
        };
        claims.push(ClaimCopy {
            claim: name.to_string(),
            stage,
            refused,
        });
    }
    let mut plan = Plan {
        from: from.clone(),
        to: to.clone(),
        claims,
        given_up,
    };
    // An ordinal stops on the source once every ordinal before it runs on the target, on
    // its copy, and is Ready there.
    let turns: Vec<String> = plan
        .claims
        .iter()
        .filter(|c| c.stage == Stage::Queued)
        .filter(|c| {
            sets.iter()
                .any(|set| ordinal_of(set, &c.claim).is_some_and(|i| plan.turn_of(set, i)))
        })
        .map(|c| c.claim.clone())
        .collect();
    for c in plan.claims.iter_mut().filter(|c| turns.contains(&c.claim)) {
        c.stage = Stage::Stopping;
    }
    // A claim that cannot be copied holds the whole move: nothing more stops on the source
    // (a copy already past its stop is finished: that app is stopped there already).
    if plan.claims.iter().any(|c| c.refused.is_some()) {
        for c in plan
            .claims
            .iter_mut()
            .filter(|c| matches!(c.stage, Stage::Queued | Stage::Stopping))
        {
            c.stage = Stage::Waiting;
        }
    }
    (!plan.claims.is_empty() || !plan.given_up.is_empty()).then_some(plan)
}

/// Whether set `set` runs the `n` ordinals it was given on `cluster`, all Ready, as the
/// cluster reports.
fn ready_on(set: &Value, cluster: &ClusterName, n: usize) -> bool {
    if n == 0 {
        return true;
    }
    let Some(r) = report(set, cluster) else {
        return false;
    };
    let n = i64::try_from(n).unwrap_or(i64::MAX);
    r.replicas == Some(n) && r.status["readyReplicas"].as_i64().unwrap_or(0) >= n
}

/// Whether ordinal `i` of set `set` has stopped on `cluster`: the cluster runs the set from
/// a later ordinal now, and none of the Pods it mirrors is that ordinal's.
fn ordinal_stopped(set: &Value, i: usize, cluster: &ClusterName, mirrored: &[Labels]) -> bool {
    // The cluster was given a range of the set's ordinals that leaves `i` out.
    let moved_on = report(set, cluster).is_some_and(|r| {
        let (Some(start), Some(n)) = (r.start, r.replicas) else {
            return false;
        };
        let i = i64::try_from(i).unwrap_or(i64::MAX);
        i < start || i >= start.saturating_add(n)
    });
    let pod = format!(
        "{}-{i}",
        set["metadata"]["name"].as_str().unwrap_or_default()
    );
    moved_on
        && !mirrored
            .iter()
            .any(|l| l.get(POD_NAME_LABEL).map(String::as_str) == Some(pod.as_str()))
}

/// The label kube's StatefulSet controller gives each Pod: its own name.
const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";

impl Plan {
    /// The claims not copied yet, each with where it stands, as the namespace's condition
    /// says it.
    pub fn waiting(&self) -> Vec<(String, String)> {
        self.claims
            .iter()
            .filter(|c| c.stage != Stage::Done)
            .map(|c| {
                let how = match &c.refused {
                    Some(r) => r.describe(),
                    None => c.stage.describe().to_string(),
                };
                (c.claim.clone(), how)
            })
            .collect()
    }

    /// The namespace annotation that holds the target's workloads (written with its state
    /// labels, in one write): `None` once nothing is waited for.
    pub fn holding(&self) -> Option<Holding> {
        let claims: Vec<String> = self.waiting().into_iter().map(|(c, _)| c).collect();
        (!claims.is_empty()).then(|| Holding {
            cluster: self.to.clone(),
            claims,
        })
    }

    /// The annotations claim `name` should carry (`None`: not copied, or copied already —
    /// the movers go at once, and the source's exported mover no longer holds the drain of
    /// the cluster the app leaves).
    pub fn asked(&self, name: &str) -> Option<Asked> {
        let c = self.claims.iter().find(|c| {
            c.claim == name
                && c.stage != Stage::Done
                && !c.refused.as_ref().is_some_and(Refusal::of_spec)
        })?;
        Some(Asked {
            source: self.from.clone(),
            target: self.to.clone(),
            pass: c.stage.pass(),
        })
    }

    /// The replicas workload `v` is held to on each cluster: 0 on the target while a claim
    /// it mounts is not copied yet, 0 on the source once a claim it mounts is being
    /// stopped for (and from then on: the data has left).
    pub fn held(&self, kind: &str, v: &Value) -> Vec<(ClusterName, i64)> {
        if let Some(split) = self.split(kind, v) {
            return vec![
                (self.from.clone(), split.on_source()),
                (self.to.clone(), split.on_target()),
            ];
        }
        let mounts = claims_of(kind, v);
        let stages: Vec<Stage> = self
            .claims
            .iter()
            .filter(|c| mounts.contains(&c.claim))
            .map(|c| c.stage)
            .collect();
        let mut out = Vec::new();
        let on_given_up = self
            .given_up
            .iter()
            .any(|c| mounts.contains(c) || (kind == "StatefulSet" && ordinal_of(v, c).is_some()));
        if on_given_up || stages.iter().any(|s| *s >= Stage::Stopping) {
            out.push((self.from.clone(), 0));
        }
        if stages.iter().any(|s| *s != Stage::Done) {
            out.push((self.to.clone(), 0));
        }
        out
    }
}

impl Plan {
    /// The ordinals of StatefulSet `set` whose claims this plan copies, each with the least
    /// stage of its claims, and the set's ordinals; `None` when it copies none of them.
    fn moving(&self, set: &Value) -> Option<(Range<usize>, BTreeMap<usize, Stage>)> {
        if !has_templates(set) {
            return None;
        }
        let range = ordinals(set);
        let mut moving: BTreeMap<usize, Stage> = BTreeMap::new();
        for c in &self.claims {
            if let Some(i) = ordinal_of(set, &c.claim).filter(|i| range.contains(i)) {
                let least = moving.entry(i).or_insert(c.stage);
                *least = (*least).min(c.stage);
            }
        }
        (!moving.is_empty()).then_some((range, moving))
    }

    /// How the ordinals of StatefulSet `v` (of `kind`) are split between the clusters while
    /// their claims move: `None` for anything else.
    fn split(&self, kind: &str, v: &Value) -> Option<OrdinalSplit> {
        if kind != "StatefulSet" {
            return None;
        }
        let (range, moving) = self.moving(v)?;
        Some(OrdinalSplit::of(&range, &moving))
    }

    /// The first ordinal StatefulSet `v` runs on each cluster while its claims move.
    pub fn starts(&self, kind: &str, v: &Value) -> Vec<(ClusterName, i64)> {
        let Some(split) = self.split(kind, v) else {
            return Vec::new();
        };
        let at = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        vec![
            (self.from.clone(), at(split.source.start)),
            (self.to.clone(), at(split.target.start)),
        ]
    }

    /// Whether ordinal `i` of set `set` may stop on the source: every ordinal before it
    /// runs on the target (copied, or with nothing to copy), and the target reports the
    /// ordinals it runs Ready.
    fn turn_of(&self, set: &Value, i: usize) -> bool {
        let Some((range, moving)) = self.moving(set) else {
            return false;
        };
        let before_done = moving.range(range.start..i).all(|(_, s)| *s == Stage::Done);
        let target = OrdinalSplit::of(&range, &moving).target;
        before_done && ready_on(set, &self.to, target.len())
    }
}

/// A StatefulSet's ordinals while they move: those the source still runs (their claims
/// not yet being stopped for) and those the target runs (copied, or with nothing to
/// copy), each a contiguous range (`spec.ordinals.start` and `replicas`). An ordinal being
/// stopped and copied runs nowhere.
struct OrdinalSplit {
    source: Range<usize>,
    target: Range<usize>,
}

impl OrdinalSplit {
    /// From the set's ordinals and the least stage of each one being copied; bounded by the
    /// claims copied, whatever the set's size.
    fn of(range: &Range<usize>, moving: &BTreeMap<usize, Stage>) -> OrdinalSplit {
        let running = |s: &Stage| *s < Stage::Stopping;
        let source = match moving.iter().find(|(_, s)| running(s)) {
            Some((&first, _)) => {
                let mut end = first.saturating_add(1);
                while moving.get(&end).is_some_and(running) {
                    end = end.saturating_add(1);
                }
                first..end
            }
            None => range.end..range.end,
        };
        let on_target = |i: usize| moving.get(&i).is_none_or(|s| *s == Stage::Done);
        // Ordinals that are not on the target are all in `moving`: this looks at most
        // that many.
        let mut first = range.start;
        while first < range.end && !on_target(first) {
            first = first.saturating_add(1);
        }
        let end = moving
            .range(first..)
            .find(|(_, s)| **s != Stage::Done)
            .map_or(range.end, |(i, _)| *i)
            .max(first);
        OrdinalSplit {
            source,
            target: first..end,
        }
    }

    fn on_source(&self) -> i64 {
        i64::try_from(self.source.len()).unwrap_or(i64::MAX)
    }

    fn on_target(&self) -> i64 {
        i64::try_from(self.target.len()).unwrap_or(i64::MAX)
    }
}

/// The change to a namespace's annotations (`ns_annotations`) that makes it hold what
/// `plan` holds; `None` when it does.
pub fn holding_patch(
    ns_annotations: &std::collections::BTreeMap<String, String>,
    plan: Option<&Plan>,
) -> Option<Value> {
    let want = plan.and_then(Plan::holding);
    let have = Holding::of(Some(ns_annotations));
    if want == have {
        return None;
    }
    Some(match want {
        Some(h) => Value::from(serde_json::to_string(&h).unwrap_or_default()),
        None => Value::Null,
    })
}

/// The annotations a claim carries now.
pub fn asked(v: &Value) -> Option<Asked> {
    let a = &v["metadata"]["annotations"];
    let s = |k: &str| a[k].as_str().map(str::to_string);
    let map = [SOURCE_ANNOTATION, TARGET_ANNOTATION, PASS_ANNOTATION]
        .into_iter()
        .filter_map(|k| Some((k.to_string(), s(k)?)))
        .collect();
    Asked::of(Some(&map))
}

/// The merge patch of annotations that makes claim `v` ask for `want`; `None` when it does.
pub fn asked_patch(v: &Value, want: Option<&Asked>) -> Option<Value> {
    if asked(v).as_ref() == want {
        return None;
    }
    let (source, target, pass) = match want {
        Some(a) => (
            Value::from(a.source.as_str()),
            Value::from(a.target.as_str()),
            Value::from(a.pass.as_str()),
        ),
        None => (Value::Null, Value::Null, Value::Null),
    };
    Some(serde_json::json!({"metadata": {"annotations": {
        SOURCE_ANNOTATION: source, TARGET_ANNOTATION: target, PASS_ANNOTATION: pass,
    }}}))
}

/// Labels of a Pod.
pub type Labels = std::collections::BTreeMap<String, String>;

/// Whether the app has stopped writing to `claim` on `cluster`: every workload of
/// `objects` that mounts it reports from there that it runs no Pod, none terminating, at
/// the 0 replicas it was held to, and none of the Pods the cluster mirrors (movers aside)
/// matches its selector; a bare Pod or a Job that mounts it has run to its end there.
fn stopped(
    objects: &[(&str, &Value)],
    cluster: &ClusterName,
    claim: &str,
    mirrored: &[Labels],
) -> bool {
    objects
        .iter()
        .filter(|(kind, v)| claims_of(kind, v).iter().any(|c| c == claim))
        .all(|(kind, v)| {
            let Some(r) = report(v, cluster) else {
                return *kind != "Pod";
            };
            if *kind == "Pod" {
                return matches!(r.status["phase"].as_str(), Some("Succeeded" | "Failed"));
            }
            if *kind == "Job" {
                let ended = r.status["conditions"].as_array().is_some_and(|cs| {
                    cs.iter().any(|c| {
                        matches!(c["type"].as_str(), Some("Complete" | "Failed"))
                            && c["status"] == "True"
                    })
                });
                return ended && r.status["active"].as_i64().unwrap_or(0) == 0;
            }
            let n = |f: &str| r.status[f].as_i64().unwrap_or(0);
            let selector = v["spec"]["selector"]["matchLabels"].as_object();
            let exact = v["spec"]["selector"]["matchExpressions"].is_null();
            let selects = |l: &Labels| {
                !l.contains_key(MOVER_LABEL)
                    && (!exact
                        || selector.is_some_and(|m| {
                            m.iter()
                                .all(|(k, want)| l.get(k).map(String::as_str) == want.as_str())
                        }))
            };
            r.replicas == Some(0)
                && n("replicas") == 0
                && n("terminatingReplicas") == 0
                && !mirrored.iter().any(selects)
        })
}

/// What claim `v`'s data does on a move, as its annotation says.
fn storage(v: &Value) -> Storage {
    v["metadata"]["annotations"][STORAGE_ANNOTATION]
        .as_str()
        .and_then(Storage::parse)
        .unwrap_or(Storage::Moves)
}

/// The condition of type `kind` that `cluster` reports on claim `v`.
fn reported(v: &Value, cluster: &ClusterName, kind: &str) -> Option<Value> {
    let r = report(v, cluster)?;
    r.status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .cloned()
}

/// What in claim `v`'s spec keeps its data from being copied.
fn refused_by_spec(v: &Value) -> Option<Refusal> {
    let spec = &v["spec"];
    if spec["volumeMode"] == "Block" {
        return Some(Refusal::Block);
    }
    ["dataSourceRef", "dataSource"]
        .iter()
        .map(|f| &spec[*f])
        .find(|s| s.is_object())
        .map(|s| {
            Refusal::DataSource(format!(
                "{} {}",
                s["kind"].as_str().unwrap_or("object"),
                s["name"].as_str().unwrap_or("")
            ))
        })
}

/// What the target `cluster` reports keeps it from copying claim `v`.
fn refused_by(v: &Value, cluster: &ClusterName) -> Option<Refusal> {
    let cond = reported(v, cluster, COPIED_CONDITION).filter(|c| c["reason"] == CANNOT_COPY)?;
    Some(Refusal::Target(
        cond["message"]
            .as_str()
            .unwrap_or("no reason given")
            .to_string(),
    ))
}

/// The pass the copy of claim `v` on `cluster` reports done.
fn recorded(v: &Value, cluster: &ClusterName) -> Option<Pass> {
    let cond = reported(v, cluster, COPIED_CONDITION)?;
    match (cond["status"].as_str(), cond["reason"].as_str()) {
        (Some("True"), Some(COPIED)) => Some(Pass::Final),
        (Some("False"), Some(BULK_COPIED)) => Some(Pass::Bulk),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;
    use sluice_api::sync::{StatusReport, status_annotation};

    fn claim(reports: &[(&str, Value)], annotations: Value) -> Value {
        let mut a = annotations;
        for (c, status) in reports {
            let r = StatusReport {
                observed_generation: 1,
                replicas: None,
                start: None,
                status: status.clone(),
            };
            a[status_annotation(&ClusterName::new(*c))] =
                Value::from(serde_json::to_string(&r).unwrap());
        }
        json!({"metadata": {"name": "notes", "annotations": a}})
    }

    fn copied(reason: &str, status: &str) -> Value {
        json!({"phase": "Bound", "conditions": [
            {"type": COPIED_CONDITION, "status": status, "reason": reason}]})
    }

    #[test]
    fn a_statefulset_moves_one_ordinal_at_a_time_each_after_the_one_before_is_ready() {
        let (a, b) = (ClusterName::new("east"), ClusterName::new("west"));
        let both = [a.clone(), b.clone()];
        let report_on =
            |set: &mut Value, c: &ClusterName, replicas: i64, start: i64, ready: i64| {
                let r = StatusReport {
                    observed_generation: 1,
                    replicas: Some(replicas),
                    start: Some(start),
                    status: json!({"readyReplicas": ready}),
                };
                set["metadata"]["annotations"][status_annotation(c)] =
                    Value::from(serde_json::to_string(&r).unwrap());
            };
        let mut set = json!({"metadata": {"name": "db", "annotations": {}}, "spec": {"replicas": 3,
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {}}]}});
        let bound = json!({"phase": "Bound"});
        let claim_of = |i: usize, west: Option<(&str, &str)>| {
            let mut reports = vec![("east", bound.clone())];
            if let Some((reason, status)) = west {
                reports.push(("west", copied(reason, status)));
            }
            let mut c = claim(&reports, json!({}));
            c["metadata"]["name"] = json!(format!("data-db-{i}"));
            c
        };
        let pods = |names: &[&str]| -> Vec<Labels> {
            names
                .iter()
                .map(|n| [(POD_NAME_LABEL.to_string(), n.to_string())].into())
                .collect()
        };
        let step = |set: &Value, claims: &[Value], east_pods: &[&str]| {
            let mut objects: Vec<(&str, &Value)> = vec![("StatefulSet", set)];
            objects.extend(claims.iter().map(|c| ("PersistentVolumeClaim", c)));
            let east = pods(east_pods);
            plan(&both, std::slice::from_ref(&b), &objects, |c| {
                if c == &a { east.clone() } else { vec![] }
            })
            .unwrap()
        };
        let stages = |p: &Plan| p.claims.iter().map(|c| c.stage).collect::<Vec<_>>();
        let all = ["db-0", "db-1", "db-2"];
        // The bulk passes run together while east runs all three.
        let claims: Vec<Value> = (0..3).map(|i| claim_of(i, None)).collect();
        let p = step(&set, &claims, &all);
        assert_eq!(stages(&p), [Stage::Bulk; 3]);
        assert_eq!(
            p.held("StatefulSet", &set),
            vec![(a.clone(), 3), (b.clone(), 0)]
        );
        assert_eq!(
            p.starts("StatefulSet", &set),
            vec![(a.clone(), 0), (b.clone(), 3)]
        );
        // Bulk copied: only db-0 stops; the others wait their turn.
        let bulk = Some((BULK_COPIED, "False"));
        let claims: Vec<Value> = (0..3).map(|i| claim_of(i, bulk)).collect();
        let p = step(&set, &claims, &all);
        assert_eq!(stages(&p), [Stage::Stopping, Stage::Queued, Stage::Queued]);
        assert_eq!(
            p.held("StatefulSet", &set),
            vec![(a.clone(), 2), (b.clone(), 0)]
        );
        assert_eq!(
            p.starts("StatefulSet", &set),
            vec![(a.clone(), 1), (b.clone(), 3)]
        );
        assert!(
            p.waiting()
                .iter()
                .any(|(c, how)| c == "data-db-1"
                    && how.contains("waiting for the ordinals before it"))
        );
        // East runs from 1 now, but db-0 is still terminating there: not stopped yet.
        report_on(&mut set, &a, 2, 1, 2);
        assert_eq!(step(&set, &claims, &all).claims[0].stage, Stage::Stopping);
        // db-0 gone from east: its final pass.
        let p = step(&set, &claims, &all[1..]);
        assert_eq!(stages(&p), [Stage::Final, Stage::Queued, Stage::Queued]);
        // db-0 copied: west runs it; db-1 waits until west says it is Ready.
        let mut claims = claims;
        claims[0] = claim_of(0, Some((COPIED, "True")));
        let p = step(&set, &claims, &all[1..]);
        assert_eq!(stages(&p), [Stage::Done, Stage::Queued, Stage::Queued]);
        assert_eq!(
            p.held("StatefulSet", &set),
            vec![(a.clone(), 2), (b.clone(), 1)]
        );
        report_on(&mut set, &b, 1, 0, 0);
        assert_eq!(
            step(&set, &claims, &all[1..]).claims[1].stage,
            Stage::Queued
        );
        report_on(&mut set, &b, 1, 0, 1);
        let p = step(&set, &claims, &all[1..]);
        assert_eq!(stages(&p), [Stage::Done, Stage::Stopping, Stage::Queued]);
        assert_eq!(
            p.held("StatefulSet", &set),
            vec![(a.clone(), 1), (b.clone(), 1)]
        );
        assert_eq!(
            p.starts("StatefulSet", &set),
            vec![(a.clone(), 2), (b.clone(), 0)]
        );
        // Turned back to east now: db-0's newest data is on west and comes back first;
        // db-1 and db-2 never left east (their copies to west stop where they are).
        let asked_west =
            json!({SOURCE_ANNOTATION: "east", TARGET_ANNOTATION: "west", PASS_ANNOTATION: "bulk"});
        let mut back = claims.clone();
        for c in &mut back[1..] {
            c["metadata"]["annotations"]
                .as_object_mut()
                .unwrap()
                .extend(asked_west.as_object().unwrap().clone());
        }
        let objects: Vec<(&str, &Value)> = std::iter::once(("StatefulSet", &set))
            .chain(back.iter().map(|c| ("PersistentVolumeClaim", c)))
            .collect();
        let p = plan(&both, std::slice::from_ref(&a), &objects, |_| vec![]).unwrap();
        assert_eq!((p.from.clone(), p.to.clone()), (b.clone(), a.clone()));
        assert_eq!(p.claims.len(), 1);
        assert_eq!(
            p.held("StatefulSet", &set),
            vec![(b.clone(), 1), (a.clone(), 2)]
        );
        assert_eq!(
            p.starts("StatefulSet", &set),
            vec![(b.clone(), 0), (a.clone(), 1)]
        );
    }

    #[test]
    fn a_split_looks_only_at_the_ordinals_being_copied_however_large_the_set() {
        let moving: BTreeMap<usize, Stage> =
            [(5, Stage::Done), (6, Stage::Queued), (7, Stage::Bulk)].into();
        let split = OrdinalSplit::of(&(0..usize::MAX), &moving);
        assert_eq!(split.source, 6..8);
        assert_eq!(split.target, 0..6);
        let moving: BTreeMap<usize, Stage> = [(0, Stage::Final), (1, Stage::Queued)].into();
        let split = OrdinalSplit::of(&(0..3), &moving);
        assert_eq!((split.source, split.target), (1..2, 2..3));
    }

    #[test]
    fn a_copy_runs_bulk_then_stops_the_app_then_final_then_done() {
        let (a, b) = (ClusterName::new("east"), ClusterName::new("west"));
        let deploy = json!({"metadata": {"name": "writer"}, "spec": {"template": {"spec": {
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "notes"}}]}}}});
        let pod: Labels = [("app".to_string(), "writer".to_string())].into();
        let mut stopped_deploy = deploy.clone();
        stopped_deploy["spec"]["selector"] = json!({"matchLabels": {"app": "writer"}});
        let r = StatusReport {
            observed_generation: 1,
            replicas: Some(0),
            start: None,
            status: json!({"replicas": 0}),
        };
        stopped_deploy["metadata"]["annotations"][status_annotation(&a)] =
            Value::from(serde_json::to_string(&r).unwrap());
        let step = |c: &Value, mounted: bool, current: &[ClusterName]| {
            plan(
                current,
                std::slice::from_ref(&b),
                &[
                    ("PersistentVolumeClaim", c),
                    ("Deployment", &stopped_deploy),
                ],
                |_| if mounted { vec![pod.clone()] } else { vec![] },
            )
        };
        let bound = json!({"phase": "Bound"});
        // Asked to move: the bulk pass starts.
        let c = claim(&[("east", bound.clone())], json!({}));
        assert_eq!(
            step(&c, true, std::slice::from_ref(&a)).unwrap().claims[0].stage,
            Stage::Bulk
        );
        let p = step(&c, true, &[a.clone(), b.clone()]).unwrap();
        assert_eq!(p.held("Deployment", &deploy), vec![(b.clone(), 0)]);
        assert_eq!(p.asked("notes").unwrap().pass, Pass::Bulk);
        // Bulk done on west: east's app stops.
        let c = claim(
            &[
                ("east", bound.clone()),
                ("west", copied(BULK_COPIED, "False")),
            ],
            json!({}),
        );
        let p = step(&c, true, &[a.clone(), b.clone()]).unwrap();
        assert_eq!(p.claims[0].stage, Stage::Stopping);
        assert_eq!(
            p.held("Deployment", &deploy),
            vec![(a.clone(), 0), (b.clone(), 0)]
        );
        // Stopped: the final pass.
        let p = step(&c, false, &[a.clone(), b.clone()]).unwrap();
        assert_eq!(p.claims[0].stage, Stage::Final);
        assert_eq!(p.asked("notes").unwrap().pass, Pass::Final);
        // Done: west runs it, east stays stopped until it goes.
        let c = claim(
            &[("east", bound.clone()), ("west", copied(COPIED, "True"))],
            json!({}),
        );
        let p = step(&c, false, &[a.clone(), b.clone()]).unwrap();
        assert!(p.waiting().is_empty());
        assert_eq!(p.held("Deployment", &deploy), vec![(a.clone(), 0)]);
        assert_eq!(p.asked("notes"), None);
        // Moved: nothing asked any more.
        assert_eq!(step(&c, false, std::slice::from_ref(&b)), None);
        let asked_now = json!({"metadata": {"annotations": {
            SOURCE_ANNOTATION: "east", TARGET_ANNOTATION: "west", PASS_ANNOTATION: "final"}}});
        assert_eq!(
            asked_patch(&asked_now, None).unwrap()["metadata"]["annotations"][SOURCE_ANNOTATION],
            Value::Null
        );
    }

    #[test]
    fn claims_not_bound_where_the_app_ran_copy_nothing_and_a_turned_back_copy_is_given_up() {
        let (a, b) = (ClusterName::new("east"), ClusterName::new("west"));
        let pending = claim(&[("east", json!({"phase": "Pending"}))], json!({}));
        let objs = [("PersistentVolumeClaim", &pending)];
        assert_eq!(
            plan(
                &[a.clone(), b.clone()],
                std::slice::from_ref(&b),
                &objs,
                |_| vec![]
            ),
            None
        );
        // east → west asked, then turned back to east before the copy was done.
        let back = claim(
            &[
                ("east", json!({"phase": "Bound"})),
                ("west", copied(BULK_COPIED, "False")),
            ],
            json!({SOURCE_ANNOTATION: "east", TARGET_ANNOTATION: "west", PASS_ANNOTATION: "bulk"}),
        );
        let writer = json!({"metadata": {"name": "writer"}, "spec": {"template": {"spec": {
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "notes"}}]}}}});
        // On both clusters, wanted back on east.
        let turned_back = |objs: &[(&str, &Value)]| {
            plan(
                &[a.clone(), b.clone()],
                std::slice::from_ref(&a),
                objs,
                |_| vec![],
            )
            .unwrap()
        };
        let p = turned_back(&[("PersistentVolumeClaim", &back), ("Deployment", &writer)]);
        // Nothing is copied or waited for; west, which has part of the data, runs none of
        // the claim's workloads while it still has the namespace; east runs them.
        assert!(p.claims.is_empty());
        assert_eq!(p.given_up, vec!["notes".to_string()]);
        assert_eq!(p.asked("notes"), None);
        assert!(p.waiting().is_empty());
        assert_eq!(p.holding(), None);
        assert_eq!(p.held("Deployment", &writer), vec![(b.clone(), 0)]);
        // The same once that pass has removed the request, west's part of a copy Bound
        // there: it is not copied back.
        let mut removed = claim(
            &[
                ("east", json!({"phase": "Bound"})),
                (
                    "west",
                    json!({"phase": "Bound", "conditions": [{"type": COPIED_CONDITION,
                        "status": "False", "reason": BULK_COPIED}]}),
                ),
            ],
            json!({}),
        );
        removed["metadata"]["name"] = json!("notes");
        let p = turned_back(&[("PersistentVolumeClaim", &removed), ("Deployment", &writer)]);
        assert!(p.claims.is_empty());
        assert_eq!(p.given_up, vec!["notes".to_string()]);
        // A claim bound only on east, whose copy was never asked for (it could not be):
        // west never had its data either.
        let mut fresh = claim(&[("east", json!({"phase": "Bound"}))], json!({}));
        fresh["metadata"]["name"] = json!("fresh");
        let p = turned_back(&[
            ("PersistentVolumeClaim", &back),
            ("PersistentVolumeClaim", &fresh),
        ]);
        assert_eq!(p.given_up, vec!["notes".to_string(), "fresh".to_string()]);
        let objs = [("PersistentVolumeClaim", &back)];
        // Spread (two wanted) is not a move.
        assert_eq!(
            plan(
                std::slice::from_ref(&a),
                &[a.clone(), b.clone()],
                &objs,
                |_| vec![]
            ),
            None
        );
    }

    #[test]
    fn a_claim_that_cannot_be_copied_holds_the_target_and_leaves_the_source_alone() {
        let (a, b) = (ClusterName::new("east"), ClusterName::new("west"));
        let deploy = json!({"metadata": {"name": "writer"}, "spec": {"template": {"spec": {
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "notes"}}]}}}});
        let bound = json!({"phase": "Bound"});
        let on = [a.clone(), b.clone()];
        let plan_of = |c: &Value| {
            plan(
                &on,
                std::slice::from_ref(&b),
                &[("PersistentVolumeClaim", c), ("Deployment", &deploy)],
                |_| vec![],
            )
            .unwrap()
        };
        // The spec refuses: no mover is asked for; west holds the app at 0, east keeps it.
        for (spec, says) in [
            (json!({"volumeMode": "Block"}), "block-mode claim"),
            (
                json!({"dataSource": {"kind": "VolumeSnapshot", "name": "nightly"}}),
                "dataSource (VolumeSnapshot nightly)",
            ),
        ] {
            let mut c = claim(&[("east", bound.clone())], json!({}));
            c["spec"] = spec;
            let p = plan_of(&c);
            assert_eq!(p.asked("notes"), None);
            assert_eq!(p.held("Deployment", &deploy), vec![(b.clone(), 0)]);
            let waiting = p.waiting();
            assert_eq!(waiting.len(), 1);
            assert!(waiting[0].1.contains(says), "{waiting:?}");
        }
        // The target refuses in its own words: the mover stays asked for (it goes on once
        // the cause is fixed), nothing stops on east.
        let c = claim(
            &[
                ("east", bound.clone()),
                (
                    "west",
                    json!({"phase": "Pending", "conditions": [{
                    "type": COPIED_CONDITION, "status": "False", "reason": CANNOT_COPY,
                    "message": "storageclass.storage.k8s.io \"fast\" not found"}]}),
                ),
            ],
            json!({}),
        );
        let p = plan_of(&c);
        assert_eq!(p.claims[0].stage, Stage::Bulk);
        assert_eq!(p.asked("notes").unwrap().pass, Pass::Bulk);
        assert_eq!(p.held("Deployment", &deploy), vec![(b.clone(), 0)]);
        assert_eq!(
            p.waiting()[0].1,
            "cannot be copied: storageclass.storage.k8s.io \"fast\" not found"
        );
    }

    #[test]
    fn a_claim_that_cannot_be_copied_keeps_the_others_from_stopping_the_app() {
        let (a, b) = (ClusterName::new("east"), ClusterName::new("west"));
        let mounting = |name: &str, claim: &str| {
            json!({"metadata": {"name": name}, "spec": {"template": {"spec": {
                "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": claim}}]}}}})
        };
        let (mut planter, keeper) = (mounting("planter", "seed"), mounting("keeper", "sprout"));
        // The planter runs on east.
        let running = StatusReport {
            observed_generation: 1,
            replicas: Some(1),
            start: None,
            status: json!({"replicas": 1}),
        };
        planter["metadata"]["annotations"][status_annotation(&a)] =
            Value::from(serde_json::to_string(&running).unwrap());
        let mut seed = claim(
            &[
                ("east", json!({"phase": "Bound"})),
                ("west", copied(BULK_COPIED, "False")),
            ],
            json!({}),
        );
        seed["metadata"]["name"] = json!("seed");
        let mut sprout = claim(&[("east", json!({"phase": "Bound"}))], json!({}));
        sprout["metadata"]["name"] = json!("sprout");
        sprout["spec"] = json!({"dataSource": {"kind": "PersistentVolumeClaim", "name": "seed"}});
        let p = plan(
            &[a.clone(), b.clone()],
            std::slice::from_ref(&b),
            &[
                ("PersistentVolumeClaim", &seed),
                ("PersistentVolumeClaim", &sprout),
                ("Deployment", &planter),
                ("Deployment", &keeper),
            ],
            |_| vec![[("app".to_string(), "planter".to_string())].into()],
        )
        .unwrap();
        // Seed is bulk copied, but its app does not stop on east while sprout cannot move.
        assert_eq!(p.claims[0].stage, Stage::Waiting);
        assert_eq!(p.held("Deployment", &planter), vec![(b.clone(), 0)]);
        assert_eq!(p.held("Deployment", &keeper), vec![(b.clone(), 0)]);
        assert_eq!(
            p.waiting(),
            vec![
                (
                    "seed".to_string(),
                    "bulk copied, waiting for the claims that cannot be copied".to_string()
                ),
                (
                    "sprout".to_string(),
                    "cannot be copied: it is filled from a dataSource (PersistentVolumeClaim seed) the target would fill it from instead".to_string()
                ),
            ]
        );
    }

    #[test]
    fn a_shared_claim_on_network_storage_copies_nothing_and_one_on_local_storage_moves() {
        let (a, b) = (ClusterName::new("east"), ClusterName::new("west"));
        let deploy = json!({"metadata": {"name": "writer"}, "spec": {"template": {"spec": {
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "notes"}}]}}}});
        let marked = json!({STORAGE_ANNOTATION: "shared"});
        let on = [a.clone(), b.clone()];
        let plan_of = |c: &Value| {
            plan(
                &on,
                std::slice::from_ref(&b),
                &[("PersistentVolumeClaim", c), ("Deployment", &deploy)],
                |_| vec![],
            )
        };
        let shared = |status: &str, reason: &str| {
            json!({"phase": "Bound", "conditions": [
                {"type": SHARED_CONDITION, "status": status, "reason": reason}]})
        };
        // Network storage: nothing to copy, nothing held.
        let c = claim(
            &[("east", shared("True", "NetworkStorage"))],
            marked.clone(),
        );
        assert_eq!(plan_of(&c), None);
        // Not said yet: nothing is asked of the movers, west waits, east is untouched.
        let c = claim(&[("east", json!({"phase": "Bound"}))], marked.clone());
        let p = plan_of(&c).unwrap();
        assert_eq!(p.asked("notes"), None);
        assert_eq!(p.held("Deployment", &deploy), vec![(b.clone(), 0)]);
        assert_eq!(
            p.waiting()[0].1,
            "is marked shared: waiting for east to say whether the storage it is bound to is shared"
        );
        // East's own storage: copied like any claim.
        let c = claim(
            &[("east", shared("False", "ClusterLocalStorage"))],
            marked.clone(),
        );
        let p = plan_of(&c).unwrap();
        assert_eq!(p.asked("notes").unwrap().pass, Pass::Bulk);
        // Network storage deleted with its claim: the move waits, saying why; no mover.
        let c = claim(
            &[(
                "east",
                json!({"phase": "Bound", "conditions": [{"type": SHARED_CONDITION,
                    "status": "False", "reason": DELETED_WITH_CLAIM, "message": "bound to volume pvc-1 (nfs) of reclaimPolicy Delete"}]}),
            )],
            marked.clone(),
        );
        let p = plan_of(&c).unwrap();
        assert_eq!(p.asked("notes"), None);
        assert_eq!(p.held("Deployment", &deploy), vec![(b.clone(), 0)]);
        assert!(
            p.waiting()[0].1.contains("reclaimPolicy Delete"),
            "{:?}",
            p.waiting()
        );
        // Unmarked: copied whatever east says.
        let c = claim(&[("east", shared("True", "NetworkStorage"))], json!({}));
        assert_eq!(
            plan_of(&c).unwrap().asked("notes").unwrap().pass,
            Pass::Bulk
        );
    }

    #[test]
    fn a_job_that_mounts_the_claim_holds_the_final_pass_until_it_ends() {
        let (a, b) = (ClusterName::new("east"), ClusterName::new("west"));
        let c = claim(
            &[
                ("east", json!({"phase": "Bound"})),
                ("west", copied(BULK_COPIED, "False")),
            ],
            json!({}),
        );
        let job = |status: Value| {
            let r = StatusReport {
                observed_generation: 1,
                replicas: None,
                start: None,
                status,
            };
            json!({"metadata": {"name": "compact", "annotations": {
                status_annotation(&a): serde_json::to_string(&r).unwrap()}},
                "spec": {"template": {"spec": {"volumes": [
                    {"name": "d", "persistentVolumeClaim": {"claimName": "notes"}}]}}}})
        };
        let stage = |j: &Value| {
            plan(
                &[a.clone(), b.clone()],
                std::slice::from_ref(&b),
                &[("PersistentVolumeClaim", &c), ("Job", j)],
                |_| vec![],
            )
            .unwrap()
            .claims[0]
                .stage
        };
        assert_eq!(stage(&job(json!({"active": 1}))), Stage::Stopping);
        let done = json!({"active": 0, "conditions": [{"type": "Complete", "status": "True"}]});
        assert_eq!(stage(&job(done)), Stage::Final);
    }
}
