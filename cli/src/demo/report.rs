//! The demo's report: per phase, requests, failures, p50/p99 latency and duration; the
//! streams; and when the moved app's traffic was all on its new cluster.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::json;

use super::traffic::{Record, quantile};

/// One phase's figures.
#[derive(Debug)]
pub struct PhaseFigures {
    pub name: String,
    pub seconds: f64,
    pub requests: u64,
    pub failed: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// The phases' figures: the requests answered while each ran.
pub fn phases(record: &Record) -> Vec<PhaseFigures> {
    record
        .phases
        .iter()
        .map(|p| {
            let mut lat = p.latencies.clone();
            PhaseFigures {
                name: p.name.clone(),
                seconds: p
                    .end
                    .unwrap_or(p.start)
                    .saturating_sub(p.start)
                    .as_secs_f64(),
                requests: p.ok + p.failed,
                failed: p.failed,
                p50_ms: quantile(&mut lat, 0.5),
                p99_ms: quantile(&mut lat, 0.99),
            }
        })
        .collect()
}

/// Seconds from `from` until every answer of `app` came from `cluster`, for good.
pub fn all_on(record: &Record, app: &str, cluster: &str, from: Duration) -> Option<f64> {
    let first = from.as_secs() as usize;
    let mut since: Option<usize> = None;
    for (i, s) in record.seconds.iter().enumerate().skip(first) {
        match s.share(app, cluster) {
            Some(x) if x >= 1.0 => {
                since.get_or_insert(i);
            }
            Some(_) => since = None,
            None => {}
        }
    }
    since.map(|i| (i as f64 - from.as_secs_f64()).max(0.0))
}

/// The report as a table (for the terminal).
pub fn table(figures: &[PhaseFigures], record: &Record) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<22} {:>8} {:>9} {:>7} {:>8} {:>8}",
        "phase", "seconds", "requests", "failed", "p50 ms", "p99 ms"
    );
    for f in figures {
        let _ = writeln!(
            out,
            "{:<22} {:>8.1} {:>9} {:>7} {:>8.2} {:>8.2}",
            f.name, f.seconds, f.requests, f.failed, f.p50_ms, f.p99_ms
        );
    }
    let (requests, failed): (u64, u64) = figures
        .iter()
        .fold((0, 0), |(r, f), p| (r + p.requests, f + p.failed));
    let _ = writeln!(
        out,
        "{:<22} {:>8} {:>9} {:>7}",
        "total", "", requests, failed
    );
    for (kind, s) in &record.streams {
        let _ = writeln!(
            out,
            "{} streams: {} opened, {} round trips, {} broken",
            kind.label(),
            s.opened,
            s.round_trips,
            s.broken
        );
    }
    for (reason, n) in &record.failures {
        let _ = writeln!(out, "  failed: {n} × {reason}");
    }
    for (kind, s) in &record.streams {
        for (reason, n) in &s.reasons {
            let _ = writeln!(out, "  broken: {n} × {} stream: {reason}", kind.label());
        }
    }
    out
}

/// The report as JSON (written next to the plot).
pub fn json(
    figures: &[PhaseFigures],
    record: &Record,
    extra: serde_json::Value,
) -> serde_json::Value {
    json!({
        "phases": figures.iter().map(|f| json!({
            "name": f.name, "seconds": f.seconds, "requests": f.requests, "failed": f.failed,
            "p50Ms": f.p50_ms, "p99Ms": f.p99_ms,
        })).collect::<Vec<_>>(),
        "requests": figures.iter().map(|f| f.requests).sum::<u64>(),
        "failed": figures.iter().map(|f| f.failed).sum::<u64>(),
        "failures": record.failures,
        "streams": record.streams.iter().map(|(kind, s)| (kind.label().to_string(), json!({
            "opened": s.opened,
            "roundTrips": s.round_trips,
            "broken": s.broken,
            "reasons": s.reasons,
        }))).collect::<serde_json::Map<_, _>>(),
        "brokenStreams": record.broken_streams(),
        "facts": extra,
    })
}

#[cfg(test)]
mod tests {
    use super::super::traffic::{PhaseSpan, Second};
    use super::*;

    fn second(phase: &str, east: u64, west: u64) -> Second {
        let mut s = Second {
            phase: phase.into(),
            ok: east + west,
            latencies: vec![1000; (east + west) as usize],
            ..Default::default()
        };
        s.answered.insert(("shop".into(), "east".into()), east);
        s.answered.insert(("shop".into(), "west".into()), west);
        s
    }

    #[test]
    fn phases_sum_their_seconds_and_the_move_ends_when_all_traffic_stays_on_the_new_cluster() {
        let record = Record {
            seconds: vec![
                second("steady", 10, 0),
                second("move", 10, 0),
                second("move", 5, 5),
                second("move", 0, 10),
                second("move", 1, 9),
                second("move", 0, 10),
                second("after", 0, 10),
            ],
            phases: vec![
                PhaseSpan {
                    name: "steady".into(),
                    start: Duration::ZERO,
                    end: Some(Duration::from_secs(1)),
                    ok: 10,
                    latencies: vec![1000; 10],
                    ..Default::default()
                },
                PhaseSpan {
                    name: "move".into(),
                    start: Duration::from_secs(1),
                    end: Some(Duration::from_secs(6)),
                    ok: 49,
                    failed: 1,
                    latencies: vec![2000; 49],
                },
            ],
            ..Default::default()
        };
        let f = phases(&record);
        assert_eq!((f[1].requests, f[1].failed), (50, 1));
        assert_eq!(f[1].seconds, 5.0);
        assert_eq!((f[0].p99_ms, f[1].p50_ms), (1.0, 2.0));
        // East answered again at second 4: 100 % on west for good from second 5.
        assert_eq!(
            all_on(&record, "shop", "west", Duration::from_secs(1)),
            Some(4.0)
        );
        assert_eq!(
            all_on(&record, "shop", "north", Duration::from_secs(1)),
            None
        );
        let t = table(&f, &record);
        assert!(t.contains("total"), "{t}");
    }
}
