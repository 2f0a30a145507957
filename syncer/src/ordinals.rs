//! A StatefulSet with claim templates runs here only the ordinals whose claims are ready
//! for it. Placement makes each ordinal's claims in the logical cluster, so they travel
//! down like any claim and the cluster's controller finds them there instead of making
//! empty ones of its own; and while a move copies an ordinal's claim here, that ordinal
//! does not start here on partial data. From the set's first ordinal up, each runs once
//! every claim it mounts is ready; the first that is not stops the count (a set's
//! ordinals start in order).

use serde_json::Value;
use sluice_api::statefulset::{claim_names, has_templates, ordinals};

/// Lower downstream set `d`'s replicas to the ordinals, from its first, whose claims are
/// all `ready`.
pub fn run_ready_ordinals(d: &mut Value, ready: impl Fn(&str) -> bool) {
    if !has_templates(d) {
        return;
    }
    let range = ordinals(d);
    let wanted = range.len();
    let runnable = range
        .take_while(|i| claim_names(d, *i).iter().all(|c| ready(c)))
        .count();
    if runnable < wanted {
        d["spec"]["replicas"] = Value::from(runnable);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn set(replicas: i64, start: i64) -> Value {
        json!({"metadata": {"name": "db"}, "spec": {"replicas": replicas,
            "ordinals": {"start": start},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {}},
                {"metadata": {"name": "logs"}, "spec": {}}]}})
    }

    #[test]
    fn ordinals_run_up_to_the_first_whose_claims_are_not_ready() {
        let ready = |c: &str| {
            [
                "data-db-1",
                "logs-db-1",
                "data-db-2",
                "logs-db-2",
                "data-db-4",
                "logs-db-4",
            ]
            .contains(&c)
        };
        let mut d = set(3, 1);
        run_ready_ordinals(&mut d, ready);
        assert_eq!(d["spec"]["replicas"], 2);
        let mut none = set(3, 0);
        run_ready_ordinals(&mut none, ready);
        assert_eq!(none["spec"]["replicas"], 0);
        // One claim of two is not enough.
        let mut half = set(1, 1);
        run_ready_ordinals(&mut half, |c| c == "data-db-1");
        assert_eq!(half["spec"]["replicas"], 0);
    }

    #[test]
    fn a_set_without_templates_or_with_every_claim_ready_is_left_as_it_is() {
        let mut plain = json!({"metadata": {"name": "db"}, "spec": {"replicas": 3}});
        run_ready_ordinals(&mut plain, |_| false);
        assert_eq!(plain["spec"]["replicas"], 3);
        let mut all = set(2, 0);
        run_ready_ordinals(&mut all, |_| true);
        assert_eq!(all["spec"]["replicas"], 2);
        // A huge set stops counting at its first missing claim.
        let mut huge = set(i64::MAX, 0);
        run_ready_ordinals(&mut huge, |c| c.ends_with("-0"));
        assert_eq!(huge["spec"]["replicas"], 1);
    }
}
