//! Each Service's traffic share and p99 per second, from the dataplanes' own counts: the
//! Prometheus text their `/metrics` serve (`sluice_proxy_requests_total` and
//! `sluice_proxy_request_duration_seconds_bucket`, by `service` and source `cluster`),
//! read once a second from every dataplane a `Cluster` lists, and turned into per-second
//! differences summed over the dataplanes. No IO here: [`Scrape::parse`] takes the text.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::Serialize;

const REQUESTS: &str = "sluice_proxy_requests_total";
const BUCKETS: &str = "sluice_proxy_request_duration_seconds_bucket";

/// The longest label value kept: a dataplane is trusted, but its text is still input.
const MAX_LABEL: usize = 512;

/// Seconds of history kept per Service.
pub const HISTORY: usize = 90;

/// One dataplane's counters at one moment, by (service, source cluster).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scrape {
    pub requests: HashMap<(String, String), f64>,
    /// Cumulative histogram buckets: upper bound in seconds → count.
    pub buckets: HashMap<(String, String), Vec<(f64, f64)>>,
}

impl Scrape {
    /// Read the two series out of Prometheus (or OpenMetrics) text; other lines are
    /// skipped, malformed ones too.
    pub fn parse(text: &str) -> Self {
        let mut s = Scrape::default();
        for line in text.lines() {
            if line.starts_with('#') {
                continue;
            }
            let Some((name, labels, value)) = sample(line) else {
                continue;
            };
            let (Some(service), Some(cluster)) = (labels.get("service"), labels.get("cluster"))
            else {
                continue;
            };
            let key = (service_of(service), cluster.clone());
            match name {
                REQUESTS => *s.requests.entry(key).or_default() += value,
                BUCKETS => {
                    let le = match labels.get("le").map(String::as_str) {
                        Some("+Inf") => f64::INFINITY,
                        Some(v) => match v.parse() {
                            Ok(v) => v,
                            Err(_) => continue,
                        },
                        None => continue,
                    };
                    s.buckets.entry(key).or_default().push((le, value));
                }
                _ => {}
            }
        }
        for b in s.buckets.values_mut() {
            b.sort_by(|a, b| a.0.total_cmp(&b.0));
            // Several listeners of one Service: one bucket per bound, summed.
            b.dedup_by(|later, kept| {
                if later.0 == kept.0 {
                    kept.1 += later.1;
                    true
                } else {
                    false
                }
            });
        }
        s
    }
}

/// The Service a dataplane's `service` label names: the label is the listener's name,
/// `<namespace>/<name>:<port>` with ` (clusterset)` for a ServiceImport's VIP; every port
/// and both addresses of one Service count as the Service.
fn service_of(label: &str) -> String {
    match label.split_once('/') {
        Some((ns, rest)) => {
            let name = rest.split([':', ' ']).next().unwrap_or(rest);
            format!("{ns}/{name}")
        }
        None => label.to_string(),
    }
}

/// `name{k="v",...} value` → its parts; `None` for anything else.
fn sample(line: &str) -> Option<(&str, HashMap<String, String>, f64)> {
    let open = line.find('{')?;
    let close = line.rfind('}')?;
    if close < open {
        return None;
    }
    let name = &line[..open];
    let value = line[close + 1..].split_whitespace().next()?.parse().ok()?;
    let mut labels = HashMap::new();
    let mut rest = &line[open + 1..close];
    while !rest.is_empty() {
        let eq = rest.find("=\"")?;
        let key = rest[..eq].trim_start_matches(',').trim();
        let mut value = String::new();
        let mut chars = rest[eq + 2..].char_indices();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => return None,
                },
                '"' => {
                    end = Some(eq + 2 + i + 1);
                    break;
                }
                c => value.push(c),
            }
            if value.len() > MAX_LABEL {
                return None;
            }
        }
        labels.insert(key.to_string(), value);
        rest = &rest[end?..];
    }
    Some((name, labels, value))
}

/// One second of one source cluster's answers to one Service.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Second {
    /// Requests (L7) or connections (L4) in that second.
    pub requests: f64,
    /// The 99th percentile's bucket bound, in milliseconds; `None` without answers.
    pub p99_ms: Option<f64>,
}

/// A Service's last [`HISTORY`] seconds: per second, each source cluster's part.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Series {
    /// Oldest first: (unix seconds, source cluster → its second).
    pub seconds: VecDeque<(u64, BTreeMap<String, Second>)>,
}

/// One second's requests and cumulative latency buckets (bound in seconds → count) of one
/// source cluster, summed over the dataplanes.
type Counted = (f64, Vec<(f64, f64)>);

/// The traffic history of every Service the dataplanes count, by their `service` label
/// (`<downstream namespace>/<name>`).
#[derive(Default)]
pub struct Traffic {
    /// The last scrape of each dataplane (by its URL).
    last: HashMap<String, Scrape>,
    pub services: BTreeMap<String, Series>,
}

impl Traffic {
    /// Fold one round of scrapes (one per dataplane URL; `None`: it did not answer) taken
    /// at unix second `at` into the history.
    pub fn record(&mut self, at: u64, scrapes: Vec<(String, Option<Scrape>)>) {
        let mut now: BTreeMap<String, BTreeMap<String, Counted>> = BTreeMap::new();
        let mut seen = Vec::new();
        for (url, scrape) in scrapes {
            let Some(scrape) = scrape else { continue };
            seen.push(url.clone());
            if let Some(before) = self.last.get(&url) {
                for ((service, cluster), n) in &scrape.requests {
                    let key = (service.clone(), cluster.clone());
                    // A restarted dataplane starts from 0: count what it has.
                    let d = match before.requests.get(&key) {
                        Some(b) if *b <= *n => n - b,
                        _ => *n,
                    };
                    let slot = now
                        .entry(service.clone())
                        .or_default()
                        .entry(cluster.clone())
                        .or_default();
                    slot.0 += d;
                    if let Some(b) = scrape.buckets.get(&key) {
                        let prev = before.buckets.get(&key);
                        add_buckets(&mut slot.1, b, prev);
                    }
                }
            }
            self.last.insert(url, scrape);
        }
        self.last.retain(|u, _| seen.contains(u));
        for (service, clusters) in now {
            let second: BTreeMap<String, Second> = clusters
                .into_iter()
                .map(|(c, (requests, buckets))| {
                    (
                        c,
                        Second {
                            requests,
                            p99_ms: p99(&buckets).map(|s| s * 1000.0),
                        },
                    )
                })
                .collect();
            let series = self.services.entry(service).or_default();
            series.seconds.push_back((at, second));
        }
        for series in self.services.values_mut() {
            while series
                .seconds
                .front()
                .is_some_and(|(t, _)| at.saturating_sub(*t) >= HISTORY as u64)
            {
                series.seconds.pop_front();
            }
        }
        self.services.retain(|_, s| !s.seconds.is_empty());
    }
}

/// Add `now - before` (bucket by bucket, same bounds) into `into`.
fn add_buckets(into: &mut Vec<(f64, f64)>, now: &[(f64, f64)], before: Option<&Vec<(f64, f64)>>) {
    for (i, (le, n)) in now.iter().enumerate() {
        let b = before
            .and_then(|b| b.get(i))
            .filter(|(ble, bn)| ble == le && bn <= n)
            .map_or(0.0, |(_, bn)| *bn);
        match into.get_mut(i) {
            Some(slot) if slot.0 == *le => slot.1 += n - b,
            _ => into.push((*le, n - b)),
        }
    }
}

/// The smallest bucket bound under which 99% of the counted answers fall (cumulative
/// buckets); `None` when there are none; the last finite bound for the `+Inf` bucket.
fn p99(buckets: &[(f64, f64)]) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let mut last_finite = None;
    for (le, n) in buckets {
        if le.is_finite() {
            last_finite = Some(*le);
        }
        if *n >= total * 0.99 {
            return if le.is_finite() {
                Some(*le)
            } else {
                last_finite
            };
        }
    }
    last_finite
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(east: u64, west: u64, slow: u64) -> String {
        format!(
            "# TYPE sluice_proxy_requests counter\n\
             sluice_proxy_requests_total{{service=\"shop-ab/web\",cluster=\"east\"}} {east}\n\
             sluice_proxy_requests_total{{service=\"shop-ab/web\",cluster=\"west\"}} {west}\n\
             sluice_proxy_request_duration_seconds_bucket{{le=\"0.001\",service=\"shop-ab/web\",cluster=\"east\"}} {}\n\
             sluice_proxy_request_duration_seconds_bucket{{le=\"0.1\",service=\"shop-ab/web\",cluster=\"east\"}} {east}\n\
             sluice_proxy_request_duration_seconds_bucket{{le=\"+Inf\",service=\"shop-ab/web\",cluster=\"east\"}} {east}\n\
             sluice_proxy_busy_poll_seconds_total 0.5\n",
            east - slow
        )
    }

    #[test]
    fn parses_the_two_series_and_skips_the_rest() {
        let s = Scrape::parse(&text(100, 20, 3));
        let key = ("shop-ab/web".to_string(), "east".to_string());
        assert_eq!(s.requests.get(&key), Some(&100.0));
        assert_eq!(s.buckets[&key].len(), 3);
        assert_eq!(s.buckets[&key][0], (0.001, 97.0));
        assert!(s.buckets[&key][2].0.is_infinite());
        assert!(
            Scrape::parse("garbage{\nx{a=\"b} 1\n{}{} nan")
                .requests
                .is_empty()
        );
        // Listeners of one Service (ports, its clusterset VIP) count as the Service.
        let both = Scrape::parse(
            "sluice_proxy_requests_total{service=\"ns-x/web:http (clusterset)\",cluster=\"east\"} 4\n\
             sluice_proxy_requests_total{service=\"ns-x/web:grpc\",cluster=\"east\"} 3\n",
        );
        assert_eq!(
            both.requests.get(&("ns-x/web".into(), "east".into())),
            Some(&7.0)
        );
        let escaped =
            Scrape::parse("sluice_proxy_requests_total{service=\"a\\\"b/c\",cluster=\"e\"} 4\n");
        assert_eq!(
            escaped.requests.get(&("a\"b/c".into(), "e".into())),
            Some(&4.0)
        );
    }

    #[test]
    fn seconds_are_differences_summed_over_dataplanes_with_a_p99() {
        let mut t = Traffic::default();
        t.record(
            10,
            vec![
                ("a".into(), Some(Scrape::parse(&text(100, 0, 0)))),
                ("b".into(), Some(Scrape::parse(&text(50, 0, 0)))),
            ],
        );
        assert!(t.services.is_empty(), "the first scrape is a baseline");
        t.record(
            11,
            vec![
                ("a".into(), Some(Scrape::parse(&text(180, 20, 10)))),
                ("b".into(), Some(Scrape::parse(&text(70, 0, 0)))),
            ],
        );
        let (at, second) = &t.services["shop-ab/web"].seconds[0];
        assert_eq!(*at, 11);
        assert_eq!(second["east"].requests, 100.0);
        assert_eq!(second["west"].requests, 20.0);
        // 10 of 100 answers slower than 1 ms: the p99 is the 100 ms bucket.
        assert_eq!(second["east"].p99_ms, Some(100.0));
        assert_eq!(second["west"].p99_ms, None);
        // A dataplane restarted (counters back near 0) counts what it has.
        t.record(12, vec![("a".into(), Some(Scrape::parse(&text(5, 0, 0))))]);
        assert_eq!(t.services["shop-ab/web"].seconds[1].1["east"].requests, 5.0);
        // History is bounded.
        for i in 0..200 {
            t.record(
                13 + i,
                vec![("a".into(), Some(Scrape::parse(&text(5, 0, 0))))],
            );
        }
        assert!(t.services["shop-ab/web"].seconds.len() <= HISTORY);
    }

    #[test]
    fn p99_is_the_bucket_bound() {
        assert_eq!(p99(&[]), None);
        assert_eq!(p99(&[(0.001, 0.0), (f64::INFINITY, 0.0)]), None);
        assert_eq!(p99(&[(0.001, 99.0), (0.01, 100.0)]), Some(0.001));
        assert_eq!(p99(&[(0.001, 50.0), (f64::INFINITY, 100.0)]), Some(0.001));
    }
}
