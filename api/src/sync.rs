//! The syncer's contract, shared by the placement controllers (which label what goes
//! where), the syncer (which copies it down) and the MCS controller (which exports the
//! Services of synced namespaces): label names and the downstream names of upstream
//! namespaces.
//!
//! A namespace `ns` of logical cluster `root:shop` lives in every physical cluster under
//! one name: a valid DNS label, the same in every cluster (MCS namespace sameness), so a
//! Service keeps its clusterset name wherever it runs. The control plane chooses it with a
//! keyed hash when the namespace is created and stamps it on the namespace
//! ([`ANNOTATION_DOWNSTREAM_NAMESPACE`]); the parts read the stamp, never recompute it.

use crate::LogicalClusterPath;
use crate::names::ClusterName;

/// Prefix of the state label: `state.sluice.dev/<cluster>` on an upstream object places
/// it on that physical cluster.
pub const STATE_LABEL_PREFIX: &str = "state.sluice.dev/";
/// The value of a state label for an object that is to be synced.
pub const STATE_SYNC: &str = "Sync";
/// Label on a downstream namespace: the logical cluster it belongs to, encoded as a label
/// value ([`logical_cluster_label_value`]). The MCS controller exports the Services of
/// namespaces that carry it.
pub const LABEL_LOGICAL_CLUSTER: &str = "sluice.dev/logical-cluster";
/// Annotation on a downstream namespace: the logical cluster path, as written (the same
/// annotation a wildcard list puts on every object).
pub const ANNOTATION_LOGICAL_CLUSTER: &str = crate::LOGICAL_CLUSTER_ANNOTATION;
/// Annotation on a downstream namespace: the upstream namespace's name.
pub const ANNOTATION_UPSTREAM_NAMESPACE: &str = "sluice.dev/upstream-namespace";
/// Label on everything the syncer created downstream (so it finds what to delete).
pub const LABEL_SYNCED: &str = "sluice.dev/synced";
/// The syncer's server-side apply field manager, upstream and downstream.
pub const FIELD_MANAGER: &str = "sluice-syncer";
/// The field manager of the placement controllers' writes (they release the Pod mirrors of
/// a cluster that is gone).
pub const PLACEMENT_MANAGER: &str = "sluice-placement";
/// Break-glass placement: a namespace labelled `sluice.dev/cluster: <name>` runs on that
/// cluster, whatever the Placements say.
pub const LABEL_CLUSTER: &str = "sluice.dev/cluster";
/// Where `kubectl apply` keeps what it applied: it describes the upstream copy, stays
/// there, and no controller reads it.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// Prefix of the annotation in which a cluster's syncer reports an upstream object's
/// downstream status (`status.sluice.dev/<cluster>`, a [`StatusReport`] as JSON); the
/// placement controller sums the reports into the object's status.
pub const STATUS_ANNOTATION_PREFIX: &str = "status.sluice.dev/";
/// Annotation on a downstream object: the upstream generation it was applied from, so a
/// downstream status can be matched to the upstream spec it reflects.
pub const ANNOTATION_UPSTREAM_GENERATION: &str = "sluice.dev/upstream-generation";
/// Prefix of a soft finalizer on an upstream namespace (`finalizers.sluice.dev/<cluster>`):
/// while it is there, a move does not remove the namespace from that cluster (the
/// traffic-drain gate holds one while connections to the cluster's endpoints drain).
pub const SOFT_FINALIZER_PREFIX: &str = "finalizers.sluice.dev/";

/// Prefix of the finalizer a cluster's syncer puts on each upstream object it has synced
/// (`syncer.sluice.dev/<cluster>`): deleting the object upstream waits until the
/// downstream copy is gone. Whoever unplaces the object from the cluster releases it.
pub const SYNC_FINALIZER_PREFIX: &str = "syncer.sluice.dev/";

/// The sync finalizer of `cluster`.
pub fn sync_finalizer(cluster: &ClusterName) -> String {
    format!("{SYNC_FINALIZER_PREFIX}{cluster}")
}

/// The JSON patch that sets an object's finalizers to `want`, on condition that
/// it is still at `resource_version` (a concurrent change to the list is a conflict, not
/// lost).
pub fn finalizers_patch(resource_version: &str, want: &[String]) -> serde_json::Value {
    serde_json::json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version},
        {"op": "add", "path": "/metadata/finalizers", "value": want},
    ])
}

/// Prefix of the annotation by which the placement controller gives a cluster its share of
/// a spread workload's replicas (`replicas.sluice.dev/<cluster>: "3"`); the syncer writes
/// that count downstream instead of `spec.replicas`.
pub const REPLICAS_ANNOTATION_PREFIX: &str = "replicas.sluice.dev/";

/// The replica share annotation key for `cluster`.
pub fn replicas_annotation(cluster: &ClusterName) -> String {
    format!("{REPLICAS_ANNOTATION_PREFIX}{cluster}")
}

/// The share of `obj`'s replicas the placement controller gave `cluster`, when it split
/// them (`None` when it did not).
pub fn share_on(obj: &serde_json::Value, cluster: &ClusterName) -> Option<i64> {
    obj["metadata"]["annotations"][replicas_annotation(cluster)]
        .as_str()
        .and_then(|n| n.parse::<i64>().ok())
        .filter(|n| *n >= 0)
}

/// Prefix of the annotation by which the placement controller gives a cluster the first
/// ordinal it runs of a StatefulSet moving one ordinal at a time
/// (`ordinals.sluice.dev/<cluster>: "1"`, with its `replicas.sluice.dev/<cluster>`); the
/// syncer writes it downstream as `spec.ordinals.start` (docs/stateful.md).
pub const ORDINALS_ANNOTATION_PREFIX: &str = "ordinals.sluice.dev/";

/// The first-ordinal annotation key for `cluster`.
pub fn ordinals_annotation(cluster: &ClusterName) -> String {
    format!("{ORDINALS_ANNOTATION_PREFIX}{cluster}")
}

/// The first ordinal of `obj` the placement controller gave `cluster`, when it gave one.
pub fn start_on(obj: &serde_json::Value, cluster: &ClusterName) -> Option<i64> {
    obj["metadata"]["annotations"][ordinals_annotation(cluster)]
        .as_str()
        .and_then(|n| n.parse::<i64>().ok())
        .filter(|n| *n >= 0)
}

/// The status annotation key for `cluster`.
pub fn status_annotation(cluster: &ClusterName) -> String {
    format!("{STATUS_ANNOTATION_PREFIX}{cluster}")
}

/// The soft finalizer annotation key for `cluster`.
pub fn soft_finalizer(cluster: &ClusterName) -> String {
    format!("{SOFT_FINALIZER_PREFIX}{cluster}")
}

/// The clusters an object's (or namespace's) labels place it on, sorted.
pub fn placed_clusters<'a>(
    labels: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Vec<ClusterName> {
    let mut out: Vec<ClusterName> = labels
        .into_iter()
        .filter_map(|(k, _)| k.strip_prefix(STATE_LABEL_PREFIX))
        .filter(|c| !c.is_empty())
        .map(ClusterName::new)
        .collect();
    out.sort();
    out
}

/// What one cluster's syncer reports about an upstream object: its downstream status, and
/// the upstream generation that status reflects (`observedGeneration` is the downstream
/// object's own, meaningless upstream).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    /// The upstream generation the downstream controller has acted on; 0 when it has not
    /// yet caught up with the generation last applied.
    #[serde(default)]
    pub observed_generation: i64,
    /// The replicas the cluster was asked to run (its share when split): a report is
    /// current only while this is what the cluster is to run now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
    /// The first ordinal the cluster was asked to run (a StatefulSet's
    /// `spec.ordinals.start`), when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<i64>,
    #[serde(default)]
    pub status: serde_json::Value,
}

/// Prefix of the annotation on an upstream namespace that sets a cluster's traffic weight
/// for the namespace's Services (`weight.sluice.dev/<cluster>: "40"`, 0 to 100): the
/// placement controllers write it while traffic shifts off a cluster, the cluster's syncer
/// puts it on the downstream Services as `sluice.dev/weight`, and the MCS EndpointSlices
/// carry it to every dataplane. Unset: the default weight.
pub const WEIGHT_ANNOTATION_PREFIX: &str = "weight.sluice.dev/";
/// Prefix of the annotation on an upstream namespace that marks a cluster's endpoints of the
/// namespace's Services draining (`draining.sluice.dev/<cluster>: "true"`), carried down
/// like the weight, as `sluice.dev/draining`.
pub const DRAINING_ANNOTATION_PREFIX: &str = "draining.sluice.dev/";
/// Prefix of the annotation on an upstream namespace recording when traffic began to
/// shift off a cluster (`shift.sluice.dev/<cluster>`, RFC 3339).
pub const SHIFT_ANNOTATION_PREFIX: &str = "shift.sluice.dev/";

pub fn weight_annotation(cluster: &ClusterName) -> String {
    format!("{WEIGHT_ANNOTATION_PREFIX}{cluster}")
}

pub fn draining_annotation(cluster: &ClusterName) -> String {
    format!("{DRAINING_ANNOTATION_PREFIX}{cluster}")
}

pub fn shift_annotation(cluster: &ClusterName) -> String {
    format!("{SHIFT_ANNOTATION_PREFIX}{cluster}")
}

/// Prefix of the annotation in which a cluster's syncer reports, on an upstream namespace,
/// what that cluster's MCS imports hold for the namespace's Services
/// (`imports.sluice.dev/<cluster>`, an [`ImportReport`] as JSON): a move waits until every
/// member cluster sees the new cluster's endpoints Ready before the old one is touched.
pub const IMPORTS_ANNOTATION_PREFIX: &str = "imports.sluice.dev/";

/// The import report annotation key for `cluster`.
pub fn imports_annotation(cluster: &ClusterName) -> String {
    format!("{IMPORTS_ANNOTATION_PREFIX}{cluster}")
}

/// What one cluster's MCS EndpointSlices hold for the Services of one namespace: by
/// Service name, what each source cluster (by MCS cluster id) contributes. Only Services
/// with at least one source appear.
pub type ImportReport =
    std::collections::BTreeMap<String, std::collections::BTreeMap<String, SourceImport>>;

/// One source cluster's part of an imported Service, as the importing cluster sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceImport {
    /// Its Ready endpoints.
    pub ready: u32,
    /// Its traffic weight, when not the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// Its endpoints are marked draining.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub draining: bool,
    /// Live connections and in-flight requests this cluster's dataplane holds to the
    /// source's endpoints, once it has them as draining (its [`TrafficReport`]); `None`
    /// while the dataplane has not reported them draining.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<u64>,
    /// How the source answered this cluster's dataplane lately, while a shift is under way
    /// (its [`HealthReport`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<SourceHealth>,
}

/// Annotation on a downstream namespace in which the cluster's dataplane reports, while a
/// traffic shift is under way for one of its Services, how each source cluster answered
/// over the last seconds (a [`HealthReport`] as JSON): a move whose new cluster answers
/// worse than the old one is rolled back.
pub const HEALTH_ANNOTATION: &str = "traffic.sluice.dev/health";

/// How one source cluster answered: requests, errors (failed attempts, 5xx, gRPC errors)
/// and the p99 latency of its answers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceHealth {
    pub requests: u64,
    pub errors: u64,
    /// p99 latency in microseconds (an upper bound: a histogram bucket's).
    pub p99_micros: u64,
}

/// A dataplane's health report by Service name and source cluster id.
pub type HealthReport =
    std::collections::BTreeMap<String, std::collections::BTreeMap<String, SourceHealth>>;

/// Annotation on a downstream namespace in which the cluster's dataplane reports its
/// traffic to draining sources (a [`TrafficReport`] as JSON; absent when none drains):
/// the syncer carries it up into the cluster's import report, and a move removes the old
/// cluster only when every member reports no live connection to it.
pub const TRAFFIC_ANNOTATION: &str = "traffic.sluice.dev/active";

/// A dataplane's live connections and in-flight requests to the endpoints of draining
/// source clusters, by Service name and source cluster id (zero included: "drained").
pub type TrafficReport =
    std::collections::BTreeMap<String, std::collections::BTreeMap<String, u64>>;

/// The state label key for `cluster`.
pub fn state_label(cluster: &ClusterName) -> String {
    format!("{STATE_LABEL_PREFIX}{cluster}")
}

/// A logical cluster path as a label value: `root:shop` → `root.shop` (segments are DNS
/// labels, so the dots are unambiguous); a path too long for a label value (63) is cut and
/// ends in a hash of the whole path, so that two long paths do not collide.
pub fn logical_cluster_label_value(path: &LogicalClusterPath) -> String {
    let dotted = path.as_str().replace(':', ".");
    if dotted.len() <= 63 {
        return dotted;
    }
    let hash = hash10(path.as_str());
    let keep = dotted[..52].trim_end_matches(['.', '-']);
    format!("{keep}-{hash}")
}

/// Annotation the control plane stamps on every Namespace of a logical cluster, and on the
/// objects of the kinds that travel: the name of that namespace in every physical cluster.
/// The server chooses it (a tenant can neither set nor change it), from a hash keyed with a
/// secret of the installation, so no tenant can pick a namespace name that lands in
/// another's namespace downstream.
pub const ANNOTATION_DOWNSTREAM_NAMESPACE: &str = "sluice.dev/downstream-namespace";

/// A downstream namespace name: the namespace's name (its DNS-label characters, cut so
/// the whole fits in 63), a dash and `tag`; `s-<tag>` when nothing of the name is left.
pub fn downstream_name_with(namespace: &str, tag: &str) -> String {
    let room = 63usize.saturating_sub(tag.len() + 1);
    let mut head: String = namespace
        .chars()
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
        .take(room)
        .collect();
    while head.ends_with('-') {
        head.pop();
    }
    if head.is_empty() || head.starts_with('-') {
        return format!("s-{tag}");
    }
    format!("{head}-{tag}")
}

/// The name namespaces were given before names were keyed: ten characters of an unkeyed
/// FNV hash of the path and the name (50 bits, searchable offline). Namespaces created
/// then keep it (the control plane stamps it on them at startup), and an object written
/// then, which carries no stamp, lives there; nothing new is named so.
pub fn legacy_downstream_namespace(path: &LogicalClusterPath, namespace: &str) -> String {
    downstream_name_with(namespace, &hash10(&format!("{path}/{namespace}")))
}

/// The stamped downstream namespace among `annotations`, when it is a DNS label.
pub fn stamped_downstream_namespace(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
) -> Option<&str> {
    annotations?
        .get(ANNOTATION_DOWNSTREAM_NAMESPACE)
        .map(String::as_str)
        .filter(|n| crate::logical_cluster::is_dns_label(n))
}

/// Where an object of namespace `namespace` of `path` lives downstream: its stamp, or (an
/// object written before names were stamped) the legacy name its namespace kept.
pub fn downstream_namespace_of(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
    path: &LogicalClusterPath,
    namespace: &str,
) -> String {
    match stamped_downstream_namespace(annotations) {
        Some(n) => n.to_string(),
        None => legacy_downstream_namespace(path, namespace),
    }
}

/// `chars` base-32 characters (a-z, 2-7) of `h`, low bits first: stable across Rust
/// versions and machines, as names that live in clusters must be.
pub fn base32(h: u128, chars: usize) -> String {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    (0..chars.min(25))
        .map(|i| ALPHABET[((h >> (i * 5)) & 31) as usize] as char)
        .collect()
}

/// Ten base-32 characters of FNV-1a 64 over `s`.
fn hash10(s: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    base32(u128::from(h), 10)
}

/// The ingress class the clusterset's ingresses serve: an `Ingress` whose
/// `ingressClassName` (or older `kubernetes.io/ingress.class` annotation) is this, or unset.
pub const INGRESS_CLASS: &str = "sluice";

/// Whether the clusterset's ingresses serve `ing` (its class is [`INGRESS_CLASS`] or unset).
pub fn serves_ingress(ing: &k8s_openapi::api::networking::v1::Ingress) -> bool {
    let class = ing
        .spec
        .as_ref()
        .and_then(|s| s.ingress_class_name.as_deref())
        .or_else(|| {
            ing.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("kubernetes.io/ingress.class"))
                .map(String::as_str)
        });
    class.is_none_or(|c| c == INGRESS_CLASS)
}

/// The hosts the control plane admitted an Ingress for (a JSON array; `""` is a catch-all),
/// stamped on every Ingress of a logical cluster. Syncers copy down only those rules and the
/// clusterset DNS answers only those hosts: a host belongs to its first claimant, under the
/// domains its workspace was delegated.
pub const INGRESS_HOSTS_ANNOTATION: &str = "sluice.dev/ingress-hosts";

/// Read an [`INGRESS_HOSTS_ANNOTATION`] value; `None` when it is not a list of strings.
pub fn parse_ingress_hosts(value: &str) -> Option<Vec<String>> {
    serde_json::from_str(value).ok()
}

/// Write an [`INGRESS_HOSTS_ANNOTATION`] value.
pub fn format_ingress_hosts<'a>(hosts: impl IntoIterator<Item = &'a str>) -> String {
    serde_json::Value::from(hosts.into_iter().collect::<Vec<_>>()).to_string()
}

/// The hosts an Ingress read from a logical cluster was admitted for (lower case, no
/// trailing dot); none without the record.
pub fn admitted_ingress_hosts(ing: &k8s_openapi::api::networking::v1::Ingress) -> Vec<String> {
    ing.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(INGRESS_HOSTS_ANNOTATION))
        .and_then(|v| parse_ingress_hosts(v))
        .unwrap_or_default()
}

/// The IP of a `Cluster.spec.ingresses` entry (`ip:port`, or a bare IP).
pub fn ingress_ip(address: &str) -> Option<std::net::IpAddr> {
    address
        .parse::<std::net::SocketAddr>()
        .map(|s| s.ip())
        .or_else(|_| address.parse())
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logical_cluster::is_dns_label;

    fn path(s: &str) -> LogicalClusterPath {
        s.parse().expect("path")
    }

    #[test]
    fn downstream_namespaces_are_labels_stable_and_distinct() {
        let a = legacy_downstream_namespace(&path("root:shop"), "default");
        assert!(a.starts_with("default-"), "{a}");
        assert!(is_dns_label(&a));
        assert_eq!(
            a,
            legacy_downstream_namespace(&path("root:shop"), "default")
        );
        assert_ne!(
            a,
            legacy_downstream_namespace(&path("root:shop:x"), "default")
        );
        assert_ne!(a, legacy_downstream_namespace(&path("root"), "default"));
        // A name that is as long as a namespace may be.
        let long = "n".repeat(63);
        let d = legacy_downstream_namespace(&path("root:shop"), &long);
        assert!(is_dns_label(&d), "{d}");
        // Pinned: a change to the naming would strand every synced namespace.
        assert_eq!(hash10("root:shop/default"), hash10("root:shop/default"));
        assert_eq!(hash10(""), "fzieccs44u");
        assert_eq!(a, "default-hputbbiank");
        assert_eq!(downstream_name_with("--", "abc"), "s-abc");
        assert_eq!(downstream_name_with("Ünïcode", "abc"), "ncode-abc");
        let tagged = downstream_name_with(&long, &"t".repeat(16));
        assert_eq!(tagged.len(), 63, "{tagged}");
    }

    #[test]
    fn a_stamp_wins_and_only_a_dns_label_is_one() {
        let p = path("root:shop");
        let mut a = std::collections::BTreeMap::new();
        assert_eq!(
            downstream_namespace_of(None, &p, "web"),
            legacy_downstream_namespace(&p, "web")
        );
        a.insert(
            ANNOTATION_DOWNSTREAM_NAMESPACE.to_string(),
            "web-k3y3d".to_string(),
        );
        assert_eq!(downstream_namespace_of(Some(&a), &p, "web"), "web-k3y3d");
        a.insert(
            ANNOTATION_DOWNSTREAM_NAMESPACE.to_string(),
            "../Web".to_string(),
        );
        assert_eq!(stamped_downstream_namespace(Some(&a)), None);
    }

    #[test]
    fn logical_cluster_label_values_are_valid() {
        assert_eq!(logical_cluster_label_value(&path("root:shop")), "root.shop");
        let long = format!("root:{}:{}", "a".repeat(40), "b".repeat(40));
        let v = logical_cluster_label_value(&path(&long));
        assert!(v.len() <= 63, "{v}");
        assert!(
            v.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
        );
        assert_eq!(
            state_label(&ClusterName::new("east")),
            "state.sluice.dev/east"
        );
    }
}
