//! CronJobs: a Job from the template at each time the schedule names (in
//! `spec.timeZone`, UTC when unset), within `startingDeadlineSeconds`, as
//! `concurrencyPolicy` allows (`Allow`, `Forbid`, `Replace`), keeping the last
//! `successfulJobsHistoryLimit` / `failedJobsHistoryLimit` finished Jobs.

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy};
use serde_json::{Value, json};
use sluice_api::cron::{CronSchedule, time_zone};

use sluice_kube::events::{EventType, Recorder, Regarding};

use super::shared::{Caches, instant_at, owned_by, value};

/// The annotation on a Job saying for which scheduled time its CronJob made it.
pub const SCHEDULED_AT: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

/// Missed runs looked back over at most; more means the schedule is unusable here.
const MAX_MISSED: usize = 100;

fn finished(job: &Job) -> Option<&'static str> {
    let conditions = job.status.as_ref()?.conditions.as_ref()?;
    conditions.iter().find_map(|c| match c.type_.as_str() {
        "Complete" if c.status == "True" => Some("Complete"),
        "Failed" if c.status == "True" => Some("Failed"),
        _ => None,
    })
}

/// The latest scheduled time in (`since`, `now`], and the one after `now`.
fn due(
    schedule: &CronSchedule,
    tz: &k8s_openapi::jiff::tz::TimeZone,
    since: Timestamp,
    now: Timestamp,
) -> (Option<Timestamp>, Option<Timestamp>) {
    let mut latest = None;
    let mut t = since;
    for _ in 0..=MAX_MISSED {
        match schedule.next_after(t, tz) {
            Some(n) if n <= now => {
                latest = Some(n);
                t = n;
            }
            next => return (latest, next),
        }
    }
    // Too many missed: start from now rather than replay them.
    (latest, schedule.next_after(now, tz))
}

/// Reconcile one CronJob; returns when its next run is due.
pub async fn reconcile(
    client: &kube::Client,
    caches: &Caches,
    cj: &CronJob,
    events: &Recorder,
) -> kube::Result<Option<Instant>> {
    let ns = cj.metadata.namespace.clone().unwrap_or_default();
    let name = cj.metadata.name.clone().unwrap_or_default();
    let uid = cj.metadata.uid.clone().unwrap_or_default();
    let v = value(cj);
    let spec = &v["spec"];
    let jobs_api: Api<Job> = Api::namespaced(client.clone(), &ns);
    let background = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };

    let mut jobs: Vec<Arc<Job>> = caches
        .jobs
        .in_namespace("", &ns)
        .into_iter()
        .filter(|j| owned_by(&j.metadata, &uid) && j.metadata.deletion_timestamp.is_none())
        .collect();
    jobs.sort_by_key(|j| j.metadata.creation_timestamp.as_ref().map(|t| t.0));

    // History: the oldest finished Jobs beyond the limits go.
    for (state, limit) in [
        (
            "Complete",
            spec["successfulJobsHistoryLimit"].as_i64().unwrap_or(3),
        ),
        (
            "Failed",
            spec["failedJobsHistoryLimit"].as_i64().unwrap_or(1),
        ),
    ] {
        let of_state: Vec<&Arc<Job>> = jobs.iter().filter(|j| finished(j) == Some(state)).collect();
        let surplus = of_state.len().saturating_sub(limit.max(0) as usize);
        for j in of_state.iter().take(surplus) {
            let _ = jobs_api
                .delete(j.metadata.name.as_deref().unwrap_or(""), &background)
                .await;
        }
    }
    let active: Vec<&Arc<Job>> = jobs.iter().filter(|j| finished(j).is_none()).collect();

    // When the schedule is due (invalid schedules never get past the API server, but a
    // time zone can vanish from the machine: then nothing runs).
    let (Some(schedule), Ok(tz)) = (
        spec["schedule"]
            .as_str()
            .and_then(|s| CronSchedule::parse(s).ok()),
        spec["timeZone"]
            .as_str()
            .map_or(Ok(k8s_openapi::jiff::tz::TimeZone::UTC), time_zone),
    ) else {
        return Ok(None);
    };
    let now = Timestamp::now();
    let since = v["status"]["lastScheduleTime"]
        .as_str()
        .or(v["metadata"]["creationTimestamp"].as_str())
        .and_then(|t| t.parse::<Timestamp>().ok())
        .unwrap_or(now);
    let (scheduled, next) = due(&schedule, &tz, since, now);
    let mut last_schedule = v["status"]["lastScheduleTime"].clone();
    let mut active_refs: Vec<Value> = active.iter().map(|j| reference(j)).collect();
    if let Some(at) = scheduled
        && spec["suspend"] != true
    {
        let too_late = spec["startingDeadlineSeconds"]
            .as_i64()
            .is_some_and(|d| now.duration_since(at) > SignedDuration::from_secs(d.max(0)));
        let policy = spec["concurrencyPolicy"].as_str().unwrap_or("Allow");
        let blocked = policy == "Forbid" && !active.is_empty();
        if too_late {
            tracing::info!(cronjob = %name, scheduled = %at, "missed its starting deadline");
            let message = format!("Missed scheduled time to start a job: {at}");
            events
                .record(
                    &Regarding::of(cj),
                    EventType::Warning,
                    "MissSchedule",
                    &message,
                )
                .await;
            last_schedule = json!(at.to_string());
        } else if !blocked {
            if policy == "Replace" {
                for j in &active {
                    let _ = jobs_api
                        .delete(j.metadata.name.as_deref().unwrap_or(""), &background)
                        .await;
                }
                active_refs.clear();
            }
            let job = job_for(&v, &name, &uid, at);
            match jobs_api.create(&PostParams::default(), &job).await {
                Ok(created) => {
                    let message = format!(
                        "Created job {}",
                        created.metadata.name.as_deref().unwrap_or("")
                    );
                    events
                        .record(
                            &Regarding::of(cj),
                            EventType::Normal,
                            "SuccessfulCreate",
                            &message,
                        )
                        .await;
                    active_refs.push(reference(&created));
                }
                // Made in an earlier pass whose status write did not land.
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e),
            }
            last_schedule = json!(at.to_string());
        }
    }
    let last_successful = jobs
        .iter()
        .filter(|j| finished(j) == Some("Complete"))
        .filter_map(|j| j.status.as_ref()?.completion_time.as_ref().map(|t| t.0))
        .max()
        .map(|t| json!(t.to_string()))
        .unwrap_or_else(|| v["status"]["lastSuccessfulTime"].clone());
    let status = json!({
        "active": if active_refs.is_empty() { Value::Null } else { json!(active_refs) },
        "lastScheduleTime": last_schedule,
        "lastSuccessfulTime": last_successful,
    });
    let differs = ["active", "lastScheduleTime", "lastSuccessfulTime"]
        .iter()
        .any(|f| v["status"][*f] != status[*f]);
    if differs {
        Api::<CronJob>::namespaced(client.clone(), &ns)
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await?;
    }
    Ok(next.map(instant_at))
}

fn reference(j: &Job) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "namespace": j.metadata.namespace, "name": j.metadata.name,
        "uid": j.metadata.uid, "resourceVersion": j.metadata.resource_version,
    })
}

/// The Job's name for the run scheduled at `at`: after the minute, as kube names it, so a
/// second pass for the same run finds it taken instead of making another; after the
/// second when the schedule fires within minutes (`@every 10s`), which kube would collide.
fn job_name(name: &str, at: Timestamp) -> String {
    let s = at.as_second();
    if s % 60 == 0 {
        format!("{name}-{}", s / 60)
    } else {
        format!("{name}-{s}")
    }
}

/// The Job for the run scheduled at `at`.
fn job_for(cj: &Value, name: &str, uid: &str, at: Timestamp) -> Job {
    let template = &cj["spec"]["jobTemplate"];
    let mut annotations = template["metadata"]["annotations"].clone();
    if !annotations.is_object() {
        annotations = json!({});
    }
    annotations[SCHEDULED_AT] = json!(at.to_string());
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {
            "name": job_name(name, at),
            "labels": template["metadata"]["labels"],
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": template["spec"],
    }))
    .unwrap_or_default()
}
