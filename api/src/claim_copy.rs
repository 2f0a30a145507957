//! How a claim's data follows a move (docs/stateful.md): placement writes on the upstream
//! claim which cluster the data comes from, which it goes to and which pass is due; the
//! source's syncer runs a mover serving the claim (behind a Service the clusterset exports,
//! so the bytes cross in the gateways' tunnel), the target's runs a mover pulling each pass
//! into its own claim and answers with a condition on that claim, which its status report
//! carries back up.

use crate::ClusterName;

/// Upstream claim annotation: the cluster whose copy of the claim holds the data.
pub const SOURCE_ANNOTATION: &str = "copy.sluice.dev/source";
/// Upstream claim annotation: the cluster the data goes to.
pub const TARGET_ANNOTATION: &str = "copy.sluice.dev/target";
/// Upstream claim annotation: the pass due ([`Pass`]).
pub const PASS_ANNOTATION: &str = "copy.sluice.dev/pass";
/// Condition type on the target cluster's claim: `False`/[`BULK_COPIED`] after the bulk
/// pass, `True`/[`COPIED`] once the final pass matched the source's manifest,
/// `False`/[`CANNOT_COPY`] while the target cannot run its mover on the claim (its class
/// missing there, too little room, the mover's image), with the target's own words.
pub const COPIED_CONDITION: &str = "sluice.dev/Copied";
pub const BULK_COPIED: &str = "BulkCopied";
pub const COPIED: &str = "Copied";
pub const CANNOT_COPY: &str = "CannotCopy";
/// Label of the movers (Pods and the source's Service): `<id>-<role>`.
pub const MOVER_LABEL: &str = "copy.sluice.dev/mover";
/// Annotation of a mover Pod: the claim it serves or fills.
pub const MOVER_CLAIM_ANNOTATION: &str = "copy.sluice.dev/claim";
/// The port a source mover serves on.
pub const MOVER_PORT: u16 = 8080;
/// Namespace annotation, written by placement in the same write that places the namespace
/// on the target: `{"cluster": "<target>", "claims": [...]}`, the claims whose copy the
/// target waits for. The target's syncer runs none of the workloads that mount one (0
/// replicas; a Pod not at all), whatever order it sees the other objects' changes in, so
/// the app never starts there on partial data.
pub const HOLDING_ANNOTATION: &str = "copy.sluice.dev/holding";

/// Claim annotation a user sets to say what the claim's data does when its namespace moves
/// or spreads ([`Storage`]): `moves` (the default) or `shared`.
pub const STORAGE_ANNOTATION: &str = "sluice.dev/storage";
/// Condition type each cluster's syncer writes on its copy of a claim marked `shared`, once
/// the claim is bound there: `True`/[`NETWORK_STORAGE`] when the volume is network storage
/// (every cluster that binds the claim mounts the same data), `False`/[`CLUSTER_LOCAL`]
/// when it is storage of that cluster alone (the data then moves like a ReadWriteOnce
/// claim's).
pub const SHARED_CONDITION: &str = "sluice.dev/Shared";
pub const NETWORK_STORAGE: &str = "NetworkStorage";
pub const CLUSTER_LOCAL: &str = "ClusterLocalStorage";
/// `False` reason: network storage, but deleted with its claim (`reclaimPolicy: Delete`), so
/// the app leaving this cluster would delete the data the next one mounts: a move waits.
pub const DELETED_WITH_CLAIM: &str = "DeletedWithClaim";

/// What a claim's data does when its namespace moves or spreads, as its
/// [`STORAGE_ANNOTATION`] says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storage {
    /// The data is copied to the cluster the app moves to (docs/stateful.md).
    Moves,
    /// The claim is bound to storage every cluster reaches: each cluster where the app
    /// runs mounts the same data, and nothing is copied.
    Shared,
}

impl Storage {
    /// The values the annotation takes.
    pub const VALUES: [&'static str; 2] = ["moves", "shared"];

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "moves" => Some(Storage::Moves),
            "shared" => Some(Storage::Shared),
            _ => None,
        }
    }

    /// What a claim's annotations ask (an absent annotation: [`Storage::Moves`]; a value
    /// the API server refused cannot be there).
    pub fn of(annotations: Option<&std::collections::BTreeMap<String, String>>) -> Self {
        annotations
            .and_then(|a| a.get(STORAGE_ANNOTATION))
            .and_then(|v| Self::parse(v))
            .unwrap_or(Storage::Moves)
    }
}

/// The movers' image on the local clusters (their built-in `sluice mover`). On clusters
/// installed from the charts the syncer runs the `sluice` image itself (`--mover-image`).
pub const MOVER_IMAGE: &str = "sluice/mover";

/// A pass of a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Pass {
    /// While the app still runs on the source.
    Bulk,
    /// Once the app stopped there: what changed since, then the whole volume checked.
    Final,
}

impl Pass {
    pub fn as_str(self) -> &'static str {
        match self {
            Pass::Bulk => "bulk",
            Pass::Final => "final",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "bulk" => Some(Pass::Bulk),
            "final" => Some(Pass::Final),
            _ => None,
        }
    }
}

/// A short name for claim `claim` in its namespace, for the movers' names (a claim's name
/// may be 253 characters; a label value only 63).
pub fn mover_id(claim: &str) -> String {
    // FNV-1a: stable across releases and processes.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in claim.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The name of the source's mover Pod and Service for claim id `id`.
pub fn source_name(id: &str) -> String {
    format!("sluice-copy-{id}")
}

/// The name of the target's mover Pod for pass `pass`.
pub fn pull_name(id: &str, pass: Pass) -> String {
    format!("sluice-copy-{}-{id}", pass.as_str())
}

/// What a claim's annotations ask of the clusters, if anything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Asked {
    pub source: ClusterName,
    pub target: ClusterName,
    pub pass: Pass,
}

impl Asked {
    /// Read from an object's annotations.
    pub fn of(annotations: Option<&std::collections::BTreeMap<String, String>>) -> Option<Self> {
        let a = annotations?;
        Some(Self {
            source: ClusterName::new(a.get(SOURCE_ANNOTATION)?),
            target: ClusterName::new(a.get(TARGET_ANNOTATION)?),
            pass: Pass::parse(a.get(PASS_ANNOTATION)?)?,
        })
    }
}

/// What a namespace's [`HOLDING_ANNOTATION`] says.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Holding {
    pub cluster: ClusterName,
    pub claims: Vec<String>,
}

impl Holding {
    /// Read from a namespace's annotations (a value that does not parse holds nothing).
    pub fn of(annotations: Option<&std::collections::BTreeMap<String, String>>) -> Option<Self> {
        serde_json::from_str(annotations?.get(HOLDING_ANNOTATION)?).ok()
    }

    /// Whether workload `v` (of `kind`) is held on `cluster`: it mounts a claim still being
    /// copied there.
    pub fn holds(&self, kind: &str, v: &serde_json::Value, cluster: &ClusterName) -> bool {
        &self.cluster == cluster && claims_of(kind, v).iter().any(|c| self.claims.contains(c))
    }
}

/// The claims the Pods of workload `v` (of `kind`) mount.
pub fn claims_of(kind: &str, v: &serde_json::Value) -> Vec<String> {
    let spec = match kind {
        "Pod" => &v["spec"],
        "CronJob" => &v["spec"]["jobTemplate"]["spec"]["template"]["spec"],
        _ => &v["spec"]["template"]["spec"],
    };
    spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|vol| vol["persistentVolumeClaim"]["claimName"].as_str())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mover_names_are_short_and_stable_for_any_claim_name() {
        let long = "a".repeat(253);
        assert_eq!(mover_id(&long).len(), 16);
        assert_eq!(mover_id("data"), mover_id("data"));
        assert_ne!(mover_id("data"), mover_id("date"));
        assert!(pull_name(&mover_id(&long), Pass::Final).len() <= 63);
        assert_eq!(mover_id("é"), mover_id("é"));
    }

    #[test]
    fn a_holding_namespace_holds_what_mounts_its_claims_on_its_cluster_only() {
        let a: std::collections::BTreeMap<String, String> = [(
            HOLDING_ANNOTATION.to_string(),
            r#"{"cluster":"west","claims":["data"]}"#.to_string(),
        )]
        .into();
        let h = Holding::of(Some(&a)).unwrap();
        let d = serde_json::json!({"spec": {"template": {"spec": {"volumes": [
            {"name": "x", "persistentVolumeClaim": {"claimName": "data"}}]}}}});
        assert!(h.holds("Deployment", &d, &ClusterName::new("west")));
        assert!(!h.holds("Deployment", &d, &ClusterName::new("east")));
        assert!(!h.holds("Pod", &d, &ClusterName::new("west")));
    }

    #[test]
    fn every_workload_kind_names_the_claims_its_pods_mount() {
        let vols = serde_json::json!({"volumes": [
            {"name": "a", "persistentVolumeClaim": {"claimName": "notes"}},
            {"name": "b", "emptyDir": {}}]});
        let pod = serde_json::json!({"spec": vols});
        let deploy = serde_json::json!({"spec": {"template": {"spec": vols}}});
        let cron =
            serde_json::json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": vols}}}}});
        assert_eq!(claims_of("Pod", &pod), ["notes"]);
        for kind in ["Deployment", "StatefulSet", "Job", "DaemonSet"] {
            assert_eq!(claims_of(kind, &deploy), ["notes"], "{kind}");
        }
        assert_eq!(claims_of("CronJob", &cron), ["notes"]);
    }
}
