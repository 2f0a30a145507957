//! Traffic leaves a cluster before the cluster goes: once a move's (or drain's) new
//! clusters are available and imported everywhere, each cluster the namespace leaves gets
//! its traffic weight stepped from 100 to 0 over the shift's window, then its endpoints
//! are marked draining, and only then is it removed.
//!
//! The state lives on the upstream namespace, where `kubectl` shows it and where the
//! syncers read it (they carry it to the downstream Services, and the MCS EndpointSlices
//! carry it to every dataplane): `shift.sluice.dev/<cluster>` (when the shift began),
//! `weight.sluice.dev/<cluster>` and `draining.sluice.dev/<cluster>`.

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

/// What the gate decided for one namespace.
#[derive(Debug, Default, PartialEq)]
pub struct Decision {
    /// Leaving clusters kept while their traffic shifts off (with their weight now), or
    /// for one more pass once drained.
    pub kept: Vec<(ClusterName, u32)>,
    /// The namespace annotations to set (string) or remove (null).
    pub annotations: Map<String, Value>,
}

/// The gate for a namespace on `current`, whose placement wants `wanted` and whose next
/// step removes `leaving`, given its `annotations`, its `policy`, the time `now`, and
/// `drained(c)`: every member cluster's imports show `c`'s endpoints at weight 0 and
/// draining.
pub fn gate(
    current: &[ClusterName],
    wanted: &[ClusterName],
    leaving: &[ClusterName],
    annotations: &BTreeMap<String, String>,
    policy: &TrafficShift,
    now: Timestamp,
    drained: impl Fn(&ClusterName) -> bool,
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
            // Removed once every member's imports say it drains — or, should one never
            // say so (its MCS controller or syncer stuck), once the wait is over.
            let overdue = elapsed(since, now) >= policy.duration() + CONFIRM_WITHIN;
            if !(marked && (drained(c) || overdue)) {
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

        let d = gate(&current, &wanted, &leaving, &ann, &policy, at(0), |_| true);
        assert_eq!(d.kept, vec![(a.clone(), 100)]);
        apply(&mut ann, &d);
        assert_eq!(ann["shift.sluice.dev/a"], t0.to_string());
        let d = gate(&current, &wanted, &leaving, &ann, &policy, at(2), |_| true);
        assert_eq!(d.kept, vec![(a.clone(), 60)]);
        apply(&mut ann, &d);
        assert_eq!(ann["weight.sluice.dev/a"], "60");
        // The window is over: weight 0 and draining, kept until the imports say so.
        let d = gate(&current, &wanted, &leaving, &ann, &policy, at(5), |_| true);
        assert_eq!(d.kept, vec![(a.clone(), 0)]);
        apply(&mut ann, &d);
        assert_eq!(ann["draining.sluice.dev/a"], "true");
        let d = gate(&current, &wanted, &leaving, &ann, &policy, at(6), |_| false);
        assert_eq!(d.kept, vec![(a.clone(), 0)], "not yet draining everywhere");
        // Drained: released; nothing to write.
        let d = gate(&current, &wanted, &leaving, &ann, &policy, at(6), |_| true);
        assert_eq!(d, Decision::default());
        // Never confirmed: released after the wait.
        let d = gate(&current, &wanted, &leaving, &ann, &policy, at(65), |_| {
            false
        });
        assert_eq!(d, Decision::default());
        // Gone from the namespace: its annotations stay a while, then go.
        let d = gate(
            std::slice::from_ref(&b),
            &wanted,
            &[],
            &ann,
            &policy,
            at(7),
            |_| true,
        );
        assert!(d.annotations.is_empty());
        let d = gate(
            std::slice::from_ref(&b),
            &wanted,
            &[],
            &ann,
            &policy,
            at(16),
            |_| true,
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
            |_| true,
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
            |_| true,
        );
        assert_eq!(d, Decision::default());
    }
}
