//! Automatic rollback of a move: while traffic shifts off the old clusters, every member's
//! dataplane reports how each source cluster answered it lately (requests, errors, p99;
//! carried in the import reports). If the new clusters answer worse than the old ones
//! beyond the Placement's bounds, the move fails: the verdict is written on the namespace
//! (`moves.sluice.dev/failed`), traffic shifts back, the old clusters stay and the new ones
//! go, until the namespace's target changes again.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sluice_api::ClusterName;
use sluice_api::sluice::Rollback;

use crate::imports::{Member, id_of, report_of};

/// Annotation on the upstream namespace holding a failed move's [`Verdict`] (JSON).
pub const FAILED_ANNOTATION: &str = "moves.sluice.dev/failed";

/// Extra p99 latency the new clusters may always have: below it, latency is noise.
const P99_SLACK_MICROS: u64 = 50_000;

/// How a set of clusters answered, summed over every member's report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Figures {
    pub requests: u64,
    pub errors: u64,
    /// The highest p99 any member saw, in microseconds.
    pub p99_micros: u64,
}

impl Figures {
    fn error_percent(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.errors as f64 * 100.0 / self.requests as f64
        }
    }
}

/// A failed move: where it was going, where it came from, and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    pub to: Vec<String>,
    pub from: Vec<String>,
    pub new: Figures,
    pub old: Figures,
    pub message: String,
}

impl Verdict {
    /// The clusters the failed move was going to.
    pub fn to(&self) -> Vec<ClusterName> {
        self.to.iter().map(ClusterName::new).collect()
    }

    /// The clusters it came from, where the namespace stays.
    pub fn from(&self) -> Vec<ClusterName> {
        self.from.iter().map(ClusterName::new).collect()
    }

    /// The verdict on a namespace, from its `annotations`.
    pub fn of(annotations: &BTreeMap<String, String>) -> Option<Verdict> {
        serde_json::from_str(annotations.get(FAILED_ANNOTATION)?).ok()
    }
}

/// How `clusters` answered the members, by the reports in `annotations`.
pub fn figures_of(
    clusters: &[ClusterName],
    members: &[Member],
    annotations: &BTreeMap<String, String>,
) -> Figures {
    let mut f = Figures::default();
    let ids: Vec<&str> = clusters.iter().filter_map(|c| id_of(c, members)).collect();
    for m in members {
        for sources in report_of(m, annotations).values() {
            for (id, s) in sources {
                let Some(h) = s.health.filter(|_| ids.contains(&id.as_str())) else {
                    continue;
                };
                f.requests += h.requests;
                f.errors += h.errors;
                f.p99_micros = f.p99_micros.max(h.p99_micros);
            }
        }
    }
    f
}

/// Whether the move from `old` to `new` fails, by the members' reports and `policy`.
pub fn judge(
    new: &[ClusterName],
    old: &[ClusterName],
    members: &[Member],
    annotations: &BTreeMap<String, String>,
    policy: &Rollback,
) -> Option<Verdict> {
    if !policy.enabled() || new.is_empty() || old.is_empty() {
        return None;
    }
    let n = figures_of(new, members, annotations);
    let o = figures_of(old, members, annotations);
    let min = u64::from(policy.min_requests());
    if n.requests < min {
        return None;
    }
    // Without enough of the old clusters' answers to compare with, the new ones are held
    // to no errors beyond the bound.
    let baseline = o.requests >= min;
    let old_rate = if baseline { o.error_percent() } else { 0.0 };
    let bound = f64::from(policy.max_error_rate_increase_percent());
    let join = |cs: &[ClusterName]| {
        cs.iter()
            .map(ClusterName::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let ms = |us: u64| us as f64 / 1000.0;
    let why = if n.error_percent() > old_rate + bound {
        Some(format!(
            "its error rate exceeded {}'s by more than {bound} points",
            join(old)
        ))
    } else if baseline
        && n.p99_micros
            > o.p99_micros
                .saturating_mul(u64::from(policy.max_p99_factor()))
        && n.p99_micros > o.p99_micros + P99_SLACK_MICROS
    {
        Some(format!(
            "its p99 exceeded {} times {}'s",
            policy.max_p99_factor(),
            join(old)
        ))
    } else {
        None
    }?;
    let message = format!(
        "the move to {} was rolled back: {why} ({}: {:.1} % errors of {} requests, p99 {:.1} ms; {}: {:.1} % of {}, p99 {:.1} ms); change the namespace's target to try again",
        join(new),
        join(new),
        n.error_percent(),
        n.requests,
        ms(n.p99_micros),
        join(old),
        o.error_percent(),
        o.requests,
        ms(o.p99_micros),
    );
    Some(Verdict {
        to: new.iter().map(ToString::to_string).collect(),
        from: old.iter().map(ToString::to_string).collect(),
        new: n,
        old: o,
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn name(n: &str) -> ClusterName {
        ClusterName::new(n)
    }

    fn members() -> Vec<Member> {
        ["east", "west"]
            .iter()
            .map(|n| Member {
                name: name(n),
                id: n.to_string(),
            })
            .collect()
    }

    fn reports(east: (u64, u64, u64), west: (u64, u64, u64)) -> BTreeMap<String, String> {
        let h = |(requests, errors, p99): (u64, u64, u64)| json!({"ready": 2, "health": {"requests": requests, "errors": errors, "p99Micros": p99}});
        // Both members saw the same; the figures add up.
        let report = json!({"web": {"east": h(east), "west": h(west)}}).to_string();
        BTreeMap::from([
            ("imports.sluice.dev/east".to_string(), report.clone()),
            ("imports.sluice.dev/west".to_string(), report),
        ])
    }

    #[test]
    fn a_new_cluster_answering_worse_fails_the_move_with_its_figures() {
        let (east, west) = (vec![name("east")], vec![name("west")]);
        let policy = Rollback::default();
        // 5 % errors on west against none on east.
        let a = reports((400, 0, 1_000), (200, 10, 1_200));
        let v = judge(&west, &east, &members(), &a, &policy).expect("rolled back");
        assert_eq!(v.new.requests, 400);
        assert_eq!(v.new.errors, 20);
        assert_eq!(v.old.requests, 800);
        assert!(
            v.message.contains("west: 5.0 % errors of 400 requests"),
            "{}",
            v.message
        );
        let back: Verdict = serde_json::from_str(&serde_json::to_string(&v).unwrap()).unwrap();
        assert_eq!(back, v);
        // 1 % more errors is within the default bound; too few answers are not judged.
        let a = reports((400, 4, 1_000), (200, 3, 1_200));
        assert_eq!(judge(&west, &east, &members(), &a, &policy), None);
        let a = reports((400, 0, 1_000), (20, 10, 1_200));
        assert_eq!(judge(&west, &east, &members(), &a, &policy), None);
        // Latency: 20× slower and 60 ms more fails; 20× of a sub-millisecond p99 does not.
        let a = reports((400, 0, 3_000), (200, 0, 63_000));
        assert!(judge(&west, &east, &members(), &a, &policy).is_some());
        let a = reports((400, 0, 300), (200, 0, 6_000));
        assert_eq!(judge(&west, &east, &members(), &a, &policy), None);
        // Turned off.
        let off = Rollback {
            enabled: Some(false),
            ..Default::default()
        };
        let a = reports((400, 0, 1_000), (200, 10, 1_200));
        assert_eq!(judge(&west, &east, &members(), &a, &off), None);
    }
}
