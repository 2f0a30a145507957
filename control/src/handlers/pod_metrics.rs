//! `metrics.k8s.io/v1beta1` `pods`, what `kubectl top pod` reads: what each Pod's containers
//! use now, measured when asked (read-only, as metrics-server serves it). The Pods are this
//! server's own (their labels select, their names answer); the figures come from where they
//! run:
//! - on a local cluster, the node agent measures its processes (`/stats/pods` on its
//!   streaming socket);
//! - on a logical cluster, each physical cluster the namespace's Pods run on answers from
//!   its own metrics API, through its syncer (`/metrics/<namespace>`, the per-cluster path
//!   `kubectl logs` takes) — so it works the same on clusters that run metrics-server.
//!
//! A Pod nothing was measured for is left out of a list and not found by name, as
//! metrics-server does before its first reading.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use bytes::Bytes;
use http::{Request, StatusCode, header};
use http_body_util::{BodyExt, Empty};
use serde_json::{Value, json};
use sluice_api::metrics::{GROUP, VERSION};
use sluice_api::{ClusterName, LogicalClusterPath};

use super::respond::{Ctx, Resp, json_value};
use super::scope::{Filter, Scope, collection_prefix};
use crate::catalog::Catalog;
use crate::errors::{ApiError, ApiResult};
use crate::state::ApiState;

/// Bytes of usage read from one node or cluster.
const MAX_USAGE: usize = 8 * 1024 * 1024;

/// One Pod's containers' usage as `PodMetrics` shows it (`cpu`, `memory` quantities),
/// measured over `window` ending at `timestamp`.
#[derive(Debug, Clone, PartialEq)]
struct Measured {
    timestamp: String,
    window: String,
    containers: Vec<Value>,
}

/// `GET` of `pods` (one, by `name`, or a list) in `scope`.
pub async fn serve(
    state: &ApiState,
    ctx: &Ctx,
    scope: &Scope<'_>,
    name: Option<&str>,
) -> ApiResult<Resp> {
    let cluster = scope.cluster()?;
    let pods_t = Catalog::builtin()
        .lookup("", "v1", "pods")
        .ok_or_else(|| ApiError::Internal("the Pod type is not served".into()))?;
    let pod_scope = Scope {
        t: pods_t,
        cluster: Some(cluster.clone()),
        namespace: scope.namespace.clone(),
    };
    let pods: Vec<Value> = match name {
        Some(n) => match super::pod_container::pod(state, &pod_scope, n) {
            Ok((_, pod)) => vec![pod],
            Err(_) => return Err(not_found(scope, n)),
        },
        None => {
            let filter = Filter::from_ctx(ctx)?;
            let mut pods = Vec::new();
            state
                .store
                .scan(&collection_prefix(&pod_scope), None, |_, e| {
                    if filter.matches_bytes(&e.value)
                        && let Ok(v) = serde_json::from_slice::<Value>(&e.value)
                    {
                        pods.push(v);
                    }
                    true
                });
            pods
        }
    };
    let measured = match &state.node_streaming {
        Some(socket) => from_node(socket, scope.namespace.as_deref()).await?,
        None => from_clusters(state, cluster, &pods).await,
    };
    let items: Vec<Value> = pods
        .iter()
        .filter_map(|pod| {
            let meta = &pod["metadata"];
            let key = (
                meta["namespace"].as_str()?.to_string(),
                meta["name"].as_str()?.to_string(),
            );
            let m = measured.get(&key)?;
            Some(json!({
                "kind": "PodMetrics",
                "apiVersion": format!("{GROUP}/{VERSION}"),
                "metadata": {
                    "name": key.1,
                    "namespace": key.0,
                    "labels": meta["labels"],
                    "creationTimestamp": m.timestamp,
                },
                "timestamp": m.timestamp,
                "window": m.window,
                "containers": m.containers,
            }))
        })
        .collect();
    if let Some(n) = name {
        return match items.into_iter().next() {
            Some(item) => Ok(json_value(StatusCode::OK, &item)),
            None => Err(not_found(scope, n)),
        };
    }
    Ok(json_value(
        StatusCode::OK,
        &json!({
            "kind": "PodMetricsList",
            "apiVersion": format!("{GROUP}/{VERSION}"),
            "metadata": {},
            "items": items,
        }),
    ))
}

/// metrics-server's 404: the Pod's metrics, named with its namespace.
fn not_found(scope: &Scope<'_>, name: &str) -> ApiError {
    let named = match &scope.namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    };
    ApiError::not_found(&scope.t.gr, &named)
}

/// The usage a node agent reports (its `/stats/pods`), as `PodMetrics` shows it.
fn from_usage(usage: &Value) -> HashMap<(String, String), Measured> {
    let mut out = HashMap::new();
    for pod in usage["items"].as_array().into_iter().flatten() {
        let (Some(ns), Some(name)) = (pod["namespace"].as_str(), pod["pod"].as_str()) else {
            continue;
        };
        let containers = pod["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                let cpu = c["cpuNanoCores"].as_u64().unwrap_or(0);
                let memory = c["memoryBytes"].as_u64().unwrap_or(0);
                json!({
                    "name": c["name"],
                    "usage": {"cpu": format!("{cpu}n"), "memory": format!("{}Ki", memory / 1024)},
                })
            })
            .collect();
        out.insert(
            (ns.to_string(), name.to_string()),
            Measured {
                timestamp: pod["timestamp"].as_str().unwrap_or_default().to_string(),
                window: format!("{}ms", pod["windowMillis"].as_u64().unwrap_or(0)),
                containers,
            },
        );
    }
    out
}

/// Ask the node agent what its Pods (of `namespace`, or all) use.
async fn from_node(
    socket: &Path,
    namespace: Option<&str>,
) -> ApiResult<HashMap<(String, String), Measured>> {
    let unreachable = |e: &dyn std::fmt::Display| {
        ApiError::Internal(format!(
            "the node's resource metrics {} are not available: {e}",
            socket.display()
        ))
    };
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair("namespace", namespace.unwrap_or(""))
        .finish();
    let req = Request::get(format!("/stats/pods?{query}"))
        .header(header::HOST, "node")
        .body(Empty::<Bytes>::new())
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let resp = super::connect::ask_node(socket, req).await?;
    let body = http_body_util::Limited::new(resp.into_body(), MAX_USAGE)
        .collect()
        .await
        .map_err(|e| unreachable(&e))?
        .to_bytes();
    let usage: Value = serde_json::from_slice(&body).map_err(|e| unreachable(&e))?;
    Ok(from_usage(&usage))
}

/// The Pods of a cluster's `PodMetricsList`, keyed by `namespace` (the logical one) and name.
fn from_list(list: &Value, namespace: &str) -> HashMap<(String, String), Measured> {
    let mut out = HashMap::new();
    for item in list["items"].as_array().into_iter().flatten() {
        let Some(name) = item["metadata"]["name"].as_str() else {
            continue;
        };
        out.insert(
            (namespace.to_string(), name.to_string()),
            Measured {
                timestamp: item["timestamp"].as_str().unwrap_or_default().to_string(),
                window: item["window"].as_str().unwrap_or_default().to_string(),
                containers: item["containers"].as_array().cloned().unwrap_or_default(),
            },
        );
    }
    out
}

/// Ask each physical cluster `pods` run on (through its syncer) what they use. A cluster
/// that cannot answer leaves its Pods out, as metrics-server leaves out a node it could
/// not scrape; the reason is logged.
async fn from_clusters(
    state: &ApiState,
    logical: &LogicalClusterPath,
    pods: &[Value],
) -> HashMap<(String, String), Measured> {
    let mut asks: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for pod in pods {
        if let (Some(cluster), Some(ns)) = (
            super::logs::running_on(pod),
            pod["metadata"]["namespace"].as_str(),
        ) {
            asks.entry(cluster.to_string())
                .or_default()
                .insert(ns.to_string());
        }
    }
    // Every cluster and namespace asked at once: `top pod -A` waits for the slowest only.
    let asked = asks.into_iter().flat_map(|(cluster, namespaces)| {
        let cluster = ClusterName::new(&cluster);
        namespaces.into_iter().map(move |ns| {
            let cluster = cluster.clone();
            async move {
                let answer = from_cluster(state, logical, &cluster, &ns).await;
                if let Err(e) = &answer {
                    tracing::warn!(%cluster, namespace = %ns, error = %e,
                        "a cluster's Pod metrics were not read");
                }
                answer.unwrap_or_default()
            }
        })
    });
    futures::future::join_all(asked)
        .await
        .into_iter()
        .flatten()
        .collect()
}

async fn from_cluster(
    state: &ApiState,
    logical: &LogicalClusterPath,
    cluster: &ClusterName,
    namespace: &str,
) -> Result<HashMap<(String, String), Measured>, String> {
    let base = super::remote_logs::endpoint(state, cluster).map_err(|e| e.to_string())?;
    let downstream = crate::admission::downstream_names::of_namespace(state, logical, namespace);
    let resp = state
        .agents
        .get(&base, cluster, &format!("/metrics/{downstream}"))
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status();
    let body = http_body_util::Limited::new(resp.into_body(), MAX_USAGE)
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    if !status.is_success() {
        return Err(format!(
            "{status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(512)])
        ));
    }
    let list: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    Ok(from_list(&list, namespace))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nodes_usage_reads_as_kubes_quantities() {
        let usage = json!({"items": [{"namespace": "shop", "pod": "web", "timestamp": "2026-11-28T00:00:00Z",
            "windowMillis": 512, "containers": [{"name": "main", "cpuNanoCores": 1500000, "memoryBytes": 10485760}]}]});
        let m = from_usage(&usage);
        let web = &m[&("shop".to_string(), "web".to_string())];
        assert_eq!(web.window, "512ms");
        assert_eq!(
            web.containers[0],
            json!({"name": "main", "usage": {"cpu": "1500000n", "memory": "10240Ki"}})
        );
        assert!(from_usage(&json!({"items": [{"pod": 3}]})).is_empty());
    }

    #[test]
    fn a_clusters_list_is_keyed_by_the_logical_namespace() {
        let list = json!({"items": [{"metadata": {"name": "web", "namespace": "root-shop-x"},
            "timestamp": "t", "window": "10s", "containers": [{"name": "main", "usage": {"cpu": "1m"}}]}]});
        let m = from_list(&list, "shop");
        assert_eq!(m[&("shop".to_string(), "web".to_string())].window, "10s");
    }
}
