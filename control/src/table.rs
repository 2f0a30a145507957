//! `Table` output (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`): the columns
//! kubectl users know for the built-in types, computed on the server as kube-apiserver's
//! printers do. kubectl prints the cells as given.

use serde_json::{Value, json};

use crate::resources::ResourceType;

/// The Table version a client accepts, if any.
pub fn wants_table(accept: &str) -> Option<&'static str> {
    accept.split(',').find_map(|t| {
        if !t.contains("as=Table") || !t.contains("g=meta.k8s.io") {
            return None;
        }
        if t.contains("v=v1beta1") {
            Some("v1beta1")
        } else if t.contains("v=v1") {
            Some("v1")
        } else {
            None
        }
    })
}

type Cell = fn(&Value) -> Value;

struct Column {
    name: &'static str,
    ty: &'static str,
    /// 0: default output; 1: `-o wide`.
    priority: u8,
    cell: Cell,
}

const fn col(name: &'static str, ty: &'static str, priority: u8, cell: Cell) -> Column {
    Column {
        name,
        ty,
        priority,
        cell,
    }
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

fn none_if_empty(v: String) -> Value {
    json!(if v.is_empty() {
        "<none>".to_string()
    } else {
        v
    })
}

/// kube's `duration.HumanDuration`.
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    if secs < 0 {
        return "0s".into();
    }
    if secs < 120 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        let s = secs % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = secs / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let d = (hours / 24) % 365;
        return if d == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{d}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// Age since an RFC 3339 timestamp, as kubectl shows it.
pub fn age_of(ts: &Value) -> Value {
    let Some(t) = ts.as_str().and_then(|t| {
        time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok()
    }) else {
        return json!("<unknown>");
    };
    json!(human_duration(
        (time::OffsetDateTime::now_utc() - t).whole_seconds()
    ))
}

fn name(o: &Value) -> Value {
    o["metadata"]["name"].clone()
}

fn age(o: &Value) -> Value {
    age_of(&o["metadata"]["creationTimestamp"])
}

fn containers(o: &Value) -> Value {
    let cs = o["spec"]["template"]["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    none_if_empty(
        cs.iter()
            .map(|c| s(&c["name"]).to_string())
            .collect::<Vec<_>>()
            .join(","),
    )
}

fn images(o: &Value) -> Value {
    let cs = o["spec"]["template"]["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    none_if_empty(
        cs.iter()
            .map(|c| s(&c["image"]).to_string())
            .collect::<Vec<_>>()
            .join(","),
    )
}

fn label_selector(sel: &Value) -> String {
    let mut parts: Vec<String> = sel["matchLabels"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| format!("{k}={}", s(v))).collect())
        .unwrap_or_default();
    for e in sel["matchExpressions"].as_array().into_iter().flatten() {
        let values: Vec<&str> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .map(s)
            .collect();
        parts.push(match s(&e["operator"]) {
            "In" => format!("{} in ({})", s(&e["key"]), values.join(",")),
            "NotIn" => format!("{} notin ({})", s(&e["key"]), values.join(",")),
            "Exists" => s(&e["key"]).to_string(),
            _ => format!("!{}", s(&e["key"])),
        });
    }
    parts.join(",")
}

fn selector(o: &Value) -> Value {
    none_if_empty(label_selector(&o["spec"]["selector"]))
}

fn pod_status(o: &Value) -> Value {
    if o["metadata"]
        .get("deletionTimestamp")
        .is_some_and(|v| !v.is_null())
    {
        return json!("Terminating");
    }
    let mut reason = o["status"]["reason"]
        .as_str()
        .or(o["status"]["phase"].as_str())
        .unwrap_or("Pending")
        .to_string();
    for c in o["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(r) = c["state"]["waiting"]["reason"]
            .as_str()
            .filter(|r| !r.is_empty())
        {
            reason = r.to_string();
        } else if let Some(r) = c["state"]["terminated"]["reason"]
            .as_str()
            .filter(|r| !r.is_empty())
        {
            reason = r.to_string();
        }
    }
    json!(reason)
}

fn pod_ready(o: &Value) -> Value {
    let total = o["spec"]["containers"]
        .as_array()
        .map(Vec::len)
        .unwrap_or(0);
    let ready = o["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["ready"] == true)
        .count();
    json!(format!("{ready}/{total}"))
}

fn pod_restarts(o: &Value) -> Value {
    json!(
        o["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| int(&c["restartCount"]))
            .sum::<i64>()
    )
}

fn service_ports(o: &Value) -> Value {
    let ports: Vec<String> = o["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| match p["nodePort"].as_i64() {
            Some(np) => format!("{}:{np}/{}", int(&p["port"]), s(&p["protocol"])),
            None => format!("{}/{}", int(&p["port"]), s(&p["protocol"])),
        })
        .collect();
    none_if_empty(ports.join(","))
}

fn external_ip(o: &Value) -> Value {
    let mut ips: Vec<String> = o["spec"]["externalIPs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| s(v).to_string())
        .collect();
    for i in o["status"]["loadBalancer"]["ingress"]
        .as_array()
        .into_iter()
        .flatten()
    {
        ips.push(
            i["ip"]
                .as_str()
                .or(i["hostname"].as_str())
                .unwrap_or("")
                .to_string(),
        );
    }
    if ips.is_empty() {
        return json!(match s(&o["spec"]["type"]) {
            "LoadBalancer" => "<pending>",
            "ExternalName" => s(&o["spec"]["externalName"]),
            _ => "<none>",
        });
    }
    json!(ips.join(","))
}

fn count_keys(v: &Value) -> usize {
    v.as_object().map(|m| m.len()).unwrap_or(0)
}

fn endpoints_list(o: &Value) -> Value {
    let mut eps = Vec::new();
    for subset in o["subsets"].as_array().into_iter().flatten() {
        for a in subset["addresses"].as_array().into_iter().flatten() {
            for p in subset["ports"].as_array().into_iter().flatten() {
                eps.push(format!("{}:{}", s(&a["ip"]), int(&p["port"])));
            }
        }
    }
    none_if_empty(eps.join(","))
}

fn slice_endpoints(o: &Value) -> Value {
    let addrs: Vec<String> = o["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
        .map(|a| s(&a).to_string())
        .collect();
    none_if_empty(addrs.join(","))
}

fn condition_status(o: &Value, ty: &str) -> Option<String> {
    o["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)
        .map(|c| s(&c["status"]).to_string())
}

fn columns(kind: &str) -> Vec<Column> {
    let n = col("Name", "string", 0, name);
    let a = col("Age", "string", 0, age);
    match kind {
        "Pod" => vec![
            n,
            col("Ready", "string", 0, pod_ready),
            col("Status", "string", 0, pod_status),
            col("Restarts", "string", 0, pod_restarts),
            a,
            col("IP", "string", 1, |o| {
                json!(o["status"]["podIP"].as_str().unwrap_or("<none>"))
            }),
            col("Node", "string", 1, |o| {
                json!(o["spec"]["nodeName"].as_str().unwrap_or("<none>"))
            }),
            col("Nominated Node", "string", 1, |o| {
                json!(
                    o["status"]["nominatedNodeName"]
                        .as_str()
                        .unwrap_or("<none>")
                )
            }),
            col("Readiness Gates", "string", 1, |o| {
                json!(if o["spec"]["readinessGates"].is_array() {
                    ""
                } else {
                    "<none>"
                })
            }),
        ],
        "Deployment" => vec![
            n,
            col("Ready", "string", 0, |o| {
                json!(format!(
                    "{}/{}",
                    int(&o["status"]["readyReplicas"]),
                    int(&o["spec"]["replicas"])
                ))
            }),
            col("Up-to-date", "integer", 0, |o| {
                json!(int(&o["status"]["updatedReplicas"]))
            }),
            col("Available", "integer", 0, |o| {
                json!(int(&o["status"]["availableReplicas"]))
            }),
            a,
            col("Containers", "string", 1, containers),
            col("Images", "string", 1, images),
            col("Selector", "string", 1, selector),
        ],
        "ReplicaSet" => vec![
            n,
            col("Desired", "integer", 0, |o| {
                json!(int(&o["spec"]["replicas"]))
            }),
            col("Current", "integer", 0, |o| {
                json!(int(&o["status"]["replicas"]))
            }),
            col("Ready", "integer", 0, |o| {
                json!(int(&o["status"]["readyReplicas"]))
            }),
            a,
            col("Containers", "string", 1, containers),
            col("Images", "string", 1, images),
            col("Selector", "string", 1, selector),
        ],
        "StatefulSet" => vec![
            n,
            col("Ready", "string", 0, |o| {
                json!(format!(
                    "{}/{}",
                    int(&o["status"]["readyReplicas"]),
                    int(&o["spec"]["replicas"])
                ))
            }),
            a,
            col("Containers", "string", 1, containers),
            col("Images", "string", 1, images),
        ],
        "DaemonSet" => vec![
            n,
            col("Desired", "integer", 0, |o| {
                json!(int(&o["status"]["desiredNumberScheduled"]))
            }),
            col("Current", "integer", 0, |o| {
                json!(int(&o["status"]["currentNumberScheduled"]))
            }),
            col("Ready", "integer", 0, |o| {
                json!(int(&o["status"]["numberReady"]))
            }),
            col("Up-to-date", "integer", 0, |o| {
                json!(int(&o["status"]["updatedNumberScheduled"]))
            }),
            col("Available", "integer", 0, |o| {
                json!(int(&o["status"]["numberAvailable"]))
            }),
            col("Node Selector", "string", 0, |o| {
                none_if_empty(
                    o["spec"]["template"]["spec"]["nodeSelector"]
                        .as_object()
                        .map(|m| {
                            m.iter()
                                .map(|(k, v)| format!("{k}={}", s(v)))
                                .collect::<Vec<_>>()
                                .join(",")
                        })
                        .unwrap_or_default(),
                )
            }),
            a,
            col("Containers", "string", 1, containers),
            col("Images", "string", 1, images),
            col("Selector", "string", 1, selector),
        ],
        "Service" => vec![
            n,
            col("Type", "string", 0, |o| o["spec"]["type"].clone()),
            col("Cluster-IP", "string", 0, |o| {
                json!(o["spec"]["clusterIP"].as_str().unwrap_or("<none>"))
            }),
            col("External-IP", "string", 0, external_ip),
            col("Port(s)", "string", 0, service_ports),
            a,
            col("Selector", "string", 1, |o| {
                none_if_empty(
                    o["spec"]["selector"]
                        .as_object()
                        .map(|m| {
                            m.iter()
                                .map(|(k, v)| format!("{k}={}", s(v)))
                                .collect::<Vec<_>>()
                                .join(",")
                        })
                        .unwrap_or_default(),
                )
            }),
        ],
        "Endpoints" => vec![n, col("Endpoints", "string", 0, endpoints_list), a],
        "EndpointSlice" => vec![
            n,
            col("AddressType", "string", 0, |o| o["addressType"].clone()),
            col("Ports", "string", 0, |o| {
                none_if_empty(
                    o["ports"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|p| int(&p["port"]).to_string())
                        .collect::<Vec<_>>()
                        .join(","),
                )
            }),
            col("Endpoints", "string", 0, slice_endpoints),
            a,
        ],
        "ConfigMap" => vec![
            n,
            col("Data", "integer", 0, |o| {
                json!(count_keys(&o["data"]) + count_keys(&o["binaryData"]))
            }),
            a,
        ],
        "Secret" => vec![
            n,
            col("Type", "string", 0, |o| o["type"].clone()),
            col("Data", "integer", 0, |o| json!(count_keys(&o["data"]))),
            a,
        ],
        "ServiceAccount" => vec![
            n,
            col("Secrets", "integer", 0, |o| {
                json!(o["secrets"].as_array().map(Vec::len).unwrap_or(0))
            }),
            a,
        ],
        "Namespace" => vec![
            n,
            col("Status", "string", 0, |o| o["status"]["phase"].clone()),
            a,
        ],
        "Node" => vec![
            n,
            col("Status", "string", 0, |o| {
                json!(match condition_status(o, "Ready").as_deref() {
                    Some("True") => "Ready",
                    _ => "NotReady",
                })
            }),
            col("Roles", "string", 0, |_| json!("<none>")),
            a,
            col("Version", "string", 0, |o| {
                o["status"]["nodeInfo"]["kubeletVersion"].clone()
            }),
        ],
        "Event" => vec![
            col("Last Seen", "string", 0, |o| {
                age_of(if o["lastTimestamp"].is_string() {
                    &o["lastTimestamp"]
                } else {
                    &o["metadata"]["creationTimestamp"]
                })
            }),
            col("Type", "string", 0, |o| o["type"].clone()),
            col("Reason", "string", 0, |o| o["reason"].clone()),
            col("Object", "string", 0, |o| {
                json!(format!(
                    "{}/{}",
                    s(&o["involvedObject"]["kind"]).to_lowercase(),
                    s(&o["involvedObject"]["name"])
                ))
            }),
            col("Message", "string", 0, |o| o["message"].clone()),
        ],
        "PersistentVolumeClaim" => vec![
            n,
            col("Status", "string", 0, |o| o["status"]["phase"].clone()),
            col("Volume", "string", 0, |o| o["spec"]["volumeName"].clone()),
            col("Capacity", "string", 0, |o| {
                o["status"]["capacity"]["storage"].clone()
            }),
            col("Access Modes", "string", 0, |o| {
                json!(
                    o["status"]["accessModes"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(s)
                        .collect::<Vec<_>>()
                        .join(",")
                )
            }),
            col("StorageClass", "string", 0, |o| {
                json!(o["spec"]["storageClassName"].as_str().unwrap_or("<unset>"))
            }),
            a,
        ],
        "Ingress" => vec![
            n,
            col("Class", "string", 0, |o| {
                json!(o["spec"]["ingressClassName"].as_str().unwrap_or("<none>"))
            }),
            col("Hosts", "string", 0, |o| {
                let hosts: Vec<&str> = o["spec"]["rules"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|r| r["host"].as_str())
                    .collect();
                json!(if hosts.is_empty() {
                    "*".to_string()
                } else {
                    hosts.join(",")
                })
            }),
            col("Address", "string", 0, |o| {
                json!(
                    o["status"]["loadBalancer"]["ingress"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|i| i["ip"].as_str().or(i["hostname"].as_str()).unwrap_or(""))
                        .collect::<Vec<_>>()
                        .join(",")
                )
            }),
            col("Ports", "string", 0, |o| {
                json!(if o["spec"]["tls"].is_array() {
                    "80, 443"
                } else {
                    "80"
                })
            }),
            a,
        ],
        "Lease" => vec![
            n,
            col("Holder", "string", 0, |o| {
                o["spec"]["holderIdentity"].clone()
            }),
            a,
        ],
        "Workspace" => vec![
            n,
            col("Phase", "string", 0, |o| o["status"]["phase"].clone()),
            col("Path", "string", 0, |o| o["status"]["path"].clone()),
            a,
        ],
        _ => vec![n, a],
    }
}

fn partial_metadata(o: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]})
}

/// Columns of a custom resource: Name, then the CRD's printer columns (Age by default).
fn custom_columns(
    c: &crate::resources::CustomVersion,
) -> Vec<(String, String, u8, Option<&crate::jsonpath::JsonPath>)> {
    let mut out = vec![("Name".to_string(), "string".to_string(), 0, None)];
    if c.printer_columns.is_empty() {
        out.push(("Age".to_string(), "date".to_string(), 0, None));
    }
    for p in &c.printer_columns {
        out.push((p.name.clone(), p.ty.clone(), p.priority, Some(&p.path)));
    }
    out
}

fn custom_cell(o: &Value, name: &str, ty: &str, path: Option<&crate::jsonpath::JsonPath>) -> Value {
    let Some(path) = path else {
        return if name == "Name" {
            o["metadata"]["name"].clone()
        } else {
            age(o)
        };
    };
    let found = path.eval(o);
    match (found.first(), ty) {
        (None, _) => json!(""),
        (Some(v), "date") => age_of(v),
        (Some(v), _) if found.len() == 1 => (*v).clone(),
        (Some(_), _) => json!(
            found
                .iter()
                .map(|v| v
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| v.to_string()))
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}

/// A Table of `objects` of type `t`. `include_object`: `None`, `Metadata` (default), `Object`.
pub fn table(
    t: &ResourceType,
    version: &str,
    objects: &[Value],
    list_metadata: Value,
    include_object: &str,
    with_columns: bool,
) -> Value {
    let custom = t.custom().map(custom_columns);
    let cols = if custom.is_some() {
        Vec::new()
    } else {
        columns(&t.kind)
    };
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let cells: Vec<Value> = match &custom {
                Some(cc) => cc
                    .iter()
                    .map(|(n, ty, _, p)| custom_cell(o, n, ty, *p))
                    .collect(),
                None => cols
                    .iter()
                    .map(|c| {
                        let v = (c.cell)(o);
                        if v.is_null() { json!("") } else { v }
                    })
                    .collect(),
            };
            let mut row = json!({"cells": cells});
            match include_object {
                "None" => {}
                "Object" => row["object"] = o.clone(),
                _ => row["object"] = partial_metadata(o),
            }
            row
        })
        .collect();
    let mut out = json!({
        "kind": "Table",
        "apiVersion": format!("meta.k8s.io/{version}"),
        "metadata": list_metadata,
        "rows": rows,
    });
    if with_columns {
        let defs: Vec<(String, String, u8)> = match &custom {
            Some(cc) => cc
                .iter()
                .map(|(n, ty, p, _)| (n.clone(), ty.clone(), *p))
                .collect(),
            None => cols
                .iter()
                .map(|c| (c.name.to_string(), c.ty.to_string(), c.priority))
                .collect(),
        };
        out["columnDefinitions"] = defs
            .iter()
            .map(|(name, ty, priority)| {
                json!({
                    "name": name,
                    "type": ty,
                    "format": if name == "Name" { "name" } else { "" },
                    "description": "",
                    "priority": priority,
                })
            })
            .collect();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;

    #[test]
    fn durations_like_kube() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(150), "2m30s");
        assert_eq!(human_duration(600), "10m");
        assert_eq!(human_duration(3 * 3600 + 60), "3h1m");
        assert_eq!(human_duration(10 * 86400), "10d");
    }

    #[test]
    fn deployment_row() {
        let t = Catalog::builtin()
            .lookup("apps", "v1", "deployments")
            .unwrap();
        let d = json!({"metadata": {"name": "web", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": {"spec": {"containers": [{"name": "c", "image": "i:1"}]}}},
            "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}});
        let tb = table(t, "v1", &[d], json!({}), "Metadata", true);
        assert_eq!(tb["rows"][0]["cells"][0], "web");
        assert_eq!(tb["rows"][0]["cells"][1], "2/3");
        assert_eq!(tb["rows"][0]["cells"][7], "app=web");
        assert_eq!(tb["columnDefinitions"][5]["priority"], 1);
        assert_eq!(tb["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(
            wants_table("application/json;as=Table;v=v1;g=meta.k8s.io,application/json"),
            Some("v1")
        );
    }
}
