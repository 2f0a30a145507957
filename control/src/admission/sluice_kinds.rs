//! Fields of Sluice's own kinds that the placement controllers act on, checked where they
//! are written: a `Placement`'s `mode` is `Single` or `Spread` and its traffic shift is in range, a `Cluster`'s capacity is
//! made of quantities. Refused with 422 rather than read as "unset" later.

use serde_json::Value;
use sluice_api::sluice::TrafficShift;
use sluice_kube::resources::parse_quantity;

use crate::errors::Cause;
use crate::pipeline::hooks::Hook;

pub struct PlacementFields;

impl Hook for PlacementFields {
    fn validate(&self, obj: &Value) -> Vec<Cause> {
        let mut causes = match &obj["spec"]["mode"] {
            Value::Null => Vec::new(),
            Value::String(m) if m == "Single" || m == "Spread" => Vec::new(),
            other => vec![Cause::invalid(
                "spec.mode",
                &other.to_string(),
                "supported values: \"Single\", \"Spread\"",
            )],
        };
        let shift = &obj["spec"]["trafficShift"];
        for (field, min, max) in [
            ("durationSeconds", 0u32, TrafficShift::MAX_DURATION_SECONDS),
            ("steps", 1, TrafficShift::MAX_STEPS),
            ("maxDrainSeconds", 0, TrafficShift::MAX_MAX_DRAIN_SECONDS),
            ("rollback.maxErrorRateIncreasePercent", 0, 100),
            ("rollback.maxP99Factor", 1, 1000),
            ("rollback.minRequests", 1, 1_000_000),
        ] {
            let v = field.split('.').try_fold(shift, |v, k| v.get(k));
            let Some(v) = v.filter(|v| !v.is_null()) else {
                continue;
            };
            if v.as_u64()
                .is_none_or(|n| n < u64::from(min) || n > u64::from(max))
            {
                causes.push(Cause::invalid(
                    format!("spec.trafficShift.{field}"),
                    &v.to_string(),
                    format!("must be a whole number from {min} to {max}"),
                ));
            }
        }
        let enabled = &shift["rollback"]["enabled"];
        if !(enabled.is_null() || enabled.is_boolean()) {
            causes.push(Cause::invalid(
                "spec.trafficShift.rollback.enabled",
                &enabled.to_string(),
                "must be true or false",
            ));
        }
        causes
    }
}

pub struct ClusterFields;

/// The causes of an invalid capacity (`Cluster.spec.capacity`, a workspace's
/// `clusterQuota`) at `field`: pods a whole number, CPU and memory quantities.
pub fn capacity_causes(capacity: &Value, field: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    if capacity.is_null() {
        return causes;
    }
    if !capacity.is_object() {
        return vec![Cause::invalid(
            field,
            &capacity.to_string(),
            "must be an object",
        )];
    }
    if let Some(p) = capacity.get("pods")
        && p.as_i64().is_none_or(|n| n < 0)
    {
        causes.push(Cause::invalid(
            format!("{field}.pods"),
            &p.to_string(),
            "must be a whole number, 0 or more",
        ));
    }
    for f in ["cpu", "memory"] {
        let Some(v) = capacity.get(f) else { continue };
        let ok = match v {
            Value::String(s) => parse_quantity(s).is_some(),
            Value::Number(n) => n.as_f64().is_some_and(|n| n >= 0.0),
            _ => false,
        };
        if !ok {
            causes.push(Cause::invalid(
                format!("{field}.{f}"),
                &v.to_string(),
                "must be a quantity such as 500m, 2, 128Mi or 1G",
            ));
        }
    }
    causes
}

impl Hook for ClusterFields {
    fn validate(&self, obj: &Value) -> Vec<Cause> {
        let mut causes = capacity_causes(&obj["spec"]["capacity"], "spec.capacity");
        // The clusterset DNS answers Ingress hosts with these addresses' IPs.
        for (i, a) in obj["spec"]["ingresses"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let ok = a
                .as_str()
                .is_some_and(|s| sluice_api::sync::ingress_ip(s).is_some());
            if !ok {
                causes.push(Cause::invalid(
                    format!("spec.ingresses[{i}]"),
                    &a.to_string(),
                    "must be an IP address, with or without a port, such as 10.0.0.5:80",
                ));
            }
        }
        // The console reads these; only plain `http://host[:port]/path` is read.
        for (i, u) in obj["spec"]["metrics"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            if !u.as_str().is_some_and(metrics_url) {
                causes.push(Cause::invalid(
                    format!("spec.metrics[{i}]"),
                    &u.to_string(),
                    "must be an http:// URL with a host, such as http://10.0.0.5:15000/metrics",
                ));
            }
        }
        causes
    }
}

/// `http://host[:port][/path]`, at most 2048 bytes.
fn metrics_url(s: &str) -> bool {
    s.len() <= 2048
        && s.parse::<http::Uri>().is_ok_and(|u| {
            u.scheme_str() == Some("http") && u.host().is_some_and(|h| !h.is_empty())
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn unknown_modes_and_bad_quantities_are_refused() {
        assert!(
            PlacementFields
                .validate(&json!({"spec": {"mode": "Spread"}}))
                .is_empty()
        );
        assert!(PlacementFields.validate(&json!({"spec": {}})).is_empty());
        assert!(
            PlacementFields
                .validate(&json!({"spec": {"trafficShift": {"durationSeconds": 30, "steps": 10}}}))
                .is_empty()
        );
        let bad = PlacementFields
            .validate(&json!({"spec": {"trafficShift": {"durationSeconds": -1, "steps": 0}}}));
        assert_eq!(bad.len(), 2, "{bad:?}");
        let rollback = |r: serde_json::Value| {
            PlacementFields.validate(&json!({"spec": {"trafficShift": {"rollback": r}}}))
        };
        assert!(rollback(json!({"maxErrorRateIncreasePercent": 5, "minRequests": 10})).is_empty());
        let bad = rollback(
            json!({"maxErrorRateIncreasePercent": 101, "maxP99Factor": 0,
                                  "enabled": "yes"}),
        );
        assert_eq!(bad.len(), 3, "{bad:?}");
        assert!(
            format!("{bad:?}").contains("spec.trafficShift.rollback.maxP99Factor"),
            "{bad:?}"
        );
        assert_eq!(
            PlacementFields
                .validate(&json!({"spec": {"mode": "spread"}}))
                .len(),
            1
        );
        let ok = json!({"spec": {"capacity": {"pods": 3, "cpu": "500m", "memory": "1Gi"}}});
        assert!(ClusterFields.validate(&ok).is_empty());
        let ingresses =
            json!({"spec": {"ingresses": ["127.20.0.1:80", "10.0.0.5", "shop.example:80", 7]}});
        let metrics = json!({"spec": {"metrics": ["http://127.20.0.1:15000/metrics", "https://x/m", "ftp://a", 3, "http:///x"]}});
        let bad = ClusterFields.validate(&metrics);
        assert_eq!(bad.len(), 4, "{bad:?}");
        assert!(format!("{bad:?}").contains("spec.metrics[1]"), "{bad:?}");
        let bad = ClusterFields.validate(&ingresses);
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert!(format!("{bad:?}").contains("spec.ingresses[2]"), "{bad:?}");
        let bad = json!({"spec": {"capacity": {"pods": -1, "cpu": "lots", "memory": true}}});
        assert_eq!(ClusterFields.validate(&bad).len(), 3);
    }
}
