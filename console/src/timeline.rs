//! Each namespace's moves as a timeline: the phases the console saw it pass through, with
//! when and what the condition said (the weights as they step, the live connections as
//! they drain, the figures of a rollback). Kept in the console's memory from the moment
//! it started; the control plane keeps the present, the Events the past.

use std::collections::HashMap;

use serde::Serialize;

use crate::view::{NamespaceView, Phase};

/// Entries kept per namespace: a few moves' worth.
pub const KEPT: usize = 40;

/// Namespaces followed at most (the oldest-changed are forgotten beyond it).
pub const NAMESPACES: usize = 20_000;

/// One step of a namespace's timeline.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    /// Unix milliseconds when the console saw it.
    pub at: u64,
    pub phase: Phase,
    /// Done: the phase that ended a move (placed after moving, shifting or draining).
    pub done: bool,
    /// What it said: the clusters, the weights, the live counts, the verdict.
    pub detail: String,
}

/// The timelines of every namespace seen, by `<logical cluster>/<namespace>`.
#[derive(Default)]
pub struct Timelines {
    by_namespace: HashMap<String, (u64, Vec<Step>)>,
}

/// What a step says of `ns`: the condition's message, and the live counts while it drains.
fn detail(ns: &NamespaceView) -> String {
    let mut d = ns.message.clone();
    // Live counts only while draining: the reports stay a while after the move is done.
    if ns.phase == Some(Phase::Draining) && !ns.active.is_empty() {
        let live: Vec<String> = ns
            .active
            .iter()
            .map(|(c, n)| format!("{c}: {n} live"))
            .collect();
        d = format!("{d} ({})", live.join(", "));
    }
    d
}

impl Timelines {
    /// Record `ns` as seen at `at` (unix ms): a new step when its phase or what it says
    /// changed. Returns whether anything changed.
    pub fn observe(&mut self, ns: &NamespaceView, at: u64) -> bool {
        let Some(phase) = ns.phase else { return false };
        let detail = detail(ns);
        let key = ns.key();
        if !self.by_namespace.contains_key(&key) && self.by_namespace.len() >= NAMESPACES {
            self.forget_oldest();
        }
        let (changed_at, steps) = self.by_namespace.entry(key).or_default();
        let last = steps.last();
        if last.is_some_and(|s| s.phase == phase && s.detail == detail) {
            return false;
        }
        let done = phase == Phase::Placed && last.is_some_and(|s| s.phase.moving());
        steps.push(Step {
            at,
            phase,
            done,
            detail,
        });
        if steps.len() > KEPT {
            steps.remove(0);
        }
        *changed_at = at;
        true
    }

    /// Forget namespaces no longer there.
    pub fn keep_only(&mut self, keys: &std::collections::HashSet<String>) {
        self.by_namespace.retain(|k, _| keys.contains(k));
    }

    fn forget_oldest(&mut self) {
        if let Some(k) = self
            .by_namespace
            .iter()
            .min_by_key(|(_, (at, _))| *at)
            .map(|(k, _)| k.clone())
        {
            self.by_namespace.remove(&k);
        }
    }

    /// The steps of `key`.
    pub fn of(&self, key: &str) -> &[Step] {
        self.by_namespace.get(key).map_or(&[], |(_, s)| s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(reason: &str, message: &str, draining: bool) -> NamespaceView {
        NamespaceView {
            logical_cluster: "root".into(),
            name: "shop".into(),
            phase: Some(crate::view::phase(reason, draining)),
            reason: reason.into(),
            message: message.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_move_is_recorded_in_order_and_ends_done() {
        let mut t = Timelines::default();
        assert!(t.observe(&ns("Placed", "on east", false), 1));
        assert!(!t.observe(&ns("Placed", "on east", false), 2), "no change");
        t.observe(&ns("Moving", "waiting for west", false), 3);
        t.observe(&ns("Shifting", "east: weight 80", false), 4);
        t.observe(&ns("Shifting", "east: weight 40", false), 5);
        let mut draining = ns("Shifting", "east: weight 0, draining", true);
        draining.active.insert("east".into(), 2);
        t.observe(&draining, 6);
        t.observe(&ns("Placed", "on west", false), 7);
        let steps = t.of("root/shop");
        let phases: Vec<Phase> = steps.iter().map(|s| s.phase).collect();
        assert_eq!(
            phases,
            [
                Phase::Placed,
                Phase::Moving,
                Phase::Shifting,
                Phase::Shifting,
                Phase::Draining,
                Phase::Placed
            ]
        );
        assert!(steps[5].done && !steps[0].done);
        assert_eq!(steps[4].detail, "east: weight 0, draining (east: 2 live)");
    }

    #[test]
    fn bounded_per_namespace_and_forgets_what_is_gone() {
        let mut t = Timelines::default();
        for i in 0..100 {
            t.observe(&ns("Shifting", &format!("weight {i}"), false), i);
        }
        assert_eq!(t.of("root/shop").len(), KEPT);
        t.keep_only(&Default::default());
        assert!(t.of("root/shop").is_empty());
    }
}
