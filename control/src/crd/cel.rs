//! CRD validation rules (`x-kubernetes-validations`) in CEL, with the `cel` crate and its
//! strings, lists and math extensions: each rule is compiled when its CRD is written (a rule
//! that does not compile, or names a variable other than `self` and `oldSelf`, refuses the
//! CRD with the compiler's message) and evaluated at its node of every object written, with
//! `self` the node's value and, for transition rules (those that name `oldSelf`), `oldSelf`
//! the node's value in the object being replaced — transition rules are skipped on create,
//! as kube skips them. A failed rule is kube's cause: the node's path (plus the rule's
//! `fieldPath`), `Invalid value: "<type>": <message>` (or the rule's `reason`), the message
//! being `message`, `messageExpression` evaluated, or `failed rule: <rule>`.

use cel::Context;
use serde_json::Value;

use super::structural::type_name;
use crate::cel::{cost, env, to_cel};
use crate::errors::Cause;

/// Deepest node a rule is looked for at (as the structural walk).
const MAX_DEPTH: usize = 64;

/// Rules at most in one CRD version's schema: kube bounds rules by their estimated cost;
/// Sluice bounds their number and length ([`crate::cel::MAX_CHARS`]).
pub const MAX_RULES: usize = 256;

/// The variables a rule may name.
const VARIABLES: [&str; 2] = ["self", "oldSelf"];

/// Compile rule `source` (see [`crate::cel::compile`]).
pub fn compile(source: &str) -> Result<cel::Program, String> {
    crate::cel::compile(source, &VARIABLES)
}

fn compiled(source: &str) -> Option<std::rc::Rc<crate::cel::Compiled>> {
    crate::cel::compiled(source, &VARIABLES)
}

fn rules(schema: &Value) -> impl Iterator<Item = &Value> {
    schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// What the walk over a schema's rules adds up.
#[derive(Default)]
struct Tally {
    rules: usize,
    /// Each rule's estimated cost times the nodes it may run at.
    cost: f64,
}

/// The causes of a CRD version's schema whose rules do not compile or cost more than
/// kube allows (one rule, or all of them weighed by how many nodes each may run at),
/// under `path` (the schema's own field path in the CRD).
pub fn check_schema(schema: &Value, path: &str, causes: &mut Vec<Cause>) {
    let mut tally = Tally::default();
    check_node(schema, path, causes, &mut tally, 1.0, 0);
    if tally.cost > cost::SCHEMA_LIMIT {
        causes.push(Cause::forbidden(
            path.to_string(),
            format!(
                "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of {:.2}x (try reducing the cost of the rules or the cardinality of the nodes they apply to)",
                tally.cost / cost::SCHEMA_LIMIT
            ),
        ));
    }
    let count = tally.rules;
    if count > MAX_RULES {
        causes.push(Cause::invalid(
            path.to_string(),
            "",
            format!("{count} validation rules: at most {MAX_RULES} are allowed per schema"),
        ));
    }
}

/// `cardinality`: how many nodes of an object `schema` may describe at most.
fn check_node(
    schema: &Value,
    path: &str,
    causes: &mut Vec<Cause>,
    tally: &mut Tally,
    cardinality: f64,
    depth: usize,
) {
    if depth > MAX_DEPTH || !schema.is_object() {
        return;
    }
    for (i, r) in rules(schema).enumerate() {
        tally.rules += 1;
        let field = format!("{path}.x-kubernetes-validations[{i}]");
        match r["rule"].as_str() {
            None | Some("") => causes.push(Cause::required(format!("{field}.rule"))),
            Some(rule) => match compile(rule) {
                Err(e) => causes.push(Cause::invalid(format!("{field}.rule"), rule, e)),
                Ok(program) => {
                    let shape = cost::Shape::Schema(schema);
                    let estimate = cost::estimate(
                        program.expression(),
                        &[("self", shape), ("oldSelf", shape)],
                        &cost::Bounds::UNBOUNDED,
                    );
                    if estimate > cost::STATIC_LIMIT {
                        causes.push(Cause::forbidden(
                            format!("{field}.rule"),
                            cost::over_budget(estimate, cost::STATIC_LIMIT),
                        ));
                    }
                    tally.cost += estimate * cardinality;
                }
            },
        }
        if let Some(m) = r["messageExpression"].as_str()
            && let Err(e) = compile(m)
        {
            causes.push(Cause::invalid(format!("{field}.messageExpression"), m, e));
        }
        if let Some(reason) = r["reason"].as_str()
            && !matches!(
                reason,
                "FieldValueInvalid"
                    | "FieldValueForbidden"
                    | "FieldValueRequired"
                    | "FieldValueDuplicate"
            )
        {
            causes.push(Cause {
                reason: "FieldValueNotSupported",
                field: format!("{field}.reason"),
                message: format!(
                    "Unsupported value: {reason:?}: supported values: \"FieldValueDuplicate\", \"FieldValueForbidden\", \"FieldValueInvalid\", \"FieldValueRequired\""
                ),
            });
        }
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, sub) in props {
            check_node(
                sub,
                &format!("{path}.properties[{k}]"),
                causes,
                tally,
                cardinality,
                depth + 1,
            );
        }
    }
    for (key, bound) in [
        ("items", "maxItems"),
        ("additionalProperties", "maxProperties"),
    ] {
        if let Some(sub) = schema.get(key).filter(|s| s.is_object()) {
            let n = schema
                .get(bound)
                .and_then(Value::as_f64)
                .unwrap_or(cost::Bounds::UNBOUNDED.items);
            check_node(
                sub,
                &format!("{path}.{key}"),
                causes,
                tally,
                cardinality * n,
                depth + 1,
            );
        }
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Evaluate every rule of `schema` on `value` (`old`: the value it replaces, for
/// transition rules), adding a cause for each that fails.
pub fn validate(
    schema: &Value,
    value: &Value,
    old: Option<&Value>,
    path: &str,
    causes: &mut Vec<Cause>,
    depth: usize,
) {
    if depth > MAX_DEPTH || value.is_null() {
        return;
    }
    let has_rules = rules(schema).next().is_some();
    if has_rules {
        let mut cx = Context::with_env(env());
        cx.add_variable_from_value("self", to_cel(value));
        if let Some(o) = old {
            cx.add_variable_from_value("oldSelf", to_cel(o));
        }
        for r in rules(schema) {
            let Some(rule) = r["rule"].as_str() else {
                continue;
            };
            let Some(this_rule) = compiled(rule) else {
                continue;
            };
            if this_rule.names("oldSelf") && old.is_none() {
                continue;
            }
            let program = &this_rule.program;
            let failed = match program.execute(&cx) {
                Ok(cel::Value::Bool(true)) => continue,
                Ok(cel::Value::Bool(false)) => None,
                Ok(other) => Some(format!(
                    "rule evaluated to {:?}, not a boolean",
                    other.type_of()
                )),
                Err(e) => Some(format!("rule evaluation error: {e}")),
            };
            let message = match failed {
                Some(error) => error,
                None => r["messageExpression"]
                    .as_str()
                    .and_then(compiled)
                    .and_then(|m| match m.program.execute(&cx) {
                        Ok(cel::Value::String(s)) if !s.trim().is_empty() => Some(s.to_string()),
                        _ => None,
                    })
                    .or_else(|| r["message"].as_str().map(str::to_string))
                    .unwrap_or_else(|| format!("failed rule: {rule}")),
            };
            let mut field = path.to_string();
            if let Some(fp) = r["fieldPath"].as_str() {
                field.push_str(fp);
            }
            let field = field.trim_start_matches('.').to_string();
            let field = if field.is_empty() {
                "<nil>".to_string()
            } else {
                field
            };
            causes.push(match r["reason"].as_str().unwrap_or("FieldValueInvalid") {
                "FieldValueForbidden" => Cause::forbidden(field, message),
                "FieldValueRequired" => Cause {
                    reason: "FieldValueRequired",
                    field,
                    message: format!("Required value: {message}"),
                },
                "FieldValueDuplicate" => Cause {
                    reason: "FieldValueDuplicate",
                    field,
                    message: format!("Duplicate value: {message}"),
                },
                _ => Cause::invalid(field, type_name(value), message),
            });
        }
    }
    match value {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let add = schema.get("additionalProperties").filter(|a| a.is_object());
            for (k, v) in map {
                let sub = props.and_then(|p| p.get(k)).or(add);
                if let Some(sub) = sub {
                    let before = old.and_then(|o| o.get(k));
                    validate(sub, v, before, &join(path, k), causes, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items").filter(|s| s.is_object()) {
                for (i, v) in items.iter().enumerate() {
                    validate(sub, v, None, &format!("{path}[{i}]"), causes, depth + 1);
                }
            }
        }
        _ => {}
    }
}

/// Whether `schema` holds any rule (objects of a CRD without rules skip the walk).
pub fn has_rules(schema: &Value) -> bool {
    fn walk(s: &Value, depth: usize) -> bool {
        if depth > MAX_DEPTH || !s.is_object() {
            return false;
        }
        rules(s).next().is_some()
            || s.get("properties")
                .and_then(Value::as_object)
                .is_some_and(|p| p.values().any(|v| walk(v, depth + 1)))
            || ["items", "additionalProperties"]
                .iter()
                .any(|k| s.get(*k).is_some_and(|v| walk(v, depth + 1)))
    }
    walk(schema, 0)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "properties": {"spec": {
            "type": "object",
            "x-kubernetes-validations": [
                {"rule": "self.replicas <= self.maxReplicas", "message": "replicas must not exceed maxReplicas"},
                {"rule": "self.name.startsWith('app-')", "fieldPath": ".name", "reason": "FieldValueForbidden", "messageExpression": "'name ' + self.name + ' must start with app-'"},
                {"rule": "self.mode == oldSelf.mode", "message": "mode is immutable"},
            ],
            "properties": {"replicas": {"type": "integer"}, "maxReplicas": {"type": "integer"},
                "name": {"type": "string"}, "mode": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string", "x-kubernetes-validations": [{"rule": "size(self) < 8"}]}}}
        }}})
    }

    fn causes(new: Value, old: Option<Value>) -> Vec<Cause> {
        let mut out = Vec::new();
        validate(&schema(), &new, old.as_ref(), "", &mut out, 0);
        out
    }

    #[test]
    fn rules_refuse_with_kubes_causes() {
        let ok = json!({"spec": {"replicas": 1, "maxReplicas": 3, "name": "app-a", "mode": "x", "tags": ["a"]}});
        assert!(causes(ok.clone(), None).is_empty());
        let bad = json!({"spec": {"replicas": 5, "maxReplicas": 3, "name": "web", "mode": "y", "tags": ["muchtoolong"]}});
        let c = causes(bad.clone(), None);
        assert_eq!(c.len(), 3, "{c:?}");
        assert_eq!(c[0].field, "spec");
        assert_eq!(
            c[0].message,
            "Invalid value: \"object\": replicas must not exceed maxReplicas"
        );
        assert_eq!(c[1].field, "spec.name");
        assert_eq!(c[1].message, "Forbidden: name web must start with app-");
        assert_eq!(c[2].field, "spec.tags[0]");
        assert_eq!(
            c[2].message,
            "Invalid value: \"string\": failed rule: size(self) < 8"
        );
        // The transition rule runs on update only.
        let c = causes(bad, Some(ok));
        assert!(
            c.iter().any(|c| c.message.ends_with("mode is immutable")),
            "{c:?}"
        );
    }

    #[test]
    fn rules_that_do_not_compile_refuse_their_crd() {
        let mut c = Vec::new();
        check_schema(
            &json!({"type": "object", "x-kubernetes-validations": [{"rule": "self.a <"}, {"rule": "other > 1"}, {"rule": "self.a > 1"}]}),
            "spec.versions[0].schema.openAPIV3Schema",
            &mut c,
        );
        assert_eq!(c.len(), 2, "{c:?}");
        assert_eq!(
            c[0].field,
            "spec.versions[0].schema.openAPIV3Schema.x-kubernetes-validations[0].rule"
        );
        assert!(c[0].message.contains("compilation failed"), "{c:?}");
        assert!(
            c[1].message.contains("undeclared reference to 'other'"),
            "{c:?}"
        );
        let mut ok = Vec::new();
        check_schema(
            &json!({"type": "array", "maxItems": 1000, "x-kubernetes-validations": [{"rule": "self.all(x, x > 0) && self.exists(y, y == 2)"}]}),
            "s",
            &mut ok,
        );
        assert!(ok.is_empty(), "{ok:?}");
        assert!(has_rules(&schema()));
        assert!(!has_rules(&json!({"type": "object"})));
    }
}
