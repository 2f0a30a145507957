//! Jobs: Pods from the template until `completions` of them succeed (`parallelism` at a
//! time; `Indexed` gives each its completion index), retried up to `backoffLimit`
//! failures, stopped by `activeDeadlineSeconds` or `suspend`, deleted
//! `ttlSecondsAfterFinished` after they finish — with the status and conditions
//! (`Complete`, `Failed`, `Suspended`) that `kubectl wait` and `kubectl get jobs` read.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use sluice_kube::events::{EventType, Recorder, Regarding};

use super::shared::{Caches, Expectations, instant_at, owned_by, value};
use crate::pod_state::{pod_active, pod_ready};

/// The annotation (and label) carrying an Indexed Job's completion index.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

fn parse_time(v: &Value) -> Option<Timestamp> {
    v.as_str()?.parse().ok()
}

fn condition(type_: &str, reason: &str, message: &str, now: &str) -> Value {
    json!({"type": type_, "status": "True", "reason": reason, "message": message,
           "lastProbeTime": now, "lastTransitionTime": now})
}

fn has_condition(status: &Value, type_: &str) -> bool {
    status["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == type_ && c["status"] == "True")
    })
}

/// Failures a Pod counts for: failed, or restarted in place (`OnFailure`).
fn failures(p: &Pod) -> i64 {
    let phase_failed = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed");
    let restarts: i64 = p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map_or(0, |cs| cs.iter().map(|c| i64::from(c.restart_count)).sum());
    i64::from(phase_failed) + restarts
}

fn succeeded(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")
}

fn index_of(p: &Pod) -> Option<i64> {
    p.metadata
        .annotations
        .as_ref()?
        .get(COMPLETION_INDEX)?
        .parse()
        .ok()
}

/// `completedIndexes` as Kubernetes writes it: `0-2,4`.
fn index_ranges(done: &BTreeSet<i64>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut iter = done.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    out.join(",")
}

/// The key of a Job's expectation.
pub fn expectation_key(ns: &str, name: &str) -> String {
    format!("job/{ns}/{name}")
}

/// Reconcile one Job; returns when it wants to be looked at again without an event (its
/// deadline, or its time to live after finishing).
pub async fn reconcile(
    client: &kube::Client,
    caches: &Caches,
    job: &Job,
    expect: &mut Expectations,
    events: &Recorder,
) -> kube::Result<Option<Instant>> {
    let regarding = Regarding::of(job);
    let ns = job.metadata.namespace.clone().unwrap_or_default();
    let name = job.metadata.name.clone().unwrap_or_default();
    let uid = job.metadata.uid.clone().unwrap_or_default();
    let v = value(job);
    let spec = &v["spec"];
    let status = &v["status"];
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let now = sluice_kube::time::now_rfc3339();

    // Finished: only the time to live is left.
    if has_condition(status, "Complete") || has_condition(status, "Failed") {
        let Some(ttl) = spec["ttlSecondsAfterFinished"].as_i64() else {
            return Ok(None);
        };
        let finished = parse_time(&status["completionTime"]).or_else(|| {
            status["conditions"].as_array().and_then(|cs| {
                cs.iter()
                    .filter(|c| c["type"] == "Complete" || c["type"] == "Failed")
                    .find_map(|c| parse_time(&c["lastTransitionTime"]))
            })
        });
        let Some(expires) = finished.and_then(|f| f.checked_add(jiff_secs(ttl)).ok()) else {
            return Ok(None);
        };
        if expires <= Timestamp::now() {
            let dp = DeleteParams {
                propagation_policy: Some(kube::api::PropagationPolicy::Background),
                ..DeleteParams::default()
            };
            jobs.delete(&name, &dp).await?;
            return Ok(None);
        }
        return Ok(Some(instant_at(expires)));
    }

    let pods: Vec<Arc<Pod>> = caches
        .pods
        .in_namespace("", &ns)
        .into_iter()
        .filter(|p| owned_by(&p.metadata, &uid))
        .collect();
    let active: Vec<&Arc<Pod>> = pods.iter().filter(|p| pod_active(p)).collect();
    let terminating = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some())
        .count();
    let failed: i64 = pods.iter().map(|p| failures(p)).sum();
    let indexed = spec["completionMode"] == "Indexed";
    let completions = spec["completions"].as_i64();
    let parallelism = spec["parallelism"].as_i64().unwrap_or(1).max(0);
    let backoff_limit = spec["backoffLimit"].as_i64().unwrap_or(6);
    let suspended = spec["suspend"] == true;
    let done_indexes: BTreeSet<i64> = pods
        .iter()
        .filter(|p| succeeded(p))
        .filter_map(|p| index_of(p))
        .filter(|i| completions.is_none_or(|c| *i < c))
        .collect();
    let succeeded_count = if indexed {
        done_indexes.len() as i64
    } else {
        pods.iter().filter(|p| succeeded(p)).count() as i64
    };
    let start_time = parse_time(&status["startTime"]);
    let deadline = spec["activeDeadlineSeconds"]
        .as_i64()
        .zip(start_time)
        .and_then(|(d, s)| s.checked_add(jiff_secs(d)).ok());

    let mut conditions: Vec<Value> = status["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c["type"] != "Suspended")
        .collect();
    let mut completion_time = status["completionTime"].clone();
    let failure = if failed > backoff_limit {
        Some((
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        ))
    } else if deadline.is_some_and(|d| d <= Timestamp::now()) && !suspended {
        Some((
            "DeadlineExceeded",
            "Job was active longer than specified deadline",
        ))
    } else {
        None
    };
    let complete = match completions {
        Some(c) => succeeded_count >= c,
        // A work queue: done once one succeeded and the rest have stopped.
        None => succeeded_count > 0 && active.is_empty(),
    };
    let mut wanted_active: i64 = 0;
    if let Some((reason, message)) = failure {
        conditions.push(condition("FailureTarget", reason, message, &now));
        conditions.push(condition("Failed", reason, message, &now));
    } else if complete {
        conditions.push(condition(
            "SuccessCriteriaMet",
            "CompletionsReached",
            "Reached expected number of succeeded pods",
            &now,
        ));
        conditions.push(condition(
            "Complete",
            "CompletionsReached",
            "Reached expected number of succeeded pods",
            &now,
        ));
        completion_time = json!(now);
    } else if suspended {
        conditions.push(condition(
            "Suspended",
            "JobSuspended",
            "Job suspended",
            &now,
        ));
    } else {
        wanted_active = match completions {
            Some(c) => parallelism.min(c - succeeded_count),
            None if succeeded_count > 0 => 0,
            None => parallelism,
        };
    }
    let finished = failure.is_some() || complete;

    // Pods: stop the surplus (all of them once finished or suspended), start the missing.
    let key = expectation_key(&ns, &name);
    let running = active.len() as i64;
    if running > wanted_active {
        let mut surplus = active.clone();
        surplus.sort_by_key(|p| {
            (
                pod_ready(p),
                std::cmp::Reverse(p.metadata.creation_timestamp.as_ref().map(|t| t.0)),
            )
        });
        for p in surplus.iter().take((running - wanted_active) as usize) {
            let _ = pod_api
                .delete(
                    p.metadata.name.as_deref().unwrap_or(""),
                    &DeleteParams::default(),
                )
                .await;
        }
    } else if running < wanted_active && !expect.pending(&key) {
        let mut free: Vec<Option<i64>> = if indexed {
            let taken: BTreeSet<i64> = active.iter().filter_map(|p| index_of(p)).collect();
            (0..completions.unwrap_or(0))
                .filter(|i| !done_indexes.contains(i) && !taken.contains(i))
                .map(Some)
                .collect()
        } else {
            vec![None; (wanted_active - running) as usize]
        };
        free.truncate((wanted_active - running) as usize);
        for index in free {
            let made = pod_api
                .create(&PostParams::default(), &pod_for(&v, &name, &uid, index))
                .await?;
            let message = format!(
                "Created pod: {}",
                made.metadata.name.as_deref().unwrap_or("")
            );
            events
                .record(&regarding, EventType::Normal, "SuccessfulCreate", &message)
                .await;
        }
        expect.expect(&key);
    } else if running == wanted_active {
        expect.satisfied(&key);
    }

    let start = status["startTime"]
        .as_str()
        .map(str::to_string)
        .or_else(|| (!suspended).then(|| now.clone()));
    let ready = active.iter().filter(|p| pod_ready(p)).count();
    let mut new_status = json!({
        "active": if finished { 0 } else { running },
        "succeeded": succeeded_count,
        "failed": failed,
        "ready": if finished { 0 } else { ready as i64 },
        "terminating": terminating,
        "startTime": start,
        "conditions": conditions,
    });
    if !completion_time.is_null() {
        new_status["completionTime"] = completion_time;
    }
    if indexed {
        new_status["completedIndexes"] = json!(index_ranges(&done_indexes));
    }
    let differs = ["active", "succeeded", "failed", "ready", "terminating"]
        .iter()
        .any(|f| status[*f].as_i64().unwrap_or(0) != new_status[*f].as_i64().unwrap_or(0))
        || status["startTime"] != new_status["startTime"]
        || status["completedIndexes"] != new_status["completedIndexes"]
        || conditions.len() != status["conditions"].as_array().map_or(0, Vec::len);
    if differs {
        jobs.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": new_status})),
        )
        .await?;
        // Said once, when the finishing status is written.
        if let Some((reason, message)) = failure {
            events
                .record(&regarding, EventType::Warning, reason, message)
                .await;
        } else if complete {
            events
                .record(&regarding, EventType::Normal, "Completed", "Job completed")
                .await;
        }
    }
    let pending_deadline = deadline.filter(|d| !finished && !suspended && *d > Timestamp::now());
    Ok(pending_deadline.map(instant_at))
}

fn jiff_secs(s: i64) -> k8s_openapi::jiff::SignedDuration {
    k8s_openapi::jiff::SignedDuration::from_secs(s.max(0))
}

/// A Pod of the Job's template (with its completion index when Indexed).
fn pod_for(job: &Value, name: &str, uid: &str, index: Option<i64>) -> Pod {
    let template = &job["spec"]["template"];
    let mut labels = template["metadata"]["labels"].clone();
    let mut annotations = template["metadata"]["annotations"].clone();
    let mut spec = template["spec"].clone();
    let mut generate_name = format!("{name}-");
    if let Some(i) = index {
        generate_name = format!("{name}-{i}-");
        if !labels.is_object() {
            labels = json!({});
        }
        labels[COMPLETION_INDEX] = json!(i.to_string());
        if !annotations.is_object() {
            annotations = json!({});
        }
        annotations[COMPLETION_INDEX] = json!(i.to_string());
        for c in spec["containers"].as_array_mut().into_iter().flatten() {
            if !c["env"].is_array() {
                c["env"] = json!([]);
            }
            if let Some(env) = c["env"].as_array_mut() {
                env.push(json!({"name": "JOB_COMPLETION_INDEX", "value": i.to_string()}));
            }
        }
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": generate_name,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": spec,
    }))
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completed_indexes_are_ranges() {
        let set: BTreeSet<i64> = [0, 1, 2, 4, 6, 7].into_iter().collect();
        assert_eq!(index_ranges(&set), "0-2,4,6-7");
        assert_eq!(index_ranges(&BTreeSet::new()), "");
    }
}
