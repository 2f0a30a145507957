//! Where the picture comes from: watches on the control plane with the kubeconfig's
//! identity (clusters in `root`; namespaces, Placements and Events across every logical
//! cluster when the identity may list them so, else in its own), the dataplanes' counts
//! read once a second, and a new [`Snapshot`] whenever something changed — at most every
//! [`DEBOUNCE`], so a burst of events makes one picture.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::runtime::watcher;
use sluice_kube::Roots;
use sluice_kube::informer::Informer;
use tokio::sync::{Notify, watch};

use crate::metrics::Metrics;
use crate::snapshot::{Parts, Snapshot};
use crate::timeline::Timelines;
use crate::traffic::{Scrape, Traffic};
use crate::view;

/// Changes within this long make one picture.
pub const DEBOUNCE: Duration = Duration::from_millis(100);

/// How often the dataplanes' counts are read.
pub const SCRAPE_EVERY: Duration = Duration::from_secs(1);

/// The largest `/metrics` answer read.
const SCRAPE_LIMIT: usize = 16 << 20;

/// Dataplanes read at most, whatever the Clusters list.
const MAX_DATAPLANES: usize = 256;

/// Who looks and at what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every logical cluster (the identity may list and watch `/clusters/*`).
    All,
    /// The kubeconfig's own logical cluster.
    One(String),
}

impl Scope {
    /// The URL prefix of its watches.
    fn prefix(&self) -> String {
        match self {
            Scope::All => "/clusters/*".into(),
            Scope::One(lc) => format!("/clusters/{lc}"),
        }
    }

    /// How the page names it.
    pub fn label(&self) -> &str {
        match self {
            Scope::All => "*",
            Scope::One(lc) => lc,
        }
    }
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// The logical cluster a kubeconfig's server URL names (`.../clusters/<path>`), `root`
/// when it names none.
pub fn logical_cluster_of(url: &str) -> String {
    url.split_once("/clusters/")
        .map(|(_, p)| p.trim_end_matches('/').to_string())
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "root".into())
}

/// Whether the identity may list `plural` under `prefix`; the refusal's message if not.
async fn may_list(roots: &Roots, prefix: &str, ar: &ApiResource) -> Result<(), String> {
    let client = roots.at(prefix).map_err(|e| e.to_string())?;
    let api: Api<DynamicObject> = Api::all_with(client, ar);
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) => Err(s.message),
        Err(e) => Err(e.to_string()),
    }
}

/// The scope the identity can see: every logical cluster if it may list namespaces across
/// them, else its own.
pub async fn scope(roots: &Roots, own: &str) -> Scope {
    let ns = resource("", "v1", "Namespace", "namespaces");
    match may_list(roots, "/clusters/*", &ns).await {
        Ok(()) => Scope::All,
        Err(_) => Scope::One(own.to_string()),
    }
}

/// The identity's user name, as the server sees it (SelfSubjectReview); empty if it
/// will not say.
pub async fn user(roots: &Roots, own: &str) -> String {
    let Ok(client) = roots.at(&format!("/clusters/{own}")) else {
        return String::new();
    };
    let Ok(req) = http::Request::post("/apis/authentication.k8s.io/v1/selfsubjectreviews")
        .header("content-type", "application/json")
        .body(br#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#.to_vec())
    else {
        return String::new();
    };
    match client.request::<serde_json::Value>(req).await {
        Ok(v) => v["status"]["userInfo"]["username"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        Err(_) => String::new(),
    }
}

/// The watches the picture is made from.
struct Watches {
    clusters: Option<Informer<DynamicObject>>,
    clusters_error: Option<String>,
    namespaces: Informer<DynamicObject>,
    placements: Option<Informer<DynamicObject>>,
    events: Option<Informer<DynamicObject>>,
}

fn start(
    roots: &Roots,
    scope: &Scope,
    ar: &ApiResource,
    what: &str,
    changed: &Arc<Notify>,
) -> Result<Informer<DynamicObject>, sluice_kube::ClientError> {
    let client = roots.at(&scope.prefix())?;
    let api: Api<DynamicObject> = Api::all_with(client, ar);
    let changed = changed.clone();
    let on_event = move |_: &watcher::Event<DynamicObject>| changed.notify_one();
    Ok(match scope {
        Scope::All => Informer::start_across(
            api,
            watcher::Config::default(),
            what,
            sluice_api::LOGICAL_CLUSTER_ANNOTATION,
            on_event,
        ),
        Scope::One(_) => Informer::start_typed(api, watcher::Config::default(), what, on_event),
    })
}

impl Watches {
    async fn start(
        roots: &Roots,
        scope: &Scope,
        changed: &Arc<Notify>,
    ) -> Result<Self, sluice_kube::ClientError> {
        let clusters_ar = resource("sluice.dev", "v1alpha1", "Cluster", "clusters");
        let root = Scope::One("root".into());
        let (clusters, clusters_error) = match may_list(roots, &root.prefix(), &clusters_ar).await {
            Ok(()) => (
                Some(start(
                    roots,
                    &root,
                    &clusters_ar,
                    "console clusters",
                    changed,
                )?),
                None,
            ),
            Err(e) => (None, Some(e)),
        };
        let placements_ar = resource("sluice.dev", "v1alpha1", "Placement", "placements");
        let events_ar = resource("", "v1", "Event", "events");
        let optional = |ar: ApiResource, what: &'static str| {
            let changed = changed.clone();
            async move {
                match may_list(roots, &scope.prefix(), &ar).await {
                    Ok(()) => start(roots, scope, &ar, what, &changed).map(Some),
                    Err(_) => Ok(None),
                }
            }
        };
        let placements = optional(placements_ar, "console placements").await?;
        let events = optional(events_ar, "console events").await?;
        let namespaces = start(
            roots,
            scope,
            &resource("", "v1", "Namespace", "namespaces"),
            "console namespaces",
            changed,
        )?;
        Ok(Self {
            clusters,
            clusters_error,
            namespaces,
            placements,
            events,
        })
    }
}

fn objects(i: Option<&Informer<DynamicObject>>) -> Vec<serde_json::Value> {
    i.map(|i| {
        i.state()
            .iter()
            .filter_map(|o| serde_json::to_value(o.as_ref()).ok())
            .collect()
    })
    .unwrap_or_default()
}

/// Read one dataplane's `/metrics` (`http://host:port/path` only).
pub async fn scrape(url: &str) -> Result<Scrape, String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
    if uri.scheme_str() != Some("http") {
        return Err(format!("{url}: only http:// is read"));
    }
    let authority = uri
        .authority()
        .ok_or_else(|| format!("{url}: no host"))?
        .clone();
    let port = authority.port_u16().unwrap_or(80);
    let work = async {
        let stream = tokio::net::TcpStream::connect((authority.host(), port))
            .await
            .map_err(|e| e.to_string())?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let req = http::Request::get(uri.path_and_query().map_or("/", |p| p.as_str()))
            .header(http::header::HOST, authority.as_str())
            .body(Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
        let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
        if !resp.status().is_success() {
            return Err(format!("answered {}", resp.status()));
        }
        let body = Limited::new(resp.into_body(), SCRAPE_LIMIT)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok(Scrape::parse(&String::from_utf8_lossy(&body)))
    };
    match tokio::time::timeout(Duration::from_secs(2), work).await {
        Ok(r) => r.map_err(|e| format!("{url}: {e}")),
        Err(_) => Err(format!("{url}: no answer within 2 s")),
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Follows the control plane and the dataplanes, publishing snapshots.
pub struct Source {
    pub roots: Arc<Roots>,
    pub scope: Scope,
    pub user: String,
    pub metrics: Arc<Metrics>,
}

impl Source {
    /// Run until `stop` changes: publish each new picture as JSON on `out`.
    pub async fn run(
        self,
        out: watch::Sender<Arc<String>>,
        mut stop: watch::Receiver<bool>,
    ) -> Result<(), sluice_kube::ClientError> {
        let changed = Arc::new(Notify::new());
        let watches = Watches::start(&self.roots, &self.scope, &changed).await?;
        let mut timelines = Timelines::default();
        let mut traffic = Traffic::default();
        let mut scrape_errors = Vec::new();
        let mut tick = tokio::time::interval(SCRAPE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.changed() => return Ok(()),
                _ = changed.notified() => {
                    tokio::time::sleep(DEBOUNCE).await;
                }
                _ = tick.tick() => {
                    let urls = self.dataplanes(&watches);
                    let scrapes = futures::future::join_all(urls.iter().map(|u| scrape(u))).await;
                    scrape_errors.clear();
                    let mut round = Vec::new();
                    for (url, r) in urls.into_iter().zip(scrapes) {
                        match r {
                            Ok(s) => round.push((url, Some(s))),
                            Err(e) => {
                                self.metrics.scrape_errors.inc();
                                scrape_errors.push(e);
                                round.push((url, None));
                            }
                        }
                    }
                    traffic.record(now_ms() / 1000, round);
                }
            }
            let started = std::time::Instant::now();
            let snapshot = self.picture(&watches, &mut timelines, &traffic, &scrape_errors);
            let json = serde_json::to_string(&snapshot).unwrap_or_else(|_| "{}".into());
            self.metrics.snapshots.inc();
            self.metrics
                .snapshot_seconds
                .observe(started.elapsed().as_secs_f64());
            self.metrics.snapshot_bytes.set(json.len() as i64);
            tracing::trace!(
                bytes = json.len(),
                namespaces = snapshot.namespaces.len(),
                services = snapshot.traffic.len(),
                "snapshot"
            );
            if out.send(Arc::new(json)).is_err() {
                // No page and no server: nothing to do but stop.
                return Ok(());
            }
        }
    }

    /// The dataplanes' metrics URLs the Clusters list.
    fn dataplanes(&self, w: &Watches) -> Vec<String> {
        let mut urls: Vec<String> = objects(w.clusters.as_ref())
            .iter()
            .flat_map(|c| view::cluster(c).metrics)
            .collect();
        urls.sort();
        urls.dedup();
        urls.truncate(MAX_DATAPLANES);
        urls
    }

    fn picture(
        &self,
        w: &Watches,
        timelines: &mut Timelines,
        traffic: &Traffic,
        scrape_errors: &[String],
    ) -> Snapshot {
        let own = self.scope.label().to_string();
        let at = now_ms();
        let clusters = objects(w.clusters.as_ref())
            .iter()
            .map(view::cluster)
            .collect();
        let namespaces: Vec<view::NamespaceView> = objects(Some(&w.namespaces))
            .iter()
            .map(|n| view::namespace(n, &own))
            .collect();
        let keys: HashSet<String> = namespaces.iter().map(|n| n.key()).collect();
        for n in &namespaces {
            timelines.observe(n, at);
        }
        timelines.keep_only(&keys);
        let placements = objects(w.placements.as_ref())
            .iter()
            .map(|p| view::placement(p, &own))
            .collect();
        let events = objects(w.events.as_ref())
            .iter()
            .map(|e| view::event(e, &own))
            .collect();
        crate::snapshot::make(
            at,
            &self.user,
            self.scope.label(),
            Parts {
                clusters,
                clusters_error: w.clusters_error.clone(),
                namespaces,
                placements,
                events,
                timelines,
                traffic,
                scrape_errors: scrape_errors.to_vec(),
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubeconfigs_logical_cluster() {
        assert_eq!(
            logical_cluster_of("https://127.0.0.1:6443/clusters/root:shop"),
            "root:shop"
        );
        assert_eq!(
            logical_cluster_of("https://127.0.0.1:6443/clusters/root/"),
            "root"
        );
        assert_eq!(logical_cluster_of("https://127.0.0.1:6443"), "root");
    }

    #[tokio::test]
    async fn a_scrape_refuses_what_it_cannot_read() {
        assert!(scrape("https://127.0.0.1:1/metrics").await.is_err());
        assert!(scrape("not a url").await.is_err());
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map(|l| l.local_addr());
        if let Ok(Ok(addr)) = closed {
            // Bound then dropped: nothing listens there.
            assert!(scrape(&format!("http://{addr}/metrics")).await.is_err());
        }
    }
}
