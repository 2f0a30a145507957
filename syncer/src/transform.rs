//! What an upstream object becomes downstream: the same object in its downstream
//! namespace, without what belongs to the upstream server (identity, versions, managed
//! fields, owner references, finalizers, status) or to the cluster that allocates it
//! (Service cluster IPs and node ports, a Job's generated selector, a claim's bound
//! volume), labelled as synced.

use serde_json::{Map, Value};
use sluice_api::mcs::{ANNOTATION_DRAINING, ANNOTATION_WEIGHT, DEFAULT_WEIGHT};
use sluice_api::sync::{
    ANNOTATION_LOGICAL_CLUSTER, ANNOTATION_UPSTREAM_GENERATION, ANNOTATION_UPSTREAM_NAMESPACE,
    INGRESS_HOSTS_ANNOTATION, LABEL_LOGICAL_CLUSTER, LABEL_SYNCED, ORDINALS_ANNOTATION_PREFIX,
    REPLICAS_ANNOTATION_PREFIX, STATE_LABEL_PREFIX, STATUS_ANNOTATION_PREFIX, draining_annotation,
    logical_cluster_label_value, parse_ingress_hosts, share_on, start_on, weight_annotation,
};
use sluice_api::{ClusterName, LOGICAL_CLUSTER_ANNOTATION, LogicalClusterPath, PathError};

use sluice_api::synced_kinds::SyncedKind;
use sluice_api::tenancy::{PodSecurityLevel, normalize_domain};

/// Why an upstream object cannot be synced.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TransformError {
    #[error(
        "the object carries no {LOGICAL_CLUSTER_ANNOTATION} annotation (not read through a wildcard watch)"
    )]
    NoLogicalCluster,
    #[error(transparent)]
    BadLogicalCluster(#[from] PathError),
    #[error("the object has no namespace: only namespaced kinds travel")]
    NotNamespaced,
    #[error("the object has no name")]
    NoName,
    #[error("a {0} Secret is made by each cluster for itself")]
    ClusterOwnedSecret(String),
    #[error("the Ingress was admitted for none of its hosts (see its HostNotAdmitted Events)")]
    NoAdmittedHosts,
}

/// Where an upstream object came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    pub logical_cluster: LogicalClusterPath,
    pub namespace: String,
    pub name: String,
}

/// Metadata the upstream server owns, never copied.
const SERVER_METADATA: [&str; 10] = [
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "ownerReferences",
    "finalizers",
    "selfLink",
];

/// Annotations that describe the upstream copy, not the object.
const UPSTREAM_ANNOTATIONS: [&str; 3] = [
    LOGICAL_CLUSTER_ANNOTATION,
    sluice_api::sync::ANNOTATION_DOWNSTREAM_NAMESPACE,
    sluice_api::sync::LAST_APPLIED_ANNOTATION,
];

/// Prefixes of annotations Sluice keeps upstream (status reports, replica shares, first
/// ordinals).
const UPSTREAM_ANNOTATION_PREFIXES: [&str; 3] = [
    STATUS_ANNOTATION_PREFIX,
    REPLICAS_ANNOTATION_PREFIX,
    ORDINALS_ANNOTATION_PREFIX,
];

fn stays_upstream(annotation: &str) -> bool {
    UPSTREAM_ANNOTATIONS.contains(&annotation)
        || UPSTREAM_ANNOTATION_PREFIXES
            .iter()
            .any(|p| annotation.starts_with(p))
}

/// Keep of an Ingress only the rules (and TLS hosts, and default backend) of the hosts the
/// control plane admitted it for ([`INGRESS_HOSTS_ANNOTATION`]): a shared cluster's ingress
/// controller then serves a tenant no host it does not own, whatever controller it is.
fn admitted_rules_only(
    obj: &mut Map<String, Value>,
    upstream_meta: &Value,
) -> Result<(), TransformError> {
    let admitted: std::collections::HashSet<String> = upstream_meta["annotations"]
        [INGRESS_HOSTS_ANNOTATION]
        .as_str()
        .and_then(parse_ingress_hosts)
        .unwrap_or_default()
        .into_iter()
        .collect();
    let ok = |host: Option<&str>| admitted.contains(&normalize_domain(host.unwrap_or("")));
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return Err(TransformError::NoAdmittedHosts);
    };
    if !ok(None) {
        spec.remove("defaultBackend");
    }
    if let Some(rules) = spec.get_mut("rules").and_then(Value::as_array_mut) {
        rules.retain(|r| ok(r["host"].as_str()));
    }
    if let Some(tls) = spec.get_mut("tls").and_then(Value::as_array_mut) {
        for t in tls.iter_mut() {
            if let Some(hosts) = t.get_mut("hosts").and_then(Value::as_array_mut) {
                hosts.retain(|h| ok(h.as_str()));
            }
        }
        tls.retain(|t| t["hosts"].as_array().is_none_or(|h| !h.is_empty()));
    }
    let rules = spec
        .get("rules")
        .and_then(Value::as_array)
        .is_some_and(|r| !r.is_empty());
    if !rules && !spec.contains_key("defaultBackend") {
        return Err(TransformError::NoAdmittedHosts);
    }
    Ok(())
}

/// The downstream form, for `cluster`, of `upstream` (a whole object as JSON, of kind
/// `kind`: list items may carry no `apiVersion`/`kind` of their own) and where it came
/// from, in downstream namespace `down_ns` (the name the control plane gave its namespace).
/// A workload whose replicas are spread gets the cluster's share.
pub fn downstream(
    upstream: &Value,
    kind: &SyncedKind,
    cluster: &ClusterName,
    down_ns: &str,
) -> Result<(Origin, Value), TransformError> {
    let meta = &upstream["metadata"];
    let path: LogicalClusterPath = meta["annotations"][LOGICAL_CLUSTER_ANNOTATION]
        .as_str()
        .ok_or(TransformError::NoLogicalCluster)?
        .parse()?;
    let namespace = meta["namespace"]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or(TransformError::NotNamespaced)?;
    let name = meta["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or(TransformError::NoName)?;
    let kind_name = kind.kind;
    if kind_name == "Secret"
        && let Some(t) = upstream["type"].as_str()
        && t == "kubernetes.io/service-account-token"
    {
        return Err(TransformError::ClusterOwnedSecret(t.to_string()));
    }

    let mut out = upstream.clone();
    let Some(obj) = out.as_object_mut() else {
        return Err(TransformError::NoName);
    };
    obj.remove("status");
    obj.insert("apiVersion".into(), Value::from(kind.api_version()));
    obj.insert("kind".into(), Value::from(kind_name));
    let mut m = Map::new();
    m.insert("name".into(), Value::from(name));
    m.insert("namespace".into(), Value::from(down_ns));
    if let Some(src) = meta.as_object() {
        for (k, v) in src {
            if !SERVER_METADATA.contains(&k.as_str())
                && !["name", "namespace", "labels", "annotations", "generateName"]
                    .contains(&k.as_str())
            {
                m.insert(k.clone(), v.clone());
            }
        }
    }
    let mut labels: Map<String, Value> = meta["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| !k.starts_with(STATE_LABEL_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    labels.insert(LABEL_SYNCED.into(), Value::from("true"));
    m.insert("labels".into(), Value::Object(labels));
    let mut annotations: Map<String, Value> = meta["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| !stays_upstream(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if kind.reports_status()
        && let Some(g) = meta["generation"].as_i64()
    {
        annotations.insert(
            ANNOTATION_UPSTREAM_GENERATION.into(),
            Value::from(g.to_string()),
        );
    }
    if let Some(n) = share_on(upstream, cluster)
        && let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut)
        && spec.contains_key("replicas")
    {
        spec.insert("replicas".into(), Value::from(n));
    }
    // A StatefulSet moving one ordinal at a time runs a range of its ordinals here. The
    // ordinals it gives up are moving, not scaled away: their claims stay (the next
    // cluster's copy is made from them) whatever `whenScaled` says.
    if kind_name == "StatefulSet"
        && let Some(start) = start_on(upstream, cluster)
        && let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut)
    {
        spec.insert("ordinals".into(), serde_json::json!({"start": start}));
        if let Some(policy) = spec
            .get_mut("persistentVolumeClaimRetentionPolicy")
            .and_then(Value::as_object_mut)
        {
            policy.insert("whenScaled".into(), Value::from("Retain"));
        }
    }
    if !annotations.is_empty() {
        m.insert("annotations".into(), Value::Object(annotations));
    }
    obj.insert("metadata".into(), Value::Object(m));
    strip_cluster_owned(kind_name, obj);
    if kind_name == "Ingress" {
        admitted_rules_only(obj, meta)?;
    }
    Ok((
        Origin {
            logical_cluster: path,
            namespace: namespace.to_string(),
            name: name.to_string(),
        },
        out,
    ))
}

/// Downstream namespace `name`, of upstream `namespace` of logical cluster `path`: labelled with
/// its logical cluster (so the MCS controller exports its Services) and annotated with where
/// it comes from. `pod_security`, the level the control plane enforces there, becomes the
/// namespace's PodSecurity labels, so the cluster's own PodSecurity admission enforces it
/// too.
pub fn namespace_object(
    name: &str,
    path: &LogicalClusterPath,
    namespace: &str,
    pod_security: Option<PodSecurityLevel>,
) -> Value {
    let mut ns = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": {
                LABEL_SYNCED: "true",
                LABEL_LOGICAL_CLUSTER: logical_cluster_label_value(path),
            },
            "annotations": {
                ANNOTATION_LOGICAL_CLUSTER: path.as_str(),
                ANNOTATION_UPSTREAM_NAMESPACE: namespace,
            },
        },
    });
    if let Some(level) = pod_security {
        let labels = &mut ns["metadata"]["labels"];
        for mode in ["enforce", "warn"] {
            labels[format!("pod-security.kubernetes.io/{mode}")] = level.as_str().into();
            labels[format!("pod-security.kubernetes.io/{mode}-version")] = "latest".into();
        }
    }
    ns
}

/// The level the control plane records as enforced in an upstream namespace.
pub fn pod_security_of(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
) -> Option<PodSecurityLevel> {
    annotations?
        .get(sluice_api::tenancy::POD_SECURITY_ANNOTATION)
        .and_then(|l| PodSecurityLevel::parse(l))
}

/// Give downstream Service `svc` this cluster's traffic weight and draining state, as its
/// upstream namespace (`ns_annotations`) sets them for `cluster` while traffic shifts off
/// it. Both are always written (the Service's own values, else the defaults), so that a
/// shift that ends or is called off is undone downstream too.
pub fn with_traffic(
    svc: &mut Value,
    ns_annotations: Option<&std::collections::BTreeMap<String, String>>,
    cluster: &ClusterName,
) {
    let from_ns = |key: String| ns_annotations.and_then(|a| a.get(&key)).cloned();
    let own = |key: &str| {
        svc["metadata"]["annotations"][key]
            .as_str()
            .map(str::to_string)
    };
    let weight = from_ns(weight_annotation(cluster))
        .or_else(|| own(ANNOTATION_WEIGHT))
        .unwrap_or_else(|| DEFAULT_WEIGHT.to_string());
    let draining = from_ns(draining_annotation(cluster))
        .or_else(|| own(ANNOTATION_DRAINING))
        .is_some_and(|d| d.trim().eq_ignore_ascii_case("true"));
    let Some(meta) = svc.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let annotations = meta
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(a) = annotations.as_object_mut() {
        a.insert(ANNOTATION_WEIGHT.into(), Value::from(weight));
        a.insert(
            ANNOTATION_DRAINING.into(),
            Value::from(draining.to_string()),
        );
    }
}

/// Drop what the downstream cluster allocates for itself.
fn strip_cluster_owned(kind: &str, obj: &mut Map<String, Value>) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    match kind {
        // A headless Service stays headless: `None` is a choice, not an allocation. Node
        // ports stay: the logical cluster allocates none, so one that is there was asked
        // for, and the physical cluster grants it or refuses the Service.
        "Service" if spec.get("clusterIP").and_then(Value::as_str) != Some("None") => {
            spec.remove("clusterIP");
            spec.remove("clusterIPs");
        }
        "PersistentVolumeClaim" => {
            spec.remove("volumeName");
        }
        // The cluster's scheduler picks the node.
        "Pod" => {
            spec.remove("nodeName");
        }
        "Job" => strip_generated_selector(spec),
        "CronJob" => {
            if let Some(job) = spec
                .get_mut("jobTemplate")
                .and_then(|t| t.get_mut("spec"))
                .and_then(Value::as_object_mut)
            {
                strip_generated_selector(job);
            }
        }
        _ => {}
    }
}

/// Labels by which a Job's generated selector names its own uid.
const JOB_UID_LABELS: [&str; 4] = [
    "controller-uid",
    "batch.kubernetes.io/controller-uid",
    "job-name",
    "batch.kubernetes.io/job-name",
];

/// A Job's selector and pod labels that the API server generated from the upstream uid:
/// the downstream server generates its own.
fn strip_generated_selector(job: &mut Map<String, Value>) {
    if job.get("manualSelector").and_then(Value::as_bool) == Some(true) {
        return;
    }
    job.remove("selector");
    if let Some(labels) = job
        .get_mut("template")
        .and_then(|t| t.get_mut("metadata"))
        .and_then(|m| m.get_mut("labels"))
        .and_then(Value::as_object_mut)
    {
        for l in JOB_UID_LABELS {
            labels.remove(l);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use sluice_api::synced_kinds::BUILTIN;

    fn kind(name: &str) -> &'static SyncedKind {
        BUILTIN.iter().find(|k| k.kind == name).expect("kind")
    }

    fn downstream(v: &Value) -> Result<(Origin, Value), TransformError> {
        super::downstream(
            v,
            kind(v["kind"].as_str().expect("kind")),
            &ClusterName::new("east"),
            DOWN_NS,
        )
    }

    const DOWN_NS: &str = "default-k3y3dk3y3dk3y3d";

    fn with_meta(kind: &str, extra: Value) -> Value {
        let mut v = json!({
            "apiVersion": "v1",
            "kind": kind,
            "metadata": {
                "name": "web",
                "namespace": "default",
                "uid": "u-1",
                "resourceVersion": "42",
                "generation": 3,
                "creationTimestamp": "2026-11-24T00:00:00Z",
                "managedFields": [{"manager": "kubectl"}],
                "ownerReferences": [{"uid": "u-0", "kind": "Deployment", "name": "x", "apiVersion": "apps/v1"}],
                "finalizers": ["sluice.dev/east"],
                "labels": {"app": "web", "state.sluice.dev/east": "Sync"},
                "annotations": {
                    "sluice.dev/logical-cluster": "root:shop",
                    "kubectl.kubernetes.io/last-applied-configuration": "{}",
                    "team": "a",
                },
            },
            "status": {"x": 1},
        });
        if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            for (k, x) in e {
                o.insert(k.clone(), x.clone());
            }
        }
        v
    }

    #[test]
    fn an_ingress_goes_down_with_its_admitted_hosts_only() {
        let rule = |h: &str| json!({"host": h, "http": {"paths": []}});
        let mut up = with_meta(
            "Ingress",
            json!({"apiVersion": "networking.k8s.io/v1", "spec": {
                "defaultBackend": {"service": {"name": "web"}},
                "rules": [rule("Shop.A.example"), rule("payments-api.com")],
                "tls": [{"hosts": ["payments-api.com"]}, {"hosts": ["shop.a.example"]}]}}),
        );
        up["metadata"]["annotations"]["sluice.dev/ingress-hosts"] = json!(r#"["shop.a.example"]"#);
        let (_, down) = downstream(&up).expect("transform");
        assert_eq!(
            down["spec"],
            json!({"rules": [rule("Shop.A.example")], "tls": [{"hosts": ["shop.a.example"]}]})
        );
        // Without a record (or with nothing admitted) nothing of it goes down.
        up["metadata"]["annotations"]
            .as_object_mut()
            .expect("annotations")
            .remove("sluice.dev/ingress-hosts");
        assert!(matches!(
            downstream(&up),
            Err(TransformError::NoAdmittedHosts)
        ));
    }

    #[test]
    fn upstream_identity_and_status_stay_upstream() {
        let (origin, down) =
            downstream(&with_meta("ConfigMap", json!({"data": {"a": "b"}}))).expect("transform");
        assert_eq!(origin.logical_cluster.as_str(), "root:shop");
        assert_eq!(origin.namespace, "default");
        assert_eq!(
            down,
            json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": "web",
                    "namespace": DOWN_NS,
                    "labels": {"app": "web", "sluice.dev/synced": "true"},
                    "annotations": {"team": "a"},
                },
                "data": {"a": "b"},
            })
        );
    }

    #[test]
    fn cluster_allocated_fields_are_left_to_the_cluster() {
        let svc = with_meta(
            "Service",
            json!({"spec": {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"], "type": "NodePort",
                "ports": [{"port": 80, "nodePort": 30080}]}}),
        );
        let (_, down) = downstream(&svc).expect("service");
        assert_eq!(
            down["spec"],
            json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}]}),
            "a node port asked for upstream is asked for downstream"
        );
        let headless = with_meta(
            "Service",
            json!({"spec": {"clusterIP": "None", "clusterIPs": ["None"]}}),
        );
        let (_, down) = downstream(&headless).expect("headless");
        assert_eq!(down["spec"]["clusterIP"], "None");

        let job = with_meta(
            "Job",
            json!({"spec": {"selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}},
                "template": {"metadata": {"labels": {"batch.kubernetes.io/controller-uid": "u-1", "job-name": "web", "app": "w"}}}}}),
        );
        let (_, down) = downstream(&job).expect("job");
        assert_eq!(
            down["spec"],
            json!({"template": {"metadata": {"labels": {"app": "w"}}}})
        );
    }

    #[test]
    fn a_statefulset_moving_by_ordinals_runs_its_range_and_keeps_the_claims_it_gives_up() {
        let mut d = with_meta(
            "StatefulSet",
            json!({"apiVersion": "apps/v1", "spec": {"replicas": 3,
                "persistentVolumeClaimRetentionPolicy": {"whenScaled": "Delete", "whenDeleted": "Delete"}}}),
        );
        d["metadata"]["annotations"]["replicas.sluice.dev/east"] = json!("2");
        d["metadata"]["annotations"]["ordinals.sluice.dev/east"] = json!("1");
        let (_, down) = downstream(&d).expect("statefulset");
        assert_eq!(down["spec"]["replicas"], 2);
        assert_eq!(down["spec"]["ordinals"], json!({"start": 1}));
        assert_eq!(
            down["spec"]["persistentVolumeClaimRetentionPolicy"],
            json!({"whenScaled": "Retain", "whenDeleted": "Delete"})
        );
        assert!(
            down["metadata"]["annotations"]
                .get("ordinals.sluice.dev/east")
                .is_none()
        );
        let (_, whole) =
            super::downstream(&d, kind("StatefulSet"), &ClusterName::new("west"), DOWN_NS)
                .expect("statefulset");
        assert!(whole["spec"].get("ordinals").is_none());
        assert_eq!(
            whole["spec"]["persistentVolumeClaimRetentionPolicy"]["whenScaled"],
            "Delete"
        );
    }

    #[test]
    fn workloads_carry_their_upstream_generation_and_their_cluster_share() {
        let mut d = with_meta(
            "Deployment",
            json!({"apiVersion": "apps/v1", "spec": {"replicas": 5}}),
        );
        d["metadata"]["annotations"]["replicas.sluice.dev/east"] = json!("2");
        d["metadata"]["annotations"]["replicas.sluice.dev/west"] = json!("3");
        d["metadata"]["annotations"]["status.sluice.dev/west"] = json!("{}");
        let (_, down) = downstream(&d).expect("deployment");
        assert_eq!(down["spec"]["replicas"], 2);
        assert_eq!(
            down["metadata"]["annotations"],
            json!({"team": "a", "sluice.dev/upstream-generation": "3"})
        );
    }

    #[test]
    fn a_service_carries_the_clusters_weight_and_draining_state() {
        let east = ClusterName::new("east");
        let mut svc =
            json!({"metadata": {"name": "web", "annotations": {"sluice.dev/weight": "30"}}});
        with_traffic(&mut svc, None, &east);
        assert_eq!(
            svc["metadata"]["annotations"]["sluice.dev/weight"], "30",
            "its own"
        );
        assert_eq!(
            svc["metadata"]["annotations"]["sluice.dev/draining"],
            "false"
        );
        let shifting: std::collections::BTreeMap<String, String> = [
            ("weight.sluice.dev/east".to_string(), "40".to_string()),
            ("draining.sluice.dev/east".to_string(), "true".to_string()),
            ("weight.sluice.dev/west".to_string(), "0".to_string()),
        ]
        .into();
        with_traffic(&mut svc, Some(&shifting), &east);
        assert_eq!(svc["metadata"]["annotations"]["sluice.dev/weight"], "40");
        assert_eq!(
            svc["metadata"]["annotations"]["sluice.dev/draining"],
            "true"
        );
        let mut bare = json!({"metadata": {"name": "web"}});
        with_traffic(&mut bare, Some(&shifting), &ClusterName::new("north"));
        assert_eq!(bare["metadata"]["annotations"]["sluice.dev/weight"], "100");
    }

    #[test]
    fn the_downstream_namespace_says_where_it_comes_from() {
        let (origin, down) = downstream(&with_meta("ConfigMap", json!({}))).expect("cm");
        let ns = namespace_object(
            DOWN_NS,
            &origin.logical_cluster,
            &origin.namespace,
            Some(PodSecurityLevel::Baseline),
        );
        assert_eq!(ns["metadata"]["name"], down["metadata"]["namespace"]);
        assert_eq!(
            ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
            "baseline"
        );
        assert_eq!(
            ns["metadata"]["labels"]["sluice.dev/logical-cluster"],
            "root.shop"
        );
        assert_eq!(
            ns["metadata"]["annotations"]["sluice.dev/logical-cluster"],
            "root:shop"
        );
        assert_eq!(
            ns["metadata"]["annotations"]["sluice.dev/upstream-namespace"],
            "default"
        );
    }

    #[test]
    fn objects_that_cannot_travel_say_why() {
        let mut v = with_meta("ConfigMap", json!({}));
        v["metadata"]["annotations"] = json!({});
        assert_eq!(
            downstream(&v).unwrap_err(),
            TransformError::NoLogicalCluster
        );
        let mut v = with_meta("ConfigMap", json!({}));
        v["metadata"]["annotations"]["sluice.dev/logical-cluster"] = json!("shop");
        assert!(matches!(
            downstream(&v),
            Err(TransformError::BadLogicalCluster(_))
        ));
        let token = with_meta(
            "Secret",
            json!({"type": "kubernetes.io/service-account-token"}),
        );
        assert!(matches!(
            downstream(&token),
            Err(TransformError::ClusterOwnedSecret(_))
        ));
        let mut v = with_meta("ConfigMap", json!({}));
        v["metadata"]["namespace"] = json!("");
        assert_eq!(downstream(&v).unwrap_err(), TransformError::NotNamespaced);
    }
}
