//! Traffic leaves a cluster before the cluster goes: once a move's (or drain's) new
//! clusters are available and imported everywhere, each cluster the namespace leaves gets
//! its traffic weight stepped from 100 to 0 over the shift's window, then its endpoints
//! are marked draining, and only then is it removed.
//!
//! The state lives on the upstream namespace, where `kubectl` shows it and where the
//! syncers read it (they carry it to the downstream Services, and the MCS EndpointSlices
//! carry it to every dataplane): `shift.sluice.dev/<cluster>` (when the shift began),
//! `weight.sluice.dev/<cluster>` and `draining.sluice.dev/<cluster>`.
//!
//! Once draining, the cluster stays until the dataplane of every member reports no live
//! connection or request to it (through the import reports), or the policy's
//! `maxDrainSeconds` have passed — then what was left is cut, and [`Drained`] says how much.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Map, Value};
use sluice_api::ClusterName;
use sluice_api::sluice::TrafficShift;
use sluice_api::sync::{
    DRAINING_ANNOTATION_PREFIX, SHIFT_ANNOTATION_PREFIX, WEIGHT_ANNOTATION_PREFIX,
    draining_annotation, shift_annotation, weight_annotation,
};

/// How long a finished shift's annotations stay after its cluster left: long enough that
/// every syncer has acted on the cluster's removal before the cluster's Services could be
/// told their old weight again.
const LINGER: Duration = Duration::from_secs(10);

/// How long after its weight reached 0 a leaving cluster waits for every member's imports
/// to show it draining, at most.
const CONFIRM_WITHIN: Duration = Duration::from_secs(60);

/// Time from `since` to `now`; none if `since` is in the future (a clock that went back).
fn elapsed(since: Timestamp, now: Timestamp) -> Duration {
    let d = now.duration_since(since);
    if d.is_negative() {
        Duration::ZERO
    } else {
        d.unsigned_abs()
    }
}

/// What the member clusters report about a leaving cluster's traffic.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DrainReport {
    /// Members whose imports do not yet show it at weight 0 and draining.
    pub unconfirmed: Vec<ClusterName>,
    /// Live connections and in-flight requests to it, summed over the members that
    /// reported.
    pub active: u64,
    /// Members that show it draining but whose dataplane has not reported its traffic.
    pub unreported: Vec<ClusterName>,
}

impl DrainReport {
    fn settled(&self) -> bool {
        self.unconfirmed.is_empty() && self.unreported.is_empty() && self.active == 0
    }
}

/// How a leaving cluster's traffic ended, as it goes: never hidden (a condition and an
/// Event say it).
#[derive(Clone, Debug, PartialEq)]
pub struct Drained {
    pub cluster: ClusterName,
    /// Live connections and requests still open when the wait was over (cut).
    pub cut: u64,
    /// Members whose traffic to it is unknown (not confirmed draining, or not reported).
    pub unknown: Vec<ClusterName>,
    /// The wait that ran out, when it did.
    pub waited: Option<Duration>,
}

/// What the gate decided for one namespace.
#[derive(Debug, Default, PartialEq)]
pub struct Decision {
    /// Leaving clusters kept while their traffic shifts off (with their weight now), or
    /// while it drains.
    pub kept: Vec<(ClusterName, u32)>,
    /// The namespace annotations to set (string) or remove (null).
    pub annotations: Map<String, Value>,
    /// Leaving clusters released now, with how their traffic ended.
    pub drained: Vec<Drained>,
}

/// The gate for a namespace on `current`, whose placement wants `wanted` and whose next
/// step removes `leaving`, given its `annotations`, its `policy`, the time `now`, and
/// `drain(c)`: what the members report about `c`'s traffic.
pub fn gate(
    current: &[ClusterName],
    wanted: &[ClusterName],
    leaving: &[ClusterName],
    annotations: &BTreeMap<String, String>,
    policy: &TrafficShift,
    now: Timestamp,
    drain: impl Fn(&ClusterName) -> DrainReport,
) -> Decision {
    let mut d = Decision::default();
    let mut set = |k: String, v: Option<String>| {
        if annotations.get(&k) != v.as_ref() {
            d.annotations.insert(k, v.map_or(Value::Null, Value::from));
        }
    };
    let started = |c: &ClusterName| -> Option<Timestamp> {
        annotations.get(&shift_annotation(c))?.parse().ok()
    };
    // Nowhere to shift to (unplaced): the cluster simply goes.
    if !wanted.is_empty() {
        for c in leaving {
            let since = started(c).unwrap_or(now);
            set(shift_annotation(c), Some(since.to_string()));
            let weight = policy.weight_at(elapsed(since, now));
            set(weight_annotation(c), Some(weight.to_string()));
            if weight > 0 {
                d.kept.push((c.clone(), weight));
                continue;
            }
            let marked =
                annotations.get(&draining_annotation(c)).map(String::as_str) == Some("true");
            set(draining_annotation(c), Some("true".into()));
            if !marked {
                d.kept.push((c.clone(), 0));
                continue;
            }
            // Removed once every member's imports say it drains and every dataplane holds
            // nothing to it — or once the wait is over: for live traffic, the policy's
            // maximum drain time; for a member that never says it drains (its MCS
            // controller or syncer stuck), at least the confirmation bound.
            let r = drain(c);
            let mut wait = policy.max_drain();
            if !r.unconfirmed.is_empty() {
                wait = wait.max(CONFIRM_WITHIN);
            }
            let overdue = elapsed(since, now) >= policy.duration() + wait;
            if r.settled() || overdue {
                let mut unknown = r.unconfirmed.clone();
                unknown.extend(r.unreported.iter().cloned());
                d.drained.push(Drained {
                    cluster: c.clone(),
                    cut: r.active,
                    unknown,
                    waited: (!r.settled()).then_some(wait),
                });
            } else {
                d.kept.push((c.clone(), 0));
            }
        }
    }
    // Shifts that are over (the cluster left a while ago) or called off (the cluster is
    // wanted again) leave no trace.
    let shifted: Vec<ClusterName> = annotations
        .keys()
        .filter_map(|k| {
            [
                SHIFT_ANNOTATION_PREFIX,
                WEIGHT_ANNOTATION_PREFIX,
                DRAINING_ANNOTATION_PREFIX,
            ]
            .iter()
            .find_map(|p| k.strip_prefix(p))
        })
        .map(ClusterName::new)
        .collect();
    for c in shifted {
        let called_off = wanted.contains(&c);
        let gone = !current.contains(&c)
            && !leaving.contains(&c)
            && started(&c).is_none_or(|s| elapsed(s, now) >= policy.duration() + LINGER);
        if called_off || gone {
            set(shift_annotation(&c), None);
            set(weight_annotation(&c), None);
            set(draining_annotation(&c), None);
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(n: &str) -> ClusterName {
        ClusterName::new(n)
    }

    fn drained(_: &ClusterName) -> DrainReport {
        DrainReport::default()
    }

    fn apply(annotations: &mut BTreeMap<String, String>, d: &Decision) {
        for (k, v) in &d.annotations {
            match v.as_str() {
                Some(s) => annotations.insert(k.clone(), s.to_string()),
                None => annotations.remove(k),
            };
        }
    }

    #[test]
    fn a_leaving_cluster_steps_to_zero_then_drains_then_goes() {
        let (a, b) = (name("a"), name("b"));
        let policy = TrafficShift::default();
        let t0: Timestamp = "2026-11-24T12:00:00Z".parse().unwrap();
        let at = |s: i64| t0 + Duration::from_secs(s as u64);
        let current = [a.clone(), b.clone()];
        let wanted = [b.clone()];
        let leaving = [a.clone()];
        let mut ann = BTreeMap::new();

        let d = gate(&current, &wanted, &leaving, &ann, &policy, at(0), drained);
        assert_eq!(d.kept, vec![(a.clone(), 100)]);
        apply(&mut ann, &d);
        assert_eq!(ann["shift.sluice.dev/a"], t0.to_string());
        let d = gate(&current, &wanted, &leaving, &ann, &policy, at(2), drained);
        assert_eq!(d.kept, vec![(a.clone(), 60)]);
        apply(&mut ann, &d);
        assert_eq!(ann["weight.sluice.dev/a"], "60");
        // The window is over: weight 0 and draining, kept until the imports say so.
        let d = gate(&current, &wanted, &leaving, &ann, &policy, at(5), drained);
        assert_eq!(d.kept, vec![(a.clone(), 0)]);
        apply(&mut ann, &d);
        assert_eq!(ann["draining.sluice.dev/a"], "true");
        let unconfirmed = |_: &ClusterName| DrainReport {
            unconfirmed: vec![b.clone()],
            ..Default::default()
        };
        let d = gate(
            &current,
            &wanted,
            &leaving,
            &ann,
            &policy,
            at(6),
            unconfirmed,
        );
        assert_eq!(d.kept, vec![(a.clone(), 0)], "not yet draining everywhere");
        // Live traffic to a: kept while the maximum drain time runs (30 s by default).
        let busy = |_: &ClusterName| DrainReport {
            active: 3,
            ..Default::default()
        };
        let d = gate(&current, &wanted, &leaving, &ann, &policy, at(34), busy);
        assert_eq!(d.kept, vec![(a.clone(), 0)], "connections still open");
        // Drained: released, said so; nothing to write.
        let d = gate(&current, &wanted, &leaving, &ann, &policy, at(6), drained);
        assert!(d.kept.is_empty() && d.annotations.is_empty());
        assert_eq!(
            d.drained,
            vec![Drained {
                cluster: a.clone(),
                cut: 0,
                unknown: vec![],
                waited: None
            }]
        );
        // The maximum drain time is over: released, with what was cut.
        let d = gate(&current, &wanted, &leaving, &ann, &policy, at(35), busy);
        assert!(d.kept.is_empty());
        assert_eq!(d.drained[0].cut, 3);
        assert_eq!(d.drained[0].waited, Some(Duration::from_secs(30)));
        // Never confirmed: released after the confirmation wait, the member unknown.
        let d = gate(
            &current,
            &wanted,
            &leaving,
            &ann,
            &policy,
            at(64),
            unconfirmed,
        );
        assert_eq!(d.kept, vec![(a.clone(), 0)]);
        let d = gate(
            &current,
            &wanted,
            &leaving,
            &ann,
            &policy,
            at(65),
            unconfirmed,
        );
        assert!(d.kept.is_empty());
        assert_eq!(d.drained[0].unknown, vec![b.clone()]);
        // Gone from the namespace: its annotations stay a while, then go.
        let d = gate(
            std::slice::from_ref(&b),
            &wanted,
            &[],
            &ann,
            &policy,
            at(7),
            drained,
        );
        assert!(d.annotations.is_empty());
        let d = gate(
            std::slice::from_ref(&b),
            &wanted,
            &[],
            &ann,
            &policy,
            at(16),
            drained,
        );
        apply(&mut ann, &d);
        assert!(ann.is_empty(), "{ann:?}");
    }

    #[test]
    fn a_shift_called_off_is_undone_and_an_unplaced_namespace_does_not_shift() {
        let (a, b) = (name("a"), name("b"));
        let policy = TrafficShift::default();
        let now: Timestamp = "2026-11-24T12:00:02Z".parse().unwrap();
        let mut ann = BTreeMap::from([
            (
                "shift.sluice.dev/a".to_string(),
                "2026-11-24T12:00:00Z".to_string(),
            ),
            ("weight.sluice.dev/a".to_string(), "60".to_string()),
        ]);
        // The namespace goes back to a: a is wanted, its shift is undone.
        let d = gate(
            &[a.clone(), b.clone()],
            std::slice::from_ref(&a),
            std::slice::from_ref(&b),
            &ann,
            &policy,
            now,
            drained,
        );
        apply(&mut ann, &d);
        assert!(!ann.contains_key("weight.sluice.dev/a"), "{ann:?}");
        assert_eq!(d.kept, vec![(b.clone(), 100)], "b shifts off instead");
        let d = gate(
            std::slice::from_ref(&a),
            &[],
            std::slice::from_ref(&a),
            &BTreeMap::new(),
            &policy,
            now,
            drained,
        );
        assert_eq!(d, Decision::default());
    }
}
