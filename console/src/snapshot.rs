//! The whole picture the page draws, at one moment: made from the views, the timelines
//! and the traffic history, and sent to every open page as one JSON document. Each
//! Service's traffic is shown under the namespace it belongs to, found by the namespace's
//! downstream name; a series whose namespace the identity cannot see is not shown.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::timeline::{Step, Timelines};
use crate::traffic::{Second, Traffic};
use crate::view::{ClusterView, EventView, NamespaceView, PlacementView};

/// A namespace with its timeline.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceEntry {
    #[serde(flatten)]
    pub view: NamespaceView,
    pub timeline: Vec<Step>,
}

/// One Service's traffic: per second (unix s), each source cluster's part.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceTraffic {
    pub logical_cluster: String,
    pub namespace: String,
    pub service: String,
    pub seconds: Vec<(u64, BTreeMap<String, Second>)>,
}

/// What the page shows.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// Unix milliseconds when it was made.
    pub at: u64,
    /// Whose view: the kubeconfig's user and logical cluster (`*`: every one).
    pub user: String,
    pub scope: String,
    pub clusters: Vec<ClusterView>,
    /// Why clusters are not shown (the identity may not read them), if so.
    pub clusters_error: Option<String>,
    pub namespaces: Vec<NamespaceEntry>,
    pub placements: Vec<PlacementView>,
    pub traffic: Vec<ServiceTraffic>,
    pub events: Vec<EventView>,
    /// Dataplanes whose counts could not be read, with why.
    pub scrape_errors: Vec<String>,
}

/// The parts a snapshot is made of.
pub struct Parts<'a> {
    pub clusters: Vec<ClusterView>,
    pub clusters_error: Option<String>,
    pub namespaces: Vec<NamespaceView>,
    pub placements: Vec<PlacementView>,
    pub events: Vec<EventView>,
    pub timelines: &'a Timelines,
    pub traffic: &'a Traffic,
    pub scrape_errors: Vec<String>,
}

/// Put the picture together at `at` (unix ms) for `user` in `scope`.
pub fn make(at: u64, user: &str, scope: &str, parts: Parts<'_>) -> Snapshot {
    let Parts {
        mut clusters,
        clusters_error,
        mut namespaces,
        mut placements,
        events,
        timelines,
        traffic,
        scrape_errors,
    } = parts;
    crate::view::count_left(&mut clusters, &namespaces);
    clusters.sort_by(|a, b| a.name.cmp(&b.name));
    namespaces.sort_by_key(NamespaceView::key);
    placements.sort_by(|a, b| (&a.logical_cluster, &a.name).cmp(&(&b.logical_cluster, &b.name)));
    let by_downstream: HashMap<&str, &NamespaceView> = namespaces
        .iter()
        .filter(|n| !n.downstream.is_empty())
        .map(|n| (n.downstream.as_str(), n))
        .collect();
    let traffic = traffic
        .services
        .iter()
        .filter_map(|(service, series)| {
            let (downstream, name) = service.split_once('/')?;
            let ns = by_downstream.get(downstream)?;
            Some(ServiceTraffic {
                logical_cluster: ns.logical_cluster.clone(),
                namespace: ns.name.clone(),
                service: name.to_string(),
                seconds: series.seconds.iter().cloned().collect(),
            })
        })
        .collect();
    let namespaces = namespaces
        .into_iter()
        .map(|view| NamespaceEntry {
            timeline: timelines.of(&view.key()).to_vec(),
            view,
        })
        .collect();
    Snapshot {
        at,
        user: user.to_string(),
        scope: scope.to_string(),
        clusters,
        clusters_error,
        namespaces,
        placements,
        traffic,
        events: crate::view::newest(events),
        scrape_errors,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traffic::Scrape;

    #[test]
    fn traffic_shows_under_its_namespace_and_only_a_visible_one() {
        let mut traffic = Traffic::default();
        let text = |n: u64| {
            format!(
                "sluice_proxy_requests_total{{service=\"shop-x/web\",cluster=\"east\"}} {n}\n\
                 sluice_proxy_requests_total{{service=\"other-y/web\",cluster=\"east\"}} {n}\n"
            )
        };
        traffic.record(1, vec![("a".into(), Some(Scrape::parse(&text(1))))]);
        traffic.record(2, vec![("a".into(), Some(Scrape::parse(&text(11))))]);
        let shop = NamespaceView {
            logical_cluster: "root".into(),
            name: "shop".into(),
            downstream: "shop-x".into(),
            ..Default::default()
        };
        let s = make(
            5,
            "admin",
            "*",
            Parts {
                clusters: vec![],
                clusters_error: None,
                namespaces: vec![shop],
                placements: vec![],
                events: vec![],
                timelines: &Timelines::default(),
                traffic: &traffic,
                scrape_errors: vec![],
            },
        );
        assert_eq!(s.traffic.len(), 1, "{:?}", s.traffic);
        assert_eq!(s.traffic[0].namespace, "shop");
        assert_eq!(s.traffic[0].service, "web");
        assert_eq!(s.traffic[0].seconds[0].1["east"].requests, 10.0);
    }
}
