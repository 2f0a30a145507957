//! Where a namespace should run, and the next step toward it: the pure core of placement,
//! with no IO, so every rule is a unit test.
//!
//! A namespace's target comes from its break-glass label `sluice.dev/cluster`, else from
//! the oldest `Placement` of its logical cluster whose namespace selector matches it. A move
//! is make-before-break, NONE → A → (A,B) → B: the new clusters are added first, and the old
//! ones are removed only once the workloads are available on every new one and no soft
//! finalizer holds the old one. A target that cannot be met (a cluster that does not exist,
//! a selector that matches none) leaves the namespace where it is, Pending with the reason.

use std::collections::{BTreeMap, BTreeSet};

use sluice_api::ClusterName;
use sluice_kube::resources::{Limits, Resources};
use sluice_kube::selector::{Selector, SelectorError};

use crate::demand::Workload;

/// A physical cluster as placement sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterView {
    pub name: ClusterName,
    pub labels: BTreeMap<String, String>,
    /// Its syncer's heartbeat is current.
    pub ready: bool,
    /// Cordoned: nothing new is placed on it.
    pub unschedulable: bool,
    /// Everything placed on it moves away.
    pub draining: bool,
    /// Namespaces placed on it now (a tie-breaker: the least loaded cluster is chosen).
    pub load: usize,
    /// `spec.capacity`.
    pub capacity: Limits,
    /// What the namespaces placed on it request, apart from the one being decided.
    pub used: Resources,
    /// Whether the workspace of the namespace being decided may use it
    /// (`Workspace.spec.policy.clusterSelector`, of its workspace and those above).
    pub allowed: bool,
    /// The quotas of that namespace's workspaces on this cluster.
    pub quotas: Vec<Quota>,
}

/// One workspace's quota on a cluster and what it (with the workspaces below it) uses
/// there, apart from the namespace being decided.
#[derive(Clone, Debug, PartialEq)]
pub struct Quota {
    pub workspace: String,
    pub limits: Limits,
    pub used: Resources,
}

impl ClusterView {
    /// Whether something new may be placed here.
    fn eligible(&self) -> bool {
        self.ready && !self.unschedulable && !self.draining && self.allowed
    }

    /// Whether `demand` fits beside what is there, within its capacity and every quota.
    fn fits(&self, demand: &Resources) -> bool {
        self.capacity.admits(&(self.used + *demand))
            && self
                .quotas
                .iter()
                .all(|q| q.limits.admits(&(q.used + *demand)))
    }

    /// Neither its capacity nor any quota bounds anything.
    fn unbounded(&self) -> bool {
        self.capacity.is_unbounded() && self.quotas.iter().all(|q| q.limits.is_unbounded())
    }

    /// How many more pods like `each` fit, after `spent` more is placed here: the least of
    /// what its capacity and each quota leave (`None`: unbounded).
    pub fn room(&self, spent: &Resources, each: &Resources) -> Option<i64> {
        std::iter::once(self.capacity.room_for(&(self.used + *spent), each))
            .chain(
                self.quotas
                    .iter()
                    .map(|q| q.limits.room_for(&(q.used + *spent), each)),
            )
            .flatten()
            .min()
    }

    /// The workspace whose quota, and not the cluster's capacity, keeps `demand` out.
    fn quota_refusing(&self, demand: &Resources) -> Option<&str> {
        if !self.capacity.admits(&(self.used + *demand)) {
            return None;
        }
        self.quotas
            .iter()
            .find(|q| !q.limits.admits(&(q.used + *demand)))
            .map(|q| q.workspace.as_str())
    }
}

/// `Single`: one cluster; `Spread`: every selected cluster, replicas split between them
/// by capacity; `Spill`: one cluster, and what outgrew its capacity on the next ones (in
/// order: the first takes what fits, the next the excess).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    #[default]
    Single,
    Spread,
    Spill,
}

/// A `Placement` as placement reads it.
#[derive(Clone, Debug)]
pub struct PolicyView {
    pub name: String,
    /// `None` matches every namespace.
    pub namespaces: Result<Selector, SelectorError>,
    /// `None` matches every cluster.
    pub clusters: Result<Selector, SelectorError>,
    pub mode: Mode,
    /// How traffic leaves the clusters its namespaces move off.
    pub traffic_shift: sluice_api::sluice::TrafficShift,
}

/// Why a namespace cannot go where it is asked to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pending {
    ClusterNotFound(String),
    ClusterNotReady(String),
    ClusterUnschedulable(String),
    /// Pinned to a cluster its workspace may not use.
    ClusterNotAllowed(String),
    NoClusterMatches(String),
    /// A Placement's clusters are all ones its workspace may not use.
    NoAllowedClusterMatches(String),
    InvalidSelector(String, SelectorError),
    /// It is to move off a draining cluster, which moves a bounded number at a time.
    DrainQueued(ClusterName),
    /// No eligible cluster has room for what it requests.
    InsufficientCapacity(String),
}

impl Pending {
    /// The condition reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Pending::ClusterNotFound(_) => "ClusterNotFound",
            Pending::ClusterNotReady(_) => "ClusterNotReady",
            Pending::ClusterUnschedulable(_) => "ClusterUnschedulable",
            Pending::ClusterNotAllowed(_) | Pending::NoAllowedClusterMatches(_) => {
                "ClusterNotAllowed"
            }
            Pending::NoClusterMatches(_) => "NoClusterMatches",
            Pending::InvalidSelector(..) => "InvalidSelector",
            Pending::DrainQueued(_) => "DrainQueued",
            Pending::InsufficientCapacity(_) => "InsufficientCapacity",
        }
    }

    pub fn message(&self) -> String {
        match self {
            Pending::ClusterNotFound(c) => format!("cluster {c:?} does not exist"),
            Pending::ClusterNotReady(c) => format!("cluster {c:?} is not ready"),
            Pending::ClusterUnschedulable(c) => {
                format!("cluster {c:?} is cordoned or draining")
            }
            Pending::ClusterNotAllowed(c) => format!(
                "cluster {c:?} is not one this workspace may use (spec.policy.clusterSelector)"
            ),
            Pending::NoAllowedClusterMatches(p) => format!(
                "placement {p:?}: no cluster its locationSelector matches is one this workspace may use (spec.policy.clusterSelector)"
            ),
            Pending::NoClusterMatches(p) => {
                format!(
                    "placement {p:?}: no ready, schedulable cluster matches its locationSelector"
                )
            }
            Pending::InvalidSelector(p, e) => format!("placement {p:?}: {e}"),
            Pending::DrainQueued(c) => {
                format!("queued to move off draining cluster {c}")
            }
            Pending::InsufficientCapacity(what) => {
                format!("no eligible cluster has room for {what}")
            }
        }
    }
}

/// Where a namespace should run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Nothing asks for it to run anywhere.
    Unplaced,
    On {
        clusters: Vec<ClusterName>,
        mode: Mode,
    },
    /// It cannot go where it is asked to; it stays where it is.
    Pending(Pending),
}

/// The target of a namespace with `labels`, now on `current`, given the clusters and the
/// Placements of its logical cluster (oldest first); `demand` is what all of `workloads`
/// request.
pub fn target(
    labels: &BTreeMap<String, String>,
    current: &[ClusterName],
    clusters: &[ClusterView],
    policies: &[PolicyView],
    demand: &Resources,
    workloads: &[Workload],
    established: bool,
) -> Target {
    let by_name = |n: &str| clusters.iter().find(|c| c.name.as_str() == n);
    if let Some(want) = labels.get(sluice_api::sync::LABEL_CLUSTER) {
        return match by_name(want) {
            None => Target::Pending(Pending::ClusterNotFound(want.clone())),
            Some(c) if !c.allowed => Target::Pending(Pending::ClusterNotAllowed(want.clone())),
            Some(c) if c.draining => away_from_draining(c, current, clusters, demand, established),
            Some(c) if !c.ready => Target::Pending(Pending::ClusterNotReady(want.clone())),
            // A cordon keeps what is there, and places nothing new.
            Some(c) if c.unschedulable && !current.contains(&c.name) => {
                Target::Pending(Pending::ClusterUnschedulable(want.clone()))
            }
            // Pinned: it runs there, spilling what does not fit onto the least loaded
            // clusters with room.
            Some(c) => single(c, &[], current, demand, established),
        };
    }
    let mut invalid = None;
    let policy = policies.iter().find(|p| match &p.namespaces {
        Ok(s) => s.matches(labels),
        Err(e) => {
            invalid.get_or_insert_with(|| Pending::InvalidSelector(p.name.clone(), e.clone()));
            false
        }
    });
    let Some(policy) = policy else {
        return invalid.map_or(Target::Unplaced, Target::Pending);
    };
    let selector = match &policy.clusters {
        Ok(s) => s,
        Err(e) => return Target::Pending(Pending::InvalidSelector(policy.name.clone(), e.clone())),
    };
    let matched: Vec<&ClusterView> = clusters
        .iter()
        .filter(|c| selector.matches(&c.labels))
        .collect();
    let selected: Vec<&ClusterView> = matched.iter().copied().filter(|c| c.allowed).collect();
    if selected.is_empty() && !matched.is_empty() {
        return Target::Pending(Pending::NoAllowedClusterMatches(policy.name.clone()));
    }
    // Where it runs already may stay (cordoned or not); anything new must be eligible.
    let keep =
        |c: &&ClusterView| c.eligible() || (current.contains(&c.name) && c.ready && !c.draining);
    let mut usable: Vec<&ClusterView> = selected.iter().copied().filter(keep).collect();
    if usable.is_empty() {
        return Target::Pending(Pending::NoClusterMatches(policy.name.clone()));
    }
    match policy.mode {
        Mode::Spread => spread(usable, current, demand, workloads, established),
        Mode::Single | Mode::Spill => {
            // Sticky: stay where it runs if that is still selected.
            if let Some(c) = usable.iter().find(|c| current.contains(&c.name)) {
                return single(c, &usable_owned(&usable), current, demand, established);
            }
            usable.sort_by(|a, b| a.load.cmp(&b.load).then(a.name.cmp(&b.name)));
            match usable.iter().find(|c| c.fits(demand)) {
                Some(c) => Target::On {
                    clusters: vec![c.name.clone()],
                    mode: Mode::Single,
                },
                None => insufficient(demand, usable.iter().copied()),
            }
        }
    }
}

/// Pending for want of room; when a workspace's quota, not the clusters' capacity, is what
/// refuses it, the message says so.
fn insufficient<'a>(
    demand: &Resources,
    clusters: impl IntoIterator<Item = &'a ClusterView>,
) -> Target {
    let quota = clusters
        .into_iter()
        .find_map(|c| c.quota_refusing(demand).map(str::to_string));
    insufficient_within(demand, quota)
}

/// Pending for want of room, naming the workspace whose `quota` refused it, if one did.
fn insufficient_within(demand: &Resources, quota: Option<String>) -> Target {
    let what = match quota {
        Some(w) => format!("{} within the quota of workspace {w}", describe(demand)),
        None => describe(demand),
    };
    Target::Pending(Pending::InsufficientCapacity(what))
}

fn usable_owned(usable: &[&ClusterView]) -> Vec<ClusterView> {
    usable.iter().map(|c| (*c).clone()).collect()
}

/// What `demand` is, for messages.
fn describe(demand: &Resources) -> String {
    format!(
        "{} pod(s), {} CPU, {} MiB",
        demand.pods,
        demand.cpu,
        (demand.memory / (1024.0 * 1024.0)).ceil()
    )
}

/// A namespace on `home`: there alone when it fits. One that does not fit and is
/// `established` there (its workloads run there) spills: home keeps what fits and the
/// excess goes to the clusters with the most room. One that is not established yet goes
/// to another of `others` where it fits whole (the least loaded), or is Pending.
fn single(
    home: &ClusterView,
    others: &[ClusterView],
    current: &[ClusterName],
    demand: &Resources,
    established: bool,
) -> Target {
    let alone = Target::On {
        clusters: vec![home.name.clone()],
        mode: Mode::Single,
    };
    if home.fits(demand) || home.unbounded() {
        return alone;
    }
    if !established {
        let mut fitting: Vec<&ClusterView> = others
            .iter()
            .filter(|c| c.name != home.name && c.eligible() && c.fits(demand))
            .collect();
        fitting.sort_by(|a, b| a.load.cmp(&b.load).then(a.name.cmp(&b.name)));
        return match fitting.first() {
            Some(c) => Target::On {
                clusters: vec![c.name.clone()],
                mode: Mode::Single,
            },
            None => insufficient(demand, std::iter::once(home).chain(others)),
        };
    }
    // What fits on home; the rest goes where there is room (those it spills to already
    // first, then the most free pods).
    let room = |c: &ClusterView| {
        c.room(&Resources::default(), &per_pod(demand))
            .unwrap_or(i64::MAX)
    };
    let mut left = demand.pods as i64 - room(home);
    let mut more: Vec<&ClusterView> = others
        .iter()
        .filter(|c| c.name != home.name && c.eligible())
        .collect();
    more.sort_by(|a, b| {
        current
            .contains(&b.name)
            .cmp(&current.contains(&a.name))
            .then(room(b).cmp(&room(a)))
            .then(a.name.cmp(&b.name))
    });
    let mut clusters = vec![home.name.clone()];
    for c in more {
        if left <= 0 {
            break;
        }
        let r = room(c);
        if r > 0 {
            clusters.push(c.name.clone());
            left -= r;
        }
    }
    if left > 0 {
        // Not even spilling fits it: it keeps what it has.
        return insufficient(demand, std::iter::once(home).chain(others));
    }
    Target::On {
        clusters,
        mode: Mode::Spill,
    }
}

/// A cluster's weight in a spread: a workload's replicas split in proportion to the
/// clusters' `capacity.pods` (1 when unset).
pub fn spread_weight(c: &ClusterView) -> f64 {
    c.capacity.pods.unwrap_or(1.0)
}

/// What each of `clusters` (in this order) runs of `workloads` spread over them: its share
/// of those that split, all of the others.
pub fn spread_demand(workloads: &[Workload], clusters: &[&ClusterView]) -> Vec<Resources> {
    let weights: Vec<(ClusterName, f64)> = clusters
        .iter()
        .map(|c| (c.name.clone(), spread_weight(c)))
        .collect();
    let mut on = vec![Resources::default(); clusters.len()];
    for w in workloads {
        if w.splits {
            for (d, (_, n)) in on.iter_mut().zip(weighted_shares(w.pods, &weights)) {
                *d = *d + w.each * n as f64;
            }
        } else {
            for d in &mut on {
                *d = *d + w.each * w.pods as f64;
            }
        }
    }
    on
}

/// A spread over the `usable` clusters: those whose share fits beside what they have,
/// within capacity and every quota. Dropping one grows the others' shares, so clusters are
/// dropped until all that are left fit. Where an `established` namespace runs already
/// stays, as a single cluster's home does (it runs as scaled); with none left it is Pending.
fn spread(
    mut usable: Vec<&ClusterView>,
    current: &[ClusterName],
    demand: &Resources,
    workloads: &[Workload],
    established: bool,
) -> Target {
    // The order the shares are written in (the controller splits over the sorted names).
    usable.sort_by(|a, b| a.name.cmp(&b.name));
    let mut on = usable;
    let mut quota = None;
    loop {
        let shares = spread_demand(workloads, &on);
        let before = on.len();
        on = on
            .into_iter()
            .zip(shares)
            .filter(|(c, share)| {
                let stays = c.fits(share) || (established && current.contains(&c.name));
                if !stays && quota.is_none() {
                    quota = c.quota_refusing(share).map(str::to_string);
                }
                stays
            })
            .map(|(c, _)| c)
            .collect();
        if on.len() == before {
            break;
        }
    }
    if on.is_empty() {
        return insufficient_within(demand, quota);
    }
    Target::On {
        clusters: on.iter().map(|c| c.name.clone()).collect(),
        mode: Mode::Spread,
    }
}

/// The average pod of `demand`.
fn per_pod(demand: &Resources) -> Resources {
    if demand.pods <= 0.0 {
        return Resources::default();
    }
    *demand * (1.0 / demand.pods)
}

/// A namespace pinned to a draining cluster goes to the least loaded eligible one with
/// room.
fn away_from_draining(
    draining: &ClusterView,
    current: &[ClusterName],
    clusters: &[ClusterView],
    demand: &Resources,
    established: bool,
) -> Target {
    let mut usable: Vec<&ClusterView> = clusters.iter().filter(|c| c.eligible()).collect();
    if let Some(c) = usable.iter().find(|c| current.contains(&c.name)) {
        return single(c, clusters, current, demand, established);
    }
    usable.sort_by(|a, b| a.load.cmp(&b.load).then(a.name.cmp(&b.name)));
    match usable.iter().find(|c| c.fits(demand)) {
        Some(c) => Target::On {
            clusters: vec![c.name.clone()],
            mode: Mode::Single,
        },
        None if usable.is_empty() => {
            Target::Pending(Pending::ClusterUnschedulable(draining.name.to_string()))
        }
        None => insufficient(demand, usable.iter().copied()),
    }
}

/// Where a namespace is in its lifecycle after a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// It runs where it should.
    Placed,
    /// Nothing asks for it to run anywhere, and it runs nowhere.
    Unplaced,
    /// New clusters were added; the old ones stay until the new ones are available.
    Moving {
        from: Vec<ClusterName>,
        to: Vec<ClusterName>,
        /// What each new cluster not yet available waits for.
        waiting: Vec<(ClusterName, NotYet)>,
    },
    /// Traffic shifts off the old clusters (each with its weight now, 0 once draining).
    Shifting(Vec<(ClusterName, u32)>),
    /// The old clusters are held by soft finalizers.
    HeldBy(Vec<ClusterName>),
    /// A move failed (its new clusters answered worse) and was rolled back: the message
    /// has the figures.
    RolledBack(String),
    Pending(Pending),
}

/// Why a namespace is not yet available on a cluster it moves to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotYet {
    /// Its workloads there are not all running and available.
    Workloads,
    /// Its Services' endpoints there are not yet Ready in the MCS imports of these member
    /// clusters.
    Endpoints(Vec<ClusterName>),
    /// The data of these claims is still being copied there ([`crate::copy`]).
    Copying {
        from: ClusterName,
        /// Each claim with where its copy stands, or why it cannot be copied.
        claims: Vec<(String, String)>,
    },
}

/// The next set of clusters for a namespace now on `current` with target `target`;
/// `available(c)`: the namespace is available on `c` (or what it waits for there); `held`:
/// soft finalizers.
pub fn step(
    current: &[ClusterName],
    target: &Target,
    available: impl Fn(&ClusterName) -> Result<(), NotYet>,
    held: &BTreeSet<ClusterName>,
) -> (Vec<ClusterName>, Phase) {
    let wanted: Vec<ClusterName> = match target {
        Target::Pending(p) => return (current.to_vec(), Phase::Pending(p.clone())),
        Target::Unplaced => Vec::new(),
        Target::On { clusters, .. } => clusters.clone(),
    };
    let mut next: BTreeSet<ClusterName> = current.iter().cloned().collect();
    next.extend(wanted.iter().cloned());
    let extra: Vec<ClusterName> = current
        .iter()
        .filter(|c| !wanted.contains(c))
        .cloned()
        .collect();
    if extra.is_empty() {
        let phase = if wanted.is_empty() {
            Phase::Unplaced
        } else {
            Phase::Placed
        };
        return (next.into_iter().collect(), phase);
    }
    // Make before break: the old clusters go once every new one is available (an
    // unplaced namespace has nowhere to be available, and simply goes).
    let waiting: Vec<(ClusterName, NotYet)> = wanted
        .iter()
        .filter_map(|c| available(c).err().map(|w| (c.clone(), w)))
        .collect();
    if !waiting.is_empty() {
        return (
            next.into_iter().collect(),
            Phase::Moving {
                from: extra,
                to: wanted,
                waiting,
            },
        );
    }
    let kept: Vec<ClusterName> = extra.iter().filter(|c| held.contains(c)).cloned().collect();
    for c in extra.iter().filter(|c| !held.contains(c)) {
        next.remove(c);
    }
    let phase = if kept.is_empty() {
        if wanted.is_empty() {
            Phase::Unplaced
        } else {
            Phase::Placed
        }
    } else {
        Phase::HeldBy(kept)
    };
    (next.into_iter().collect(), phase)
}

/// Replica shares in proportion to `weights` (largest remainder; ties to the earlier
/// cluster). Equal weights give [`shares`].
pub fn weighted_shares(replicas: i64, weights: &[(ClusterName, f64)]) -> Vec<(ClusterName, i64)> {
    let total: f64 = weights.iter().map(|(_, w)| w.max(0.0)).sum();
    if weights.is_empty() || total <= 0.0 {
        let names: Vec<ClusterName> = weights.iter().map(|(c, _)| c.clone()).collect();
        return shares(replicas, &names);
    }
    let exact: Vec<f64> = weights
        .iter()
        .map(|(_, w)| replicas as f64 * w.max(0.0) / total)
        .collect();
    let mut out: Vec<i64> = exact.iter().map(|x| x.floor() as i64).collect();
    let mut left = replicas - out.iter().sum::<i64>();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by(|&a, &b| {
        (exact[b] - exact[b].floor())
            .partial_cmp(&(exact[a] - exact[a].floor()))
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.cmp(&b))
    });
    for i in order {
        if left <= 0 {
            break;
        }
        out[i] += 1;
        left -= 1;
    }
    weights
        .iter()
        .zip(out)
        .map(|((c, _), n)| (c.clone(), n))
        .collect()
}

/// Replica shares of a workload that spilled: the clusters in order, each taking what
/// fits of `replicas` pods of `each` (its `room` for them), the last taking the rest.
pub fn fill_shares(replicas: i64, room: &[(ClusterName, Option<i64>)]) -> Vec<(ClusterName, i64)> {
    let mut left = replicas;
    let n = room.len();
    room.iter()
        .enumerate()
        .map(|(i, (c, r))| {
            let take = if i + 1 == n {
                left
            } else {
                r.map_or(left, |r| r.clamp(0, left))
            };
            left -= take;
            (c.clone(), take)
        })
        .collect()
}

/// Replica shares of a spread workload with `replicas`, over `clusters` (sorted): as even
/// as possible, the first clusters taking the remainder.
pub fn shares(replicas: i64, clusters: &[ClusterName]) -> Vec<(ClusterName, i64)> {
    let n = clusters.len() as i64;
    if n == 0 {
        return Vec::new();
    }
    clusters
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let extra = i64::from((i as i64) < replicas.rem_euclid(n));
            (c.clone(), replicas.div_euclid(n) + extra)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    use super::*;

    fn name(s: &str) -> ClusterName {
        ClusterName::new(s)
    }

    fn cluster(n: &str, region: &str) -> ClusterView {
        ClusterView {
            name: name(n),
            labels: [("region".to_string(), region.to_string())].into(),
            ready: true,
            unschedulable: false,
            draining: false,
            load: 0,
            capacity: Limits::default(),
            used: Resources::default(),
            allowed: true,
            quotas: Vec::new(),
        }
    }

    /// `target` for a namespace of one workload that splits, requesting `demand`.
    fn place(
        labels: &BTreeMap<String, String>,
        current: &[ClusterName],
        clusters: &[ClusterView],
        policies: &[PolicyView],
        demand: &Resources,
        established: bool,
    ) -> Target {
        let one = Workload {
            pods: demand.pods as i64,
            each: per_pod(demand),
            splits: true,
        };
        target(
            labels,
            current,
            clusters,
            policies,
            demand,
            &[one],
            established,
        )
    }

    fn pods(n: f64) -> Resources {
        Resources {
            pods: n,
            ..Default::default()
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn policy(region: &str, mode: Mode) -> PolicyView {
        PolicyView {
            name: "p".into(),
            namespaces: Ok(Selector::default()),
            clusters: Selector::parse(&LabelSelector {
                match_labels: Some(labels(&[("region", region)])),
                match_expressions: None,
            }),
            mode,
            traffic_shift: Default::default(),
        }
    }

    fn on(cs: &[&str], mode: Mode) -> Target {
        Target::On {
            clusters: cs.iter().map(|c| name(c)).collect(),
            mode,
        }
    }

    #[test]
    fn the_break_glass_label_wins_over_placements() {
        let clusters = [cluster("east", "us"), cluster("west", "eu")];
        let ns = labels(&[("sluice.dev/cluster", "west")]);
        let t = place(
            &ns,
            &[],
            &clusters,
            &[policy("us", Mode::Single)],
            &pods(1.0),
            true,
        );
        assert_eq!(t, on(&["west"], Mode::Single));
        let ns = labels(&[("sluice.dev/cluster", "north")]);
        assert_eq!(
            place(&ns, &[], &clusters, &[], &pods(1.0), true),
            Target::Pending(Pending::ClusterNotFound("north".into()))
        );
    }

    #[test]
    fn placements_select_sticky_single_or_spread() {
        let mut clusters = vec![cluster("a", "eu"), cluster("b", "eu"), cluster("c", "us")];
        clusters[0].load = 3;
        let none = labels(&[]);
        assert_eq!(
            place(
                &none,
                &[],
                &clusters,
                &[policy("eu", Mode::Single)],
                &pods(1.0),
                true
            ),
            on(&["b"], Mode::Single),
            "the least loaded"
        );
        assert_eq!(
            place(
                &none,
                &[name("a")],
                &clusters,
                &[policy("eu", Mode::Single)],
                &pods(1.0),
                true
            ),
            on(&["a"], Mode::Single),
            "stays where it runs"
        );
        assert_eq!(
            place(
                &none,
                &[],
                &clusters,
                &[policy("eu", Mode::Spread)],
                &pods(1.0),
                true
            ),
            on(&["a", "b"], Mode::Spread)
        );
        assert_eq!(
            place(
                &none,
                &[],
                &clusters,
                &[policy("mars", Mode::Single)],
                &pods(1.0),
                true
            ),
            Target::Pending(Pending::NoClusterMatches("p".into()))
        );
        assert_eq!(
            place(&none, &[], &clusters, &[], &pods(1.0), true),
            Target::Unplaced
        );
    }

    #[test]
    fn cordoned_clusters_keep_what_they_have_and_draining_ones_lose_it() {
        let mut clusters = vec![cluster("a", "eu"), cluster("b", "eu")];
        clusters[0].unschedulable = true;
        let pinned = labels(&[("sluice.dev/cluster", "a")]);
        assert_eq!(
            place(&pinned, &[name("a")], &clusters, &[], &pods(1.0), true),
            on(&["a"], Mode::Single)
        );
        assert_eq!(
            place(&pinned, &[], &clusters, &[], &pods(1.0), true),
            Target::Pending(Pending::ClusterUnschedulable("a".into()))
        );
        assert_eq!(
            place(
                &labels(&[]),
                &[],
                &clusters,
                &[policy("eu", Mode::Single)],
                &pods(1.0),
                true
            ),
            on(&["b"], Mode::Single)
        );
        clusters[0].draining = true;
        assert_eq!(
            place(&pinned, &[name("a")], &clusters, &[], &pods(1.0), true),
            on(&["b"], Mode::Single),
            "a drain moves even a pinned namespace"
        );
        assert_eq!(
            place(
                &labels(&[]),
                &[name("a")],
                &clusters,
                &[policy("eu", Mode::Single)],
                &pods(1.0),
                true
            ),
            on(&["b"], Mode::Single)
        );
    }

    #[test]
    fn moves_make_before_break_and_wait_for_soft_finalizers() {
        let a = name("a");
        let b = name("b");
        let to_b = on(&["b"], Mode::Single);
        let none = BTreeSet::new();
        let (next, phase) = step(
            std::slice::from_ref(&a),
            &to_b,
            |_| Err(NotYet::Workloads),
            &none,
        );
        assert_eq!(next, vec![a.clone(), b.clone()]);
        assert!(matches!(phase, Phase::Moving { .. }));
        let (next, _) = step(&next, &to_b, |_| Err(NotYet::Workloads), &none);
        assert_eq!(next, vec![a.clone(), b.clone()], "waits for B");
        let unseen = |_: &ClusterName| Err(NotYet::Endpoints(vec![a.clone()]));
        let (same, phase) = step(&next, &to_b, unseen, &none);
        assert_eq!(
            same, next,
            "waits until B's endpoints are imported everywhere"
        );
        assert_eq!(
            phase,
            Phase::Moving {
                from: vec![a.clone()],
                to: vec![b.clone()],
                waiting: vec![(b.clone(), NotYet::Endpoints(vec![a.clone()]))],
            }
        );
        let held: BTreeSet<ClusterName> = [a.clone()].into();
        let (next2, phase) = step(&next, &to_b, |_| Ok(()), &held);
        assert_eq!(next2, vec![a.clone(), b.clone()]);
        assert_eq!(phase, Phase::HeldBy(vec![a.clone()]));
        let (next, phase) = step(&next, &to_b, |_| Ok(()), &none);
        assert_eq!(next, vec![b.clone()]);
        assert_eq!(phase, Phase::Placed);
        let pending = Target::Pending(Pending::ClusterNotFound("x".into()));
        assert_eq!(step(&next, &pending, |_| Ok(()), &none).0, vec![b.clone()]);
        assert_eq!(
            step(&next, &Target::Unplaced, |_| Err(NotYet::Workloads), &none),
            (vec![], Phase::Unplaced)
        );
    }

    #[test]
    fn capacity_sends_newcomers_where_they_fit_and_spills_what_outgrows_its_cluster() {
        let mut clusters = vec![cluster("a", "eu"), cluster("b", "eu")];
        clusters[0].capacity = Limits {
            pods: Some(4.0),
            ..Default::default()
        };
        clusters[1].capacity = Limits {
            pods: Some(10.0),
            ..Default::default()
        };
        clusters[0].used = pods(2.0);
        let none = labels(&[]);
        let p = [policy("eu", Mode::Single)];
        // A newcomer of 3 pods does not fit on a (2 of 4 used): b.
        assert_eq!(
            place(&none, &[], &clusters, &p, &pods(3.0), true),
            on(&["b"], Mode::Single)
        );
        // One of 12 fits nowhere.
        assert_eq!(
            place(&none, &[], &clusters, &p, &pods(12.0), true),
            Target::Pending(Pending::InsufficientCapacity(describe(&pods(12.0))))
        );
        // One on a that grew to 5 pods spills onto b.
        assert_eq!(
            place(&none, &[name("a")], &clusters, &p, &pods(5.0), true),
            on(&["a", "b"], Mode::Spill)
        );
        assert_eq!(
            fill_shares(5, &[(name("a"), Some(2)), (name("b"), Some(10))]),
            vec![(name("a"), 2), (name("b"), 3)]
        );
        assert_eq!(
            weighted_shares(6, &[(name("a"), 4.0), (name("b"), 8.0)]),
            vec![(name("a"), 2), (name("b"), 4)]
        );
    }

    #[test]
    fn a_workspace_runs_only_where_its_policy_lets_it_and_within_its_quota() {
        let mut clusters = vec![cluster("a", "eu"), cluster("b", "eu")];
        clusters[1].allowed = false;
        let none = labels(&[]);
        let p = [policy("eu", Mode::Single)];
        // Pinned to a cluster it may not use.
        assert_eq!(
            place(
                &labels(&[("sluice.dev/cluster", "b")]),
                &[],
                &clusters,
                &p,
                &pods(1.0),
                true
            ),
            Target::Pending(Pending::ClusterNotAllowed("b".into()))
        );
        // A Placement over both: only the allowed one, even when it is the busier.
        clusters[0].load = 5;
        assert_eq!(
            place(&none, &[], &clusters, &p, &pods(1.0), true),
            on(&["a"], Mode::Single)
        );
        // One a Placement put on b before b was excluded moves to a (make-before-break).
        assert_eq!(
            place(&none, &[name("b")], &clusters, &p, &pods(1.0), true),
            on(&["a"], Mode::Single)
        );
        // Spread too.
        assert_eq!(
            place(
                &none,
                &[],
                &clusters,
                &[policy("eu", Mode::Spread)],
                &pods(1.0),
                true
            ),
            on(&["a"], Mode::Spread)
        );
        // A drain never moves it onto a cluster it may not use: it waits where it is.
        clusters[0].draining = true;
        assert_eq!(
            place(
                &labels(&[("sluice.dev/cluster", "a")]),
                &[name("a")],
                &clusters,
                &[],
                &pods(1.0),
                true
            ),
            Target::Pending(Pending::ClusterUnschedulable("a".into()))
        );
        assert!(matches!(
            place(&none, &[name("a")], &clusters, &p, &pods(1.0), true),
            Target::Pending(Pending::NoClusterMatches(_))
        ));
        clusters[0].draining = false;
        // Nothing it may use matches its Placement.
        let only_b = [PolicyView {
            clusters: Selector::parse(&LabelSelector {
                match_labels: Some([("region".to_string(), "us".to_string())].into()),
                ..Default::default()
            }),
            ..policy("eu", Mode::Single)
        }];
        clusters[1].labels = [("region".to_string(), "us".to_string())].into();
        assert_eq!(
            place(&none, &[], &clusters, &only_b, &pods(1.0), true),
            Target::Pending(Pending::NoAllowedClusterMatches("p".into()))
        );
        // A quota of 4 pods, 3 used by its workspace: 2 more do not fit, 1 does; the
        // message names the workspace's quota, not the cluster.
        clusters[0].quotas = vec![Quota {
            workspace: "root:a".into(),
            limits: Limits {
                pods: Some(4.0),
                ..Default::default()
            },
            used: pods(3.0),
        }];
        assert_eq!(
            place(&none, &[], &clusters, &p, &pods(2.0), false),
            Target::Pending(Pending::InsufficientCapacity(format!(
                "{} within the quota of workspace root:a",
                describe(&pods(2.0))
            )))
        );
        assert_eq!(
            place(&none, &[], &clusters, &p, &pods(1.0), false),
            on(&["a"], Mode::Single)
        );
        // Room is the least of capacity and quotas.
        clusters[0].capacity = Limits {
            pods: Some(100.0),
            ..Default::default()
        };
        assert_eq!(clusters[0].room(&pods(0.0), &pods(1.0)), Some(1));
    }

    #[test]
    fn a_spread_goes_only_where_each_clusters_share_fits_its_capacity_and_quotas() {
        let bounded = |n: &str, used: f64| ClusterView {
            capacity: Limits {
                pods: Some(4.0),
                ..Default::default()
            },
            used: pods(used),
            ..cluster(n, "eu")
        };
        let clusters = vec![bounded("a", 0.0), bounded("b", 0.0), bounded("c", 3.0)];
        let none = labels(&[]);
        let p = [policy("eu", Mode::Spread)];
        // 6 pods: 2 each, which c (3 of 4 used) has no room for; without c, 3 each fit.
        assert_eq!(
            place(&none, &[], &clusters, &p, &pods(6.0), false),
            on(&["a", "b"], Mode::Spread)
        );
        // 9 pods: without c, 5 and 4, which a cannot hold; b alone cannot hold 9.
        assert_eq!(
            place(&none, &[], &clusters, &p, &pods(9.0), false),
            Target::Pending(Pending::InsufficientCapacity(describe(&pods(9.0))))
        );
        // Where it runs already it stays, as scaled.
        let all = [name("a"), name("b"), name("c")];
        assert_eq!(
            place(&none, &all, &clusters, &p, &pods(6.0), true),
            on(&["a", "b", "c"], Mode::Spread)
        );
        // A workload that does not split (a Job) runs whole on every cluster.
        let job = Workload {
            pods: 2,
            each: pods(1.0),
            splits: false,
        };
        assert_eq!(
            target(&none, &[], &clusters, &p, &pods(2.0), &[job], false),
            on(&["a", "b"], Mode::Spread)
        );
        // A quota of 1 pod on b: 4 pods (2 each) go to a alone; 6 fit nowhere, and the
        // message names the quota.
        let mut clusters = clusters[..2].to_vec();
        clusters[1].quotas = vec![Quota {
            workspace: "root:a".into(),
            limits: Limits {
                pods: Some(1.0),
                ..Default::default()
            },
            used: pods(0.0),
        }];
        assert_eq!(
            place(&none, &[], &clusters, &p, &pods(4.0), false),
            on(&["a"], Mode::Spread)
        );
        assert_eq!(
            place(&none, &[], &clusters, &p, &pods(6.0), false),
            Target::Pending(Pending::InsufficientCapacity(format!(
                "{} within the quota of workspace root:a",
                describe(&pods(6.0))
            )))
        );
        // Unbounded clusters take any share.
        let free = vec![cluster("a", "eu"), cluster("b", "eu")];
        assert_eq!(
            place(&none, &[], &free, &p, &pods(100.0), false),
            on(&["a", "b"], Mode::Spread)
        );
    }

    #[test]
    fn shares_add_up() {
        let cs = [name("a"), name("b"), name("c")];
        assert_eq!(
            shares(5, &cs).iter().map(|(_, n)| *n).collect::<Vec<_>>(),
            vec![2, 2, 1]
        );
        assert_eq!(shares(0, &cs).iter().map(|(_, n)| n).sum::<i64>(), 0);
        assert!(shares(3, &[]).is_empty());
    }
}
