//! The drain gate's evidence, from the data plane itself: the live connections and
//! in-flight requests this dataplane holds to the endpoints of source clusters that drain
//! as a whole, written on each namespace as `traffic.sluice.dev/active` (a
//! [`TrafficReport`]: `{"web": {"east": 3}}`, zeros included — "drained here" — and absent
//! when nothing drains). The cluster's syncer carries it into the namespace's import report
//! upstream, and a move removes its old cluster only once every member reports zero.
//!
//! While a traffic shift is under way for a Service (some source's weight is not the
//! default), it also reports how each source answered over the last [`WINDOW`]
//! (`traffic.sluice.dev/health`: requests, errors, p99), so that a move whose new cluster
//! answers worse than the old one is rolled back.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client};
use sluice_api::ServiceKey;
use sluice_api::sync::{
    HEALTH_ANNOTATION, HealthReport, SourceHealth, TRAFFIC_ANNOTATION, TrafficReport,
};
use tokio::sync::watch;

use crate::balance::outcomes::Tally;
use crate::proxy::Proxy;

/// How often the counts are read (and written where they changed).
pub const REPORT_EVERY: Duration = Duration::from_millis(500);

/// The window a health report covers.
pub const WINDOW: Duration = Duration::from_secs(10);

/// A health report is rewritten at most this often.
const HEALTH_EVERY: Duration = Duration::from_secs(1);

/// Which service (Service, ServiceImport: one key) each running listener belongs to, by
/// listener name, and whether a traffic shift is under way for it; kept by the cluster
/// mode's loop as it builds listeners.
#[derive(Clone, Default)]
pub struct Listeners(Arc<RwLock<HashMap<String, (ServiceKey, bool)>>>);

impl Listeners {
    /// Service `key` now has listeners named `names` (none: it has no listener any more),
    /// `shifting` or not.
    pub fn set<'a>(
        &self,
        key: &ServiceKey,
        old: impl IntoIterator<Item = &'a str>,
        names: impl IntoIterator<Item = &'a str>,
        shifting: bool,
    ) {
        let mut m = self.0.write().unwrap_or_else(|p| p.into_inner());
        for n in old {
            if m.get(n).is_some_and(|(k, _)| k == key) {
                m.remove(n);
            }
        }
        for n in names {
            m.insert(n.to_string(), (key.clone(), shifting));
        }
    }

    fn shifting(&self, name: &str) -> bool {
        let m = self.0.read().unwrap_or_else(|p| p.into_inner());
        m.get(name).is_some_and(|(_, s)| *s)
    }

    /// Forget every listener (the loop rebuilds them all).
    pub fn clear(&self) {
        self.0.write().unwrap_or_else(|p| p.into_inner()).clear();
    }

    fn key_of(&self, name: &str) -> Option<ServiceKey> {
        let m = self.0.read().unwrap_or_else(|p| p.into_inner());
        m.get(name).map(|(k, _)| k.clone())
    }
}

/// `active` (listener name, source cluster, count) folded into a report per namespace:
/// the ports of a Service add up.
pub fn by_namespace(
    active: &[(String, String, u64)],
    listeners: &Listeners,
) -> BTreeMap<String, TrafficReport> {
    let mut out: BTreeMap<String, TrafficReport> = BTreeMap::new();
    for (listener, source, n) in active {
        let Some(key) = listeners.key_of(listener) else {
            continue;
        };
        *out.entry(key.namespace)
            .or_default()
            .entry(key.name)
            .or_default()
            .entry(source.clone())
            .or_default() += n;
    }
    out
}

/// Snapshots of the shifting listeners' tallies by (listener, source cluster), over the
/// last [`WINDOW`].
#[derive(Default)]
pub struct Windows(VecDeque<(Instant, Snapshot)>);

/// The shifting listeners' tallies at one moment, by (listener, source cluster).
type Snapshot = HashMap<(String, String), Tally>;

impl Windows {
    /// Add the snapshot taken `now`; what happened since the oldest one kept, folded per
    /// namespace, Service and source (only sources with attempts; a listener seen for the
    /// first time reports from its next snapshot on).
    pub fn record(
        &mut self,
        now: Instant,
        tallies: Vec<(String, String, Tally)>,
        listeners: &Listeners,
    ) -> BTreeMap<String, HealthReport> {
        let snapshot: HashMap<(String, String), Tally> =
            tallies.into_iter().map(|(l, c, t)| ((l, c), t)).collect();
        while self.0.len() > 1 && self.0.get(1).is_some_and(|(t, _)| now - *t >= WINDOW) {
            self.0.pop_front();
        }
        let mut sums: BTreeMap<(String, String, String), Tally> = BTreeMap::new();
        for ((listener, source), t) in &snapshot {
            let k = (listener.clone(), source.clone());
            // The oldest snapshot that has it: a source that came during the window (the
            // new cluster of a move) counts from when it came.
            let (Some(base), Some(key)) = (
                self.0.iter().find_map(|(_, s)| s.get(&k)),
                listeners.key_of(listener),
            ) else {
                continue;
            };
            sums.entry((key.namespace, key.name, source.clone()))
                .or_default()
                .add(&t.since(base));
        }
        self.0.push_back((now, snapshot));
        let mut out: BTreeMap<String, HealthReport> = BTreeMap::new();
        for ((ns, svc, source), t) in sums.into_iter().filter(|(_, t)| t.attempts > 0) {
            out.entry(ns).or_default().entry(svc).or_default().insert(
                source,
                SourceHealth {
                    requests: t.attempts,
                    errors: t.errors,
                    p99_micros: t.p99_micros(),
                },
            );
        }
        out
    }
}

/// Write this dataplane's traffic to draining sources on the namespaces, where it changed,
/// every [`REPORT_EVERY`] until `stop`. Starts from what the namespaces say (a previous run's
/// report is corrected, not trusted).
pub async fn report_forever(
    client: Client,
    proxy: Arc<Proxy>,
    listeners: Listeners,
    mut stop: watch::Receiver<bool>,
) {
    let api: Api<Namespace> = Api::all(client);
    // Per namespace, the values last written: traffic, health, and when health was.
    let mut written: BTreeMap<String, (Option<String>, Option<String>)> = BTreeMap::new();
    let mut health_at: HashMap<String, Instant> = HashMap::new();
    let mut windows = Windows::default();
    let mut listed = false;
    let mut tick = tokio::time::interval(REPORT_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tick.tick() => {}
        }
        if !listed {
            match api.list(&ListParams::default()).await {
                Ok(list) => {
                    for ns in list.items {
                        let a = ns.metadata.annotations.as_ref();
                        let value = |k: &str| a.and_then(|a| a.get(k)).cloned();
                        let w = (value(TRAFFIC_ANNOTATION), value(HEALTH_ANNOTATION));
                        if let (Some(name), true) = (ns.metadata.name.clone(), w != (None, None)) {
                            written.insert(name, w);
                        }
                    }
                    listed = true;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "listing namespaces for the traffic report");
                    continue;
                }
            }
        }
        let traffic: BTreeMap<String, String> = by_namespace(&proxy.draining_active(), &listeners)
            .into_iter()
            .filter_map(|(ns, r)| Some((ns, json(&r)?)))
            .collect();
        let now = Instant::now();
        let health: BTreeMap<String, String> = windows
            .record(now, proxy.tallies(&|l| listeners.shifting(l)), &listeners)
            .into_iter()
            .filter_map(|(ns, r)| Some((ns, json(&r)?)))
            .collect();
        let namespaces: std::collections::BTreeSet<String> = written
            .keys()
            .chain(traffic.keys())
            .chain(health.keys())
            .cloned()
            .collect();
        for ns in namespaces {
            let have = written.get(&ns).cloned().unwrap_or_default();
            let mut want = (traffic.get(&ns).cloned(), health.get(&ns).cloned());
            // Health changes with every request: rewritten at most every HEALTH_EVERY.
            if want.1.is_some()
                && have.1.is_some()
                && health_at.get(&ns).is_some_and(|t| now - *t < HEALTH_EVERY)
            {
                want.1 = have.1.clone();
            }
            if have == want {
                continue;
            }
            let patch = serde_json::json!({"metadata": {"annotations": {
                TRAFFIC_ANNOTATION: want.0, HEALTH_ANNOTATION: want.1}}});
            match api
                .patch(&ns, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => {
                    tracing::debug!(namespace = %ns, error = %e, "writing the traffic report");
                    continue;
                }
            }
            if want.1 != have.1 {
                health_at.insert(ns.clone(), now);
            }
            if want == (None, None) {
                written.remove(&ns);
                health_at.remove(&ns);
            } else {
                written.insert(ns, want);
            }
        }
    }
}

/// A report as the annotation's value.
fn json<T: serde::Serialize>(r: &T) -> Option<String> {
    serde_json::to_string(r).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_of_a_service_add_up_per_namespace_and_source() {
        let l = Listeners::default();
        let web = ServiceKey::new("shop-1", "web");
        l.set(
            &web,
            [],
            ["shop/web:http (clusterset)", "shop/web:grpc (clusterset)"],
            false,
        );
        l.set(
            &ServiceKey::new("shop-1", "db"),
            [],
            ["shop/db:5432 (clusterset)"],
            false,
        );
        let active = vec![
            (
                "shop/web:http (clusterset)".to_string(),
                "east".to_string(),
                2,
            ),
            (
                "shop/web:grpc (clusterset)".to_string(),
                "east".to_string(),
                1,
            ),
            (
                "shop/db:5432 (clusterset)".to_string(),
                "east".to_string(),
                0,
            ),
            ("unknown".to_string(), "east".to_string(), 7),
        ];
        let r = by_namespace(&active, &l);
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            serde_json::json!({"shop-1": {"db": {"east": 0}, "web": {"east": 3}}})
        );
        // A listener that went no longer counts.
        l.set(&web, ["shop/web:grpc (clusterset)"], [], false);
        assert_eq!(by_namespace(&active, &l)["shop-1"]["web"]["east"], 2);
    }

    #[test]
    fn health_covers_the_window_of_shifting_listeners_per_source() {
        let l = Listeners::default();
        let web = ServiceKey::new("shop-1", "web");
        l.set(&web, [], ["web:80", "web:81"], true);
        assert!(l.shifting("web:80") && !l.shifting("other"));
        let tally = |attempts: u64, errors: u64| Tally {
            attempts,
            errors,
            buckets: {
                let mut b = [0; crate::balance::outcomes::BUCKETS];
                b[10] = attempts - errors;
                b
            },
        };
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut w = Windows::default();
        let first = w.record(
            at(0),
            vec![("web:80".into(), "east".into(), tally(100, 0))],
            &l,
        );
        assert!(first.is_empty(), "no baseline yet");
        let r = w.record(
            at(5),
            vec![
                ("web:80".into(), "east".into(), tally(300, 0)),
                ("web:80".into(), "west".into(), tally(50, 5)),
            ],
            &l,
        );
        assert_eq!(r["shop-1"]["web"]["east"].requests, 200);
        assert!(
            !r["shop-1"]["web"].contains_key("west"),
            "west has no baseline"
        );
        // 12 s on, the window starts at the 5 s snapshot.
        let r = w.record(
            at(12),
            vec![
                ("web:80".into(), "east".into(), tally(400, 0)),
                ("web:80".into(), "west".into(), tally(150, 10)),
            ],
            &l,
        );
        let west = r["shop-1"]["web"]["west"];
        assert_eq!((west.requests, west.errors), (100, 5));
        assert_eq!(r["shop-1"]["web"]["east"].requests, 300);
        assert!(west.p99_micros > 0);
        // 16 s on, the 0 s snapshot is out of the window.
        let r = w.record(
            at(16),
            vec![("web:80".into(), "east".into(), tally(500, 0))],
            &l,
        );
        assert_eq!(r["shop-1"]["web"]["east"].requests, 200);
    }
}
