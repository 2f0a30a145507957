//! The JSONPath subset that CRD printer columns and kubectl use: `.a.b`, `[n]`, `[*]`,
//! `['key']` and filters `[?(@.field=="value")]`.

use serde_json::Value;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    Field(String),
    Index(usize),
    All,
    Filter { path: Vec<String>, value: String },
}

/// A parsed path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonPath(Vec<Step>);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid JSONPath {path:?}: {reason}")]
pub struct JsonPathError {
    path: String,
    reason: &'static str,
}

impl JsonPath {
    pub fn parse(path: &str) -> Result<Self, JsonPathError> {
        let err = |reason| JsonPathError {
            path: path.to_string(),
            reason,
        };
        let p = path.trim().trim_start_matches('{').trim_end_matches('}');
        let mut steps = Vec::new();
        let mut rest = p.strip_prefix('$').unwrap_or(p);
        while !rest.is_empty() {
            if let Some(r) = rest.strip_prefix('.') {
                let end = r.find(['.', '[']).unwrap_or(r.len());
                if end == 0 {
                    return Err(err("empty field name"));
                }
                steps.push(Step::Field(r[..end].to_string()));
                rest = &r[end..];
            } else if let Some(r) = rest.strip_prefix('[') {
                let end = r.find(']').ok_or_else(|| err("unclosed ["))?;
                let inner = &r[..end];
                rest = &r[end + 1..];
                if inner == "*" {
                    steps.push(Step::All);
                } else if let Ok(i) = inner.parse() {
                    steps.push(Step::Index(i));
                } else if let Some(f) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')'))
                {
                    let (field, value) = f
                        .split_once("==")
                        .ok_or_else(|| err("filters support == only"))?;
                    let value = value
                        .trim()
                        .trim_matches(|c| c == '"' || c == '\'')
                        .to_string();
                    steps.push(Step::Filter {
                        path: field.trim().split('.').map(str::to_string).collect(),
                        value,
                    });
                } else if let Some(k) = inner.strip_prefix('\'').and_then(|k| k.strip_suffix('\''))
                {
                    steps.push(Step::Field(k.to_string()));
                } else {
                    return Err(err("unsupported bracket expression"));
                }
            } else {
                return Err(err("expected . or ["));
            }
        }
        Ok(Self(steps))
    }

    /// Every value the path selects.
    pub fn eval<'a>(&self, root: &'a Value) -> Vec<&'a Value> {
        let mut current = vec![root];
        for step in &self.0 {
            let mut next = Vec::new();
            for v in current {
                match step {
                    Step::Field(f) => {
                        if let Some(x) = v.get(f.as_str()) {
                            next.push(x);
                        }
                    }
                    Step::Index(i) => {
                        if let Some(x) = v.get(*i) {
                            next.push(x);
                        }
                    }
                    Step::All => match v {
                        Value::Array(a) => next.extend(a.iter()),
                        Value::Object(m) => next.extend(m.values()),
                        _ => {}
                    },
                    Step::Filter { path, value } => {
                        for item in v.as_array().into_iter().flatten() {
                            let mut x = item;
                            for seg in path {
                                x = &x[seg.as_str()];
                            }
                            let matches = match x {
                                Value::String(s) => s == value,
                                Value::Null => false,
                                other => {
                                    serde_json::from_str::<Value>(value).is_ok_and(|v| v == *other)
                                }
                            };
                            if matches {
                                next.push(item);
                            }
                        }
                    }
                }
            }
            current = next;
        }
        current
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths() {
        let o = json!({"spec": {"size": 3, "items": [{"n": "a"}, {"n": "b"}]}, "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "X", "status": "False"}]}});
        assert_eq!(
            JsonPath::parse(".spec.size").unwrap().eval(&o),
            vec![&json!(3)]
        );
        assert_eq!(
            JsonPath::parse(".spec.items[1].n").unwrap().eval(&o),
            vec![&json!("b")]
        );
        assert_eq!(
            JsonPath::parse(".spec.items[*].n").unwrap().eval(&o).len(),
            2
        );
        assert_eq!(
            JsonPath::parse(r#".status.conditions[?(@.type=="Ready")].status"#)
                .unwrap()
                .eval(&o),
            vec![&json!("True")]
        );
        assert_eq!(
            JsonPath::parse("{.spec['size']}").unwrap().eval(&o),
            vec![&json!(3)]
        );
        assert!(JsonPath::parse(".spec..x").is_err());
        assert!(JsonPath::parse(".a[").is_err());
        assert!(JsonPath::parse(".missing.x").unwrap().eval(&o).is_empty());
    }
}
