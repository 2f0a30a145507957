//! `metav1.LabelSelector` matching, with kube-apiserver's validation: an operator it does
//! not know, `In`/`NotIn` without values or `Exists`/`DoesNotExist` with values make the
//! selector invalid (an error to report), never a selector that silently matches nothing.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Why a label selector is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("matchExpressions[{0}]: operator {1:?} is not one of In, NotIn, Exists, DoesNotExist")]
    Operator(usize, String),
    #[error("matchExpressions[{0}]: operator {1} needs at least one value")]
    NoValues(usize, &'static str),
    #[error("matchExpressions[{0}]: operator {1} takes no values")]
    Values(usize, &'static str),
    #[error("matchExpressions[{0}]: the key is empty")]
    EmptyKey(usize),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A validated selector. An empty one matches everything, as in Kubernetes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector(Vec<Requirement>);

impl Selector {
    pub fn parse(s: &LabelSelector) -> Result<Self, SelectorError> {
        let mut reqs: Vec<Requirement> = s
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| Requirement::In(k.clone(), vec![v.clone()]))
            .collect();
        for (i, e) in s.match_expressions.iter().flatten().enumerate() {
            if e.key.is_empty() {
                return Err(SelectorError::EmptyKey(i));
            }
            let values = e.values.clone().unwrap_or_default();
            let r = match e.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => {
                    return Err(SelectorError::NoValues(
                        i,
                        if e.operator == "In" { "In" } else { "NotIn" },
                    ));
                }
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    return Err(SelectorError::Values(
                        i,
                        if e.operator == "Exists" {
                            "Exists"
                        } else {
                            "DoesNotExist"
                        },
                    ));
                }
                "In" => Requirement::In(e.key.clone(), values),
                "NotIn" => Requirement::NotIn(e.key.clone(), values),
                "Exists" => Requirement::Exists(e.key.clone()),
                "DoesNotExist" => Requirement::DoesNotExist(e.key.clone()),
                other => return Err(SelectorError::Operator(i, other.to_string())),
            };
            reqs.push(r);
        }
        Ok(Self(reqs))
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        })
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn labels_and_expressions_all_hold() {
        let s = Selector::parse(&LabelSelector {
            match_labels: Some(labels(&[("region", "eu")])),
            match_expressions: Some(vec![
                expr("tier", "In", &["gold", "silver"]),
                expr("retired", "DoesNotExist", &[]),
            ]),
        })
        .unwrap();
        assert!(s.matches(&labels(&[("region", "eu"), ("tier", "gold")])));
        assert!(!s.matches(&labels(&[("region", "us"), ("tier", "gold")])));
        assert!(!s.matches(&labels(&[
            ("region", "eu"),
            ("tier", "gold"),
            ("retired", "")
        ])));
        assert!(
            Selector::parse(&LabelSelector::default())
                .unwrap()
                .matches(&labels(&[]))
        );
    }

    #[test]
    fn invalid_selectors_say_what_is_wrong() {
        let bad = |e| {
            Selector::parse(&LabelSelector {
                match_labels: None,
                match_expressions: Some(vec![e]),
            })
            .unwrap_err()
        };
        assert_eq!(
            bad(expr("a", "Equals", &["x"])),
            SelectorError::Operator(0, "Equals".into())
        );
        assert_eq!(bad(expr("a", "In", &[])), SelectorError::NoValues(0, "In"));
        assert_eq!(
            bad(expr("a", "Exists", &["x"])),
            SelectorError::Values(0, "Exists")
        );
    }
}
