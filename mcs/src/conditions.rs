//! Status conditions of ServiceExports and ServiceImports (KEP-1645 types and reasons).
//!
//! Conditions follow `meta.SetStatusCondition`: `lastTransitionTime` moves only when the
//! status does, so a reconcile that changes nothing writes nothing, and users can tell how
//! long a state has held.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use sluice_api::mcs::{ServiceExportStatus, ServiceImportType};

use crate::export::{Export, Validity};
use crate::merge::Merged;
use crate::names::truncate;
use crate::vip::VipError;

/// Longest condition message the API accepts (`metav1.Condition.message`).
const MAX_MESSAGE_LEN: usize = 32768;

pub const CONDITION_VALID: &str = "Valid";
pub const CONDITION_READY: &str = "Ready";
pub const CONDITION_CONFLICT: &str = "Conflict";

pub const REASON_VALID: &str = "Valid";
pub const REASON_NO_SERVICE: &str = "NoService";
pub const REASON_INVALID_SERVICE_TYPE: &str = "InvalidServiceType";
/// Ready reason of a contributing export (push model: the controller writes the imports).
pub const REASON_EXPORTED: &str = "Exported";
pub const REASON_PENDING: &str = "Pending";
pub const REASON_FAILED: &str = "Failed";
pub const REASON_NO_CONFLICTS: &str = "NoConflicts";
/// Ready reason of a ServiceImport.
pub const REASON_READY: &str = "Ready";

/// Builds a condition list from the previous one, keeping transition times.
pub(crate) struct Conditions<'a> {
    previous: &'a [Condition],
    generation: Option<i64>,
    now: &'a Time,
    out: Vec<Condition>,
}

impl<'a> Conditions<'a> {
    pub fn new(previous: &'a [Condition], generation: Option<i64>, now: &'a Time) -> Self {
        Self {
            previous,
            generation,
            now,
            out: Vec::new(),
        }
    }

    pub fn set(&mut self, type_: &str, status: bool, reason: &str, message: String) {
        let status = if status { "True" } else { "False" };
        let last_transition_time = self
            .previous
            .iter()
            .find(|c| c.type_ == type_ && c.status == status)
            .map_or_else(|| self.now.clone(), |c| c.last_transition_time.clone());
        self.out.push(Condition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: reason.to_string(),
            message: truncate(message, MAX_MESSAGE_LEN),
            observed_generation: self.generation,
            last_transition_time,
        });
    }

    pub fn finish(self) -> Vec<Condition> {
        self.out
    }
}

/// The status of an explicit ServiceExport in an alive cluster. `merged` is the service's
/// merged view when at least one export is valid.
pub(crate) fn export_status(
    export: &Export<'_>,
    merged: Option<&Merged<'_>>,
    now: &Time,
) -> ServiceExportStatus {
    let previous = export
        .object
        .and_then(|o| o.status.as_ref())
        .map_or(&[][..], |s| s.conditions.as_slice());
    let generation = export.object.and_then(|o| o.metadata.generation);
    let mut c = Conditions::new(previous, generation, now);
    let key = export.key;
    match (export.validity, merged) {
        (Validity::Valid(r#type), Some(merged)) => {
            let type_name = match r#type {
                ServiceImportType::ClusterSetIP => "ClusterSetIP",
                ServiceImportType::Headless => "Headless",
            };
            c.set(
                CONDITION_VALID,
                true,
                REASON_VALID,
                format!("Service {key} can be exported as {type_name}"),
            );
            c.set(
                CONDITION_READY,
                true,
                REASON_EXPORTED,
                format!("Service {key} is exported to the clusterset"),
            );
            match &merged.conflict {
                Some(conflict) => c.set(
                    CONDITION_CONFLICT,
                    true,
                    &conflict.reason(),
                    conflict.message.clone(),
                ),
                None => c.set(
                    CONDITION_CONFLICT,
                    false,
                    REASON_NO_CONFLICTS,
                    "no conflicts with the other exports of this service".into(),
                ),
            }
        }
        // A valid export always has a merged view; kept as a pending state, not a panic.
        (Validity::Valid(_), None) => {
            c.set(
                CONDITION_VALID,
                true,
                REASON_VALID,
                format!("Service {key} can be exported"),
            );
            c.set(
                CONDITION_READY,
                false,
                REASON_PENDING,
                "waiting to be merged into the ServiceImport".into(),
            );
        }
        (Validity::NoService, _) => {
            c.set(
                CONDITION_VALID,
                false,
                REASON_NO_SERVICE,
                format!("there is no Service {key} in this cluster"),
            );
            c.set(
                CONDITION_READY,
                false,
                REASON_PENDING,
                format!("waiting for Service {key}"),
            );
        }
        (Validity::InvalidServiceType, _) => {
            let type_ = export
                .service
                .and_then(|s| s.spec.as_ref())
                .and_then(|s| s.type_.as_deref())
                .unwrap_or("unknown");
            c.set(
                CONDITION_VALID,
                false,
                REASON_INVALID_SERVICE_TYPE,
                format!("Service {key} has type {type_}, which has no endpoints to export"),
            );
            c.set(
                CONDITION_READY,
                false,
                REASON_FAILED,
                format!("Service {key} cannot be exported"),
            );
        }
    }
    ServiceExportStatus {
        conditions: c.finish(),
    }
}

/// The conditions of a ServiceImport in one importing cluster.
pub(crate) fn import_conditions(
    previous: &[Condition],
    clusters: usize,
    vip_error: Option<&VipError>,
    now: &Time,
) -> Vec<Condition> {
    let mut c = Conditions::new(previous, None, now);
    match vip_error {
        None => c.set(
            CONDITION_READY,
            true,
            REASON_READY,
            format!("imported from {clusters} cluster(s)"),
        ),
        Some(e) => c.set(
            CONDITION_READY,
            false,
            REASON_PENDING,
            format!("no VIP could be allocated: {e}"),
        ),
    }
    c.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(s: &str) -> Time {
        Time(s.parse::<Timestamp>().unwrap())
    }

    #[test]
    fn transition_time_moves_only_with_the_status() {
        let t0 = at("2026-01-01T00:00:00Z");
        let t1 = at("2026-01-02T00:00:00Z");
        let mut c = Conditions::new(&[], Some(1), &t0);
        c.set(CONDITION_READY, true, REASON_READY, "a".into());
        let first = c.finish();
        assert_eq!(first[0].last_transition_time, t0);

        let mut c = Conditions::new(&first, Some(2), &t1);
        c.set(CONDITION_READY, true, REASON_READY, "new message".into());
        let same = c.finish();
        assert_eq!(same[0].last_transition_time, t0);
        assert_eq!(same[0].observed_generation, Some(2));

        let mut c = Conditions::new(&same, Some(2), &t1);
        c.set(CONDITION_READY, false, REASON_PENDING, "b".into());
        assert_eq!(c.finish()[0].last_transition_time, t1);
    }
}
