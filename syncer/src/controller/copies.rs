//! The movers of this cluster for one namespace (docs/stateful.md): for each upstream claim
//! whose data placement asks to move ([`Asked`]), the source cluster runs a mover serving
//! its claim behind a Service (exported like any other, so the target reaches it through the
//! clusterset's tunnel), and the target runs a mover per pass pulling into its own claim
//! from that Service's clusterset address. A pass whose mover succeeded is recorded as the
//! `sluice.dev/Copied` condition on the target's claim, which the claim's status report
//! carries up to placement. Movers nobody asks for any more go.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use sluice_api::LogicalClusterPath;
use sluice_api::claim_copy::{
    Asked, BULK_COPIED, CANNOT_COPY, COPIED, COPIED_CONDITION, MOVER_CLAIM_ANNOTATION, MOVER_LABEL,
    MOVER_PORT, Pass, mover_id, pull_name, source_name,
};

use super::state::Sides;
use super::watched::Watched;
use super::write::{counted, delete};

/// How a namespace's movers stand after a reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Copies {
    /// Nothing to wait for that an informer here would not report.
    Settled,
    /// A target waits for the source's clusterset address (no informer here reports
    /// ServiceImports): look again shortly.
    Waiting,
    /// A write failed.
    Failed,
}

/// Run, record and remove the movers of downstream namespace `down_ns`.
pub async fn reconcile(
    s: &Sides,
    w: &Watched,
    down_ns: &str,
    source: Option<&(LogicalClusterPath, String)>,
) -> Copies {
    let me = &s.config.cluster;
    let mut asked: Vec<(String, Asked)> = Vec::new();
    if let (Some((path, up_ns)), Some(k)) = (
        source,
        w.kinds
            .iter()
            .find(|k| k.kind.kind == "PersistentVolumeClaim" && k.up.is_ready()),
    ) {
        for c in k.up.store.in_namespace(path.as_str(), up_ns) {
            if let (Some(name), Some(a)) = (
                c.metadata.name.clone(),
                Asked::of(c.metadata.annotations.as_ref()),
            ) && (a.source == *me || a.target == *me)
                && c.metadata.deletion_timestamp.is_none()
            {
                asked.push((name, a));
            }
        }
    }
    let pods = w.pods.store.in_namespace("", down_ns);
    let movers: BTreeMap<&str, &Pod> = pods
        .iter()
        .filter(|p| mover_of(&p.metadata).is_some())
        .filter_map(|p| Some((p.metadata.name.as_deref()?, &**p)))
        .collect();
    if asked.is_empty() && movers.is_empty() {
        return Copies::Settled;
    }
    let claims = w.claims.store.in_namespace("", down_ns);
    let claim = |name: &str| {
        claims
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
    };
    let client = s.config.downstream.clone();
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), down_ns);
    let services: Api<Service> = Api::namespaced(client.clone(), down_ns);
    let mut out = Copies::Settled;
    let mut failed = false;
    // The sources' Services here (an unreadable list: created as if none, 409 tells).
    let lp = ListParams::default().labels(MOVER_LABEL);
    let existing_services: BTreeSet<String> = match services.list_metadata(&lp).await {
        Ok(list) => list
            .items
            .into_iter()
            .filter_map(|svc| svc.metadata.name)
            .collect(),
        Err(e) => {
            tracing::warn!(namespace = %down_ns, error = %e, "listing the movers' services failed");
            failed = true;
            BTreeSet::new()
        }
    };
    let mut wanted: BTreeSet<String> = BTreeSet::new();
    for (name, a) in &asked {
        let id = mover_id(name);
        if a.source == *me {
            let mover = source_name(&id);
            wanted.insert(mover.clone());
            if !movers.contains_key(mover.as_str()) {
                failed |= !create(
                    s,
                    &pods_api,
                    "Pod",
                    &source_pod(&id, name, &s.config.mover_image),
                )
                .await;
            }
            // Not watched here: listed once per reconcile, below.
            if !existing_services.contains(&mover) {
                failed |= !create(s, &services, "Service", &source_service(&id)).await;
            }
        }
        if a.target != *me {
            continue;
        }
        let done = claim(name).and_then(|c| recorded(c));
        if done >= Some(a.pass) {
            continue;
        }
        let mover = pull_name(&id, a.pass);
        match movers.get(mover.as_str()) {
            Some(p) if phase(p) == Some("Succeeded") => {
                // The pass is done: said on the claim, with the mover's own figures; its
                // mover goes below.
                let figures = pulled(&pods_api, &mover).await;
                failed |= !record(s, down_ns, name, a, figures.as_deref()).await;
            }
            Some(p) => {
                // Kept while it waits: it goes on by itself once the cause is fixed.
                wanted.insert(mover);
                if let Some(why) = stuck(p)
                    && claim(name).and_then(|c| refusal(c)) != Some(why.clone())
                {
                    tracing::warn!(namespace = %down_ns, claim = %name, reason = %why,
                        "the claim's data cannot be pulled here");
                    failed |= !condition(s, down_ns, name, "False", CANNOT_COPY, &why).await;
                }
            }
            None => match source_address(s, down_ns, &source_name(&id)).await {
                Some(from) => {
                    wanted.insert(mover);
                    let pod = pull_pod(&id, name, a.pass, &from, &s.config.mover_image);
                    failed |= !create(s, &pods_api, "Pod", &pod).await;
                    tracing::info!(namespace = %down_ns, claim = %name, source = %a.source,
                        pass = a.pass.as_str(), %from, "pulling a claim's data");
                }
                None => out = Copies::Waiting,
            },
        }
    }
    for (name, p) in &movers {
        if !wanted.contains(*name) && p.metadata.deletion_timestamp.is_none() {
            failed |= !delete(&s.syncer, "Pod", &pods_api, down_ns, name).await;
        }
    }
    // The sources' Services nobody asks for any more.
    for n in &existing_services {
        if !wanted.contains(n) {
            failed |= !delete(&s.syncer, "Service", &services, down_ns, n).await;
        }
    }
    if failed { Copies::Failed } else { out }
}

/// The role of a mover (its label), if the object is one.
fn mover_of(meta: &kube::api::ObjectMeta) -> Option<&String> {
    meta.labels.as_ref()?.get(MOVER_LABEL)
}

fn phase(p: &Pod) -> Option<&str> {
    p.status.as_ref()?.phase.as_deref()
}

/// The claim's `Copied` condition.
fn copied_condition(
    c: &PersistentVolumeClaim,
) -> Option<&k8s_openapi::api::core::v1::PersistentVolumeClaimCondition> {
    c.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == COPIED_CONDITION)
}

/// The pass the claim's `Copied` condition records as done.
fn recorded(c: &PersistentVolumeClaim) -> Option<Pass> {
    let cond = copied_condition(c)?;
    match (cond.status.as_str(), cond.reason.as_deref()) {
        ("True", Some(COPIED)) => Some(Pass::Final),
        ("False", Some(BULK_COPIED)) => Some(Pass::Bulk),
        _ => None,
    }
}

/// Why mover Pod `p` cannot run, in the cluster's own words, when it is for a reason the
/// mover cannot get past by retrying: its claim cannot be provisioned here (the class
/// missing, too little room), it cannot be scheduled, or its image is not available.
fn stuck(p: &Pod) -> Option<String> {
    const STUCK: [&str; 6] = [
        "CreateContainerConfigError",
        "CreateContainerError",
        "ImageNotBuiltIn",
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
    ];
    let status = p.status.as_ref()?;
    let waiting = status
        .container_statuses
        .iter()
        .flatten()
        .filter_map(|c| c.state.as_ref()?.waiting.as_ref())
        .find(|w| w.reason.as_deref().is_some_and(|r| STUCK.contains(&r)));
    if let Some(w) = waiting {
        let reason = w.reason.as_deref().unwrap_or_default();
        return Some(match w.message.as_deref() {
            Some(m) if !m.is_empty() => format!("{reason}: {m}"),
            _ => reason.to_string(),
        });
    }
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        })
        .map(|c| {
            format!(
                "Unschedulable: {}",
                c.message.as_deref().unwrap_or_default()
            )
        })
}

/// The refusal the claim's `Copied` condition records, if it records one.
fn refusal(c: &PersistentVolumeClaim) -> Option<String> {
    let cond = copied_condition(c)?;
    (cond.reason.as_deref() == Some(CANNOT_COPY)).then(|| cond.message.clone().unwrap_or_default())
}

/// What pull mover `pod` reported (the JSON line it prints last), as a phrase: "4 of 5
/// files (100.0 MiB) fetched in 1.2 s (83.3 MiB/s), 1 kept, 0 removed".
async fn pulled(api: &Api<Pod>, pod: &str) -> Option<String> {
    let lp = kube::api::LogParams {
        container: Some("mover".into()),
        tail_lines: Some(5),
        ..Default::default()
    };
    let log = api.logs(pod, &lp).await.ok()?;
    let report: Value = log
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())?;
    let mib = |b: &Value| b.as_f64().unwrap_or(0.0) / (1024.0 * 1024.0);
    let secs = report["seconds"].as_f64().unwrap_or(0.0);
    Some(format!(
        "{} of {} files ({:.1} MiB) fetched in {:.1} s ({:.1} MiB/s), {} kept, {} removed",
        report["fetched_files"],
        report["entries"],
        mib(&report["fetched_bytes"]),
        secs,
        mib(&report["fetched_bytes"]) / secs.max(0.001),
        report["kept_files"],
        report["removed"],
    ))
}

/// Say on the target's claim that pass `a.pass` is done (with the mover's `figures`).
async fn record(s: &Sides, down_ns: &str, claim: &str, a: &Asked, figures: Option<&str>) -> bool {
    let figures = figures.map(|f| format!(" ({f})")).unwrap_or_default();
    let (status, reason, message) = match a.pass {
        Pass::Bulk => (
            "False",
            BULK_COPIED,
            format!(
                "the bulk copy from {}{figures} is done; the final one follows once the app stopped there",
                a.source
            ),
        ),
        Pass::Final => (
            "True",
            COPIED,
            format!(
                "copied from {} and checked against its manifest{figures}",
                a.source
            ),
        ),
    };
    let r = condition(s, down_ns, claim, status, reason, &message).await;
    tracing::info!(namespace = %down_ns, %claim, pass = a.pass.as_str(), ok = r,
        "a pass of a claim's copy is done");
    r
}

/// Set the `Copied` condition of the target's claim; false if that failed.
async fn condition(
    s: &Sides,
    down_ns: &str,
    claim: &str,
    status: &str,
    reason: &str,
    message: &str,
) -> bool {
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let patch = json!({"status": {"conditions": [{
        "type": COPIED_CONDITION,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
        "lastProbeTime": now,
    }]}});
    let api: Api<PersistentVolumeClaim> = Api::namespaced(s.config.downstream.clone(), down_ns);
    let r = api
        .patch_status(claim, &PatchParams::default(), &Patch::Strategic(&patch))
        .await;
    counted(&s.syncer, "PersistentVolumeClaim", "status", r).is_ok()
}

/// Create `obj` unless it is there; false if that failed.
async fn create<K>(s: &Sides, api: &Api<K>, kind: &'static str, obj: &Value) -> bool
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let Ok(typed) = serde_json::from_value::<K>(obj.clone()) else {
        return false;
    };
    match api.create(&PostParams::default(), &typed).await {
        Err(kube::Error::Api(e)) if e.code == 409 => true,
        r => counted(&s.syncer, kind, "create", r).is_ok(),
    }
}

/// The source's address as this cluster reaches it: its ServiceImport's clusterset IP
/// (through this cluster's dataplane and the gateways' tunnel), once the clusterset has
/// imported it here.
async fn source_address(s: &Sides, down_ns: &str, service: &str) -> Option<String> {
    let ar = ApiResource {
        group: sluice_api::mcs::GROUP.into(),
        version: sluice_api::mcs::VERSION.into(),
        api_version: format!("{}/{}", sluice_api::mcs::GROUP, sluice_api::mcs::VERSION),
        kind: "ServiceImport".into(),
        plural: "serviceimports".into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(s.config.downstream.clone(), down_ns, &ar);
    let import = api.get_opt(service).await.ok()??;
    let ip = import.data["spec"]["ips"][0].as_str()?;
    Some(format!("{ip}:{MOVER_PORT}"))
}

fn mover_labels(id: &str, role: &str) -> Value {
    json!({ MOVER_LABEL: format!("{id}-{role}") })
}

fn volume(claim: &str) -> Value {
    json!([{"name": "data", "persistentVolumeClaim": {"claimName": claim}}])
}

/// The source's mover: serves the claim read-only.
/// The container args of a mover running `image`: the `sluice` image's entrypoint is the
/// binary itself, so its args name the `mover` subcommand; `sluice/mover` is that
/// subcommand already.
fn mover_args(image: &str, args: &[&str]) -> Vec<String> {
    let repo = image.rsplit_once(':').map_or(image, |(r, _)| r);
    let whole_binary = repo.rsplit('/').next() == Some("sluice");
    whole_binary
        .then_some("mover")
        .into_iter()
        .chain(args.iter().copied())
        .map(str::to_string)
        .collect()
}

fn source_pod(id: &str, claim: &str, image: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": source_name(id), "labels": mover_labels(id, "source"),
            "annotations": {MOVER_CLAIM_ANNOTATION: claim}},
        "spec": {
            "restartPolicy": "Always",
            "containers": [{"name": "mover", "image": image,
                "args": mover_args(image, &["serve", "--dir", "/data"]),
                "ports": [{"name": "tcp-mover", "containerPort": MOVER_PORT}],
                "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": true}]}],
            "volumes": volume(claim),
        }
    })
}

/// The Service in front of the source's mover: plain TCP (the mover's own HTTP is not the
/// dataplane's to retry or time out).
fn source_service(id: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": source_name(id), "labels": mover_labels(id, "source")},
        "spec": {
            "selector": mover_labels(id, "source"),
            "ports": [{"name": "tcp-mover", "appProtocol": "tcp", "port": MOVER_PORT,
                "targetPort": MOVER_PORT}],
        }
    })
}

/// The target's mover for one pass: runs until the claim holds the source's data.
fn pull_pod(id: &str, claim: &str, pass: Pass, from: &str, image: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pull_name(id, pass),
            "labels": mover_labels(id, pass.as_str()),
            "annotations": {MOVER_CLAIM_ANNOTATION: claim}},
        "spec": {
            "restartPolicy": "OnFailure",
            "containers": [{"name": "mover", "image": image,
                "args": mover_args(image, &["pull", "--dir", "/data", "--from", from, "--pass", pass.as_str()]),
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "volumes": volume(claim),
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use sluice_api::claim_copy::MOVER_IMAGE;

    #[test]
    fn movers_are_valid_pods_and_services_that_mount_the_claim() {
        let id = mover_id("notes");
        let src: Pod = serde_json::from_value(source_pod(&id, "notes", MOVER_IMAGE)).unwrap();
        assert!(sluice_kube::pod::mounts_claim(&src, "notes"));
        let svc: Service = serde_json::from_value(source_service(&id)).unwrap();
        assert_eq!(
            svc.spec.unwrap().selector.unwrap(),
            src.metadata.labels.unwrap()
        );
        let pull: Pod = serde_json::from_value(pull_pod(
            &id,
            "notes",
            Pass::Final,
            "1.2.3.4:8080",
            MOVER_IMAGE,
        ))
        .unwrap();
        assert_eq!(
            pull.spec.unwrap().containers[0].args.as_ref().unwrap()[4],
            "1.2.3.4:8080"
        );
        // The `sluice` image (the charts' own) runs the binary: the args name `mover`.
        let image = "ghcr.io/sluice/sluice:0.1.0";
        let pull: Pod =
            serde_json::from_value(pull_pod(&id, "notes", Pass::Bulk, "1.2.3.4:8080", image))
                .unwrap();
        let c = &pull.spec.unwrap().containers[0];
        assert_eq!(c.image.as_deref(), Some(image));
        assert_eq!(c.args.as_ref().unwrap()[..2], ["mover", "pull"]);
    }

    #[test]
    fn a_mover_that_cannot_run_here_says_why_and_one_that_starts_does_not() {
        let pod = |status: Value| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": "m"}, "status": status})).unwrap()
        };
        let waiting = |reason: &str, message: &str| {
            pod(json!({"phase": "Pending", "containerStatuses": [{
                "name": "mover", "image": MOVER_IMAGE, "imageID": "", "ready": false,
                "restartCount": 0,
                "state": {"waiting": {"reason": reason, "message": message}}}]}))
        };
        assert_eq!(
            stuck(&waiting(
                "CreateContainerConfigError",
                "storageclass.storage.k8s.io \"fast\" not found"
            ))
            .as_deref(),
            Some("CreateContainerConfigError: storageclass.storage.k8s.io \"fast\" not found")
        );
        assert_eq!(
            stuck(&waiting("ImageNotBuiltIn", "")).as_deref(),
            Some("ImageNotBuiltIn")
        );
        assert_eq!(stuck(&waiting("ContainerCreating", "")), None);
        assert_eq!(stuck(&waiting("CrashLoopBackOff", "back-off")), None);
        let unschedulable = pod(json!({"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/3 nodes are available: 3 Insufficient storage"}]}));
        assert_eq!(
            stuck(&unschedulable).as_deref(),
            Some("Unschedulable: 0/3 nodes are available: 3 Insufficient storage")
        );
        assert_eq!(stuck(&pod(json!({"phase": "Running"}))), None);
    }
}
