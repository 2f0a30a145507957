//! The drain gate's evidence, from the data plane itself: the live connections and
//! in-flight requests this dataplane holds to the endpoints of source clusters that drain
//! as a whole, written on each namespace as `traffic.sluice.dev/active` (a
//! [`TrafficReport`]: `{"web": {"east": 3}}`, zeros included — "drained here" — and absent
//! when nothing drains). The cluster's syncer carries it into the namespace's import report
//! upstream, and a move removes its old cluster only once every member reports zero.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client};
use sluice_api::ServiceKey;
use sluice_api::sync::{TRAFFIC_ANNOTATION, TrafficReport};
use tokio::sync::watch;

use crate::proxy::Proxy;

/// How often the counts are read (and written where they changed).
pub const REPORT_EVERY: Duration = Duration::from_millis(500);

/// Which service (Service, ServiceImport: one key) each running listener belongs to, by
/// listener name; kept by the cluster mode's loop as it builds listeners.
#[derive(Clone, Default)]
pub struct Listeners(Arc<RwLock<HashMap<String, ServiceKey>>>);

impl Listeners {
    /// Service `key` now has listeners named `names` (none: it has no listener any more).
    pub fn set<'a>(
        &self,
        key: &ServiceKey,
        old: impl IntoIterator<Item = &'a str>,
        names: impl IntoIterator<Item = &'a str>,
    ) {
        let mut m = self.0.write().unwrap_or_else(|p| p.into_inner());
        for n in old {
            if m.get(n) == Some(key) {
                m.remove(n);
            }
        }
        for n in names {
            m.insert(n.to_string(), key.clone());
        }
    }

    /// Forget every listener (the loop rebuilds them all).
    pub fn clear(&self) {
        self.0.write().unwrap_or_else(|p| p.into_inner()).clear();
    }

    fn key_of(&self, name: &str) -> Option<ServiceKey> {
        let m = self.0.read().unwrap_or_else(|p| p.into_inner());
        m.get(name).cloned()
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
    let mut written: BTreeMap<String, String> = BTreeMap::new();
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
                        let value = ns
                            .metadata
                            .annotations
                            .as_ref()
                            .and_then(|a| a.get(TRAFFIC_ANNOTATION));
                        if let (Some(name), Some(v)) = (ns.metadata.name.clone(), value) {
                            written.insert(name, v.clone());
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
        let now: BTreeMap<String, String> = by_namespace(&proxy.draining_active(), &listeners)
            .into_iter()
            .filter_map(|(ns, r)| Some((ns, serde_json::to_string(&r).ok()?)))
            .collect();
        let namespaces: Vec<String> = written.keys().chain(now.keys()).cloned().collect();
        for ns in namespaces {
            let want = now.get(&ns);
            if written.get(&ns) == want {
                continue;
            }
            let patch =
                serde_json::json!({"metadata": {"annotations": {TRAFFIC_ANNOTATION: want}}});
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
            match want {
                Some(v) => written.insert(ns, v.clone()),
                None => written.remove(&ns),
            };
        }
    }
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
        );
        l.set(
            &ServiceKey::new("shop-1", "db"),
            [],
            ["shop/db:5432 (clusterset)"],
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
        l.set(&web, ["shop/web:grpc (clusterset)"], []);
        assert_eq!(by_namespace(&active, &l)["shop-1"]["web"]["east"], 2);
    }
}
