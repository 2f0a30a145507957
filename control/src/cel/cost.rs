//! What evaluating an expression may cost, estimated as kube estimates it, so that a rule
//! cannot take the server down: each node costs about one unit, string and list functions
//! cost a tenth of a unit per character or item they scan, and a comprehension (`all`,
//! `exists`, `map`, `filter`, ...) costs its body once per item of what it ranges over —
//! so rules nested over unbounded lists multiply.
//!
//! How large a value may be comes from the CRD's schema where there is one (`maxItems`,
//! `maxProperties`, `maxLength`, the `items` and `properties` beneath), and otherwise from
//! [`Bounds`]: what a request may hold at most when a rule is checked as it is written
//! ([`Bounds::UNBOUNDED`], kube's static limit), or the largest list and string of the very
//! objects a policy is about to be evaluated on (kube's runtime limit, checked before the
//! evaluation instead of during it).

use cel::IdedExpr;
use cel::common::ast::operators as op;
use cel::common::ast::{EntryExpr, Expr, LiteralValue};
use serde_json::Value;

/// kube's limit on one CRD rule's estimated cost (`StaticEstimatedCostLimit`).
pub const STATIC_LIMIT: f64 = 10_000_000.0;

/// kube's limit on the rules of one CRD schema together, each weighed by how many nodes it
/// may run at (`StaticEstimatedCRDCostLimit`).
pub const SCHEMA_LIMIT: f64 = 100_000_000.0;

/// kube's limit on one evaluation of a policy's or match condition's expression
/// (`PerCallLimit`).
pub const RUNTIME_LIMIT: f64 = 1_000_000.0;

/// The largest list (or map) and string a value without a schema may hold.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bounds {
    pub items: f64,
    pub chars: f64,
}

impl Bounds {
    /// What fits in a request (kube's 3 MiB): items of two bytes each, characters of one.
    pub const UNBOUNDED: Bounds = Bounds {
        items: (3 * 1024 * 1024 / 2) as f64,
        chars: (3 * 1024 * 1024) as f64,
    };

    /// The largest list, map and string anywhere in `values` (walked to `MAX_DEPTH`).
    pub fn of(values: &[&Value]) -> Bounds {
        let mut b = Bounds {
            items: 1.0,
            chars: 1.0,
        };
        for v in values {
            walk(v, &mut b, 0);
        }
        b
    }
}

const MAX_DEPTH: usize = 128;

fn walk(v: &Value, b: &mut Bounds, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match v {
        Value::String(s) => b.chars = b.chars.max(s.len() as f64),
        Value::Array(a) => {
            b.items = b.items.max(a.len() as f64);
            a.iter().for_each(|x| walk(x, b, depth + 1));
        }
        Value::Object(m) => {
            b.items = b.items.max(m.len() as f64);
            for (k, x) in m {
                b.chars = b.chars.max(k.len() as f64);
                walk(x, b, depth + 1);
            }
        }
        _ => {}
    }
}

/// What is known of a value's shape: a schema node, or nothing but [`Bounds`].
#[derive(Clone, Copy, Debug)]
pub enum Shape<'s> {
    Schema(&'s Value),
    Unknown,
}

impl<'s> Shape<'s> {
    fn schema_bound(&self, key: &str) -> Option<f64> {
        match self {
            Shape::Schema(s) => s.get(key).and_then(Value::as_f64),
            Shape::Unknown => None,
        }
    }

    /// Items (of a list, or entries of a map) it may hold at most.
    fn items(&self, b: &Bounds) -> f64 {
        self.schema_bound("maxItems")
            .or_else(|| self.schema_bound("maxProperties"))
            .unwrap_or(b.items)
    }

    /// Characters (of a string) it may hold at most.
    fn chars(&self, b: &Bounds) -> f64 {
        self.schema_bound("maxLength").unwrap_or(b.chars)
    }

    /// The shape of one of its items (a list's elements, a map's keys).
    fn element(&self) -> Shape<'s> {
        match self {
            Shape::Schema(s) if s["items"].is_object() => Shape::Schema(&s["items"]),
            _ => Shape::Unknown,
        }
    }

    /// The shape of its field `name`.
    fn field(&self, name: &str) -> Shape<'s> {
        match self {
            Shape::Schema(s) => {
                if let Some(p) = s["properties"].get(name) {
                    Shape::Schema(p)
                } else if s["additionalProperties"].is_object() {
                    Shape::Schema(&s["additionalProperties"])
                } else {
                    Shape::Unknown
                }
            }
            Shape::Unknown => Shape::Unknown,
        }
    }
}

/// An expression's estimated cost, with `variables` of the shapes given (others unknown).
pub fn estimate(expr: &IdedExpr, variables: &[(&str, Shape<'_>)], bounds: &Bounds) -> f64 {
    let mut scope: Vec<(String, Shape<'_>)> =
        variables.iter().map(|(n, s)| (n.to_string(), *s)).collect();
    cost(expr, &mut scope, bounds).0
}

/// The characters a value may hold: a literal's own, else its shape's bound.
fn chars(e: &IdedExpr, shape: &Shape<'_>, b: &Bounds) -> f64 {
    match &e.expr {
        Expr::Literal(LiteralValue::String(s)) => s.inner().len() as f64,
        Expr::Literal(_) => 1.0,
        _ => shape.chars(b),
    }
}

/// Functions that scan their target (or first argument) once.
const SCANNING: [&str; 18] = [
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "indexOf",
    "lastIndexOf",
    "replace",
    "split",
    "lowerAscii",
    "upperAscii",
    "trim",
    "substring",
    "charAt",
    "join",
    "format",
    "quote",
    "reverse",
    "string",
];

fn cost<'s>(e: &IdedExpr, scope: &mut Vec<(String, Shape<'s>)>, b: &Bounds) -> (f64, Shape<'s>) {
    match &e.expr {
        Expr::Unspecified | Expr::Literal(_) => (0.0, Shape::Unknown),
        Expr::Ident(name) => {
            let shape = scope
                .iter()
                .rev()
                .find(|(n, _)| n == name)
                .map_or(Shape::Unknown, |(_, s)| *s);
            (1.0, shape)
        }
        Expr::Select(s) => {
            let (c, shape) = cost(&s.operand, scope, b);
            (c + 1.0, shape.field(&s.field))
        }
        Expr::List(l) => (
            1.0 + l.elements.iter().map(|x| cost(x, scope, b).0).sum::<f64>(),
            Shape::Unknown,
        ),
        Expr::Map(m) => (1.0 + entries(&m.entries, scope, b), Shape::Unknown),
        Expr::Struct(s) => (1.0 + entries(&s.entries, scope, b), Shape::Unknown),
        Expr::Comprehension(c) => {
            let (range, shape) = cost(&c.iter_range, scope, b);
            let (init, _) = cost(&c.accu_init, scope, b);
            let n = shape.items(b);
            scope.push((c.iter_var.clone(), shape.element()));
            if let Some(v2) = &c.iter_var2 {
                scope.push((v2.clone(), Shape::Unknown));
            }
            scope.push((c.accu_var.clone(), Shape::Unknown));
            // The macros' loop conditions only test the accumulator: the step is the body.
            let body = cost(&c.loop_step, scope, b).0;
            let result = cost(&c.result, scope, b).0;
            scope.truncate(scope.len() - if c.iter_var2.is_some() { 3 } else { 2 });
            (range + init + n * body + result, Shape::Unknown)
        }
        Expr::Call(call) => {
            let target = call.target.as_deref().map(|t| (t, cost(t, scope, b)));
            let args: Vec<(f64, Shape<'s>)> = call.args.iter().map(|a| cost(a, scope, b)).collect();
            // Logical operators cost nothing of their own (as kube's estimator).
            let own = match call.func_name.as_str() {
                op::LOGICAL_AND | op::LOGICAL_OR | op::LOGICAL_NOT | op::NOT_STRICTLY_FALSE => 0.0,
                _ => 1.0,
            };
            let mut total = own
                + target.as_ref().map_or(0.0, |(_, (c, _))| *c)
                + args.iter().map(|(c, _)| c).sum::<f64>();
            let name = call.func_name.as_str();
            let mut shape = Shape::Unknown;
            match name {
                op::CONDITIONAL if args.len() == 3 => {
                    total = 1.0 + args[0].0 + args[1].0.max(args[2].0);
                }
                op::INDEX if args.len() == 2 => {
                    shape = match &call.args[1].expr {
                        Expr::Literal(LiteralValue::String(s)) => args[0].1.field(s.inner()),
                        _ => args[0].1.element(),
                    };
                }
                op::IN if args.len() == 2 => total += args[1].1.items(b),
                op::EQUALS | op::NOT_EQUALS if args.len() == 2 => {
                    let smaller = chars(&call.args[0], &args[0].1, b).min(chars(
                        &call.args[1],
                        &args[1].1,
                        b,
                    ));
                    total += (0.1 * smaller).ceil();
                }
                _ if SCANNING.contains(&name) => {
                    let scanned = match &target {
                        Some((t, (_, s))) => chars(t, s, b),
                        None => call
                            .args
                            .first()
                            .zip(args.first())
                            .map_or(0.0, |(a, (_, s))| chars(a, s, b)),
                    };
                    total += (0.1 * scanned).ceil();
                }
                _ => {}
            }
            (total, shape)
        }
    }
}

fn entries<'s>(
    entries: &[cel::common::ast::IdedEntryExpr],
    scope: &mut Vec<(String, Shape<'s>)>,
    b: &Bounds,
) -> f64 {
    entries
        .iter()
        .map(|e| match &e.expr {
            EntryExpr::StructField(f) => cost(&f.value, scope, b).0,
            EntryExpr::MapEntry(m) => cost(&m.key, scope, b).0 + cost(&m.value, scope, b).0,
        })
        .sum()
}

/// kube's words for an expression over `limit`.
pub fn over_budget(cost: f64, limit: f64) -> String {
    format!(
        "estimated rule cost exceeds budget by factor of {:.2}x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)",
        cost / limit
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn cost_of(source: &str, schema: &Value, bounds: &Bounds) -> f64 {
        let p = crate::cel::compile(source, &["self", "object"]).unwrap();
        estimate(
            p.expression(),
            &[("self", Shape::Schema(schema)), ("object", Shape::Unknown)],
            bounds,
        )
    }

    #[test]
    fn nesting_over_unbounded_lists_multiplies_past_the_limit() {
        let schema = json!({"type": "object", "properties": {
            "tags": {"type": "array", "items": {"type": "string"}},
            "few": {"type": "array", "maxItems": 10, "items": {"type": "array", "maxItems": 10, "items": {"type": "string", "maxLength": 20}}},
            "name": {"type": "string", "maxLength": 63},
        }});
        let u = &Bounds::UNBOUNDED;
        let simple = cost_of("self.name.startsWith('app-')", &schema, u);
        assert!(simple < 20.0, "{simple}");
        let one_loop = cost_of("self.tags.all(t, t.size() < 10)", &schema, u);
        assert!(
            one_loop > 1_000_000.0 && one_loop < STATIC_LIMIT,
            "{one_loop}"
        );
        let nested = cost_of("self.tags.all(a, self.tags.all(b, a != b))", &schema, u);
        assert!(nested > STATIC_LIMIT, "{nested}");
        let bounded = cost_of("self.few.all(a, a.all(b, b.contains('x')))", &schema, u);
        assert!(bounded < 2_000.0, "{bounded}");
        // Without a schema, the objects at hand bound it.
        let small =
            Bounds::of(&[&json!({"spec": {"containers": [{"env": [1, 2, 3]}, {"env": []}]}})]);
        let per_object = cost_of(
            "object.spec.containers.all(c, c.env.all(e, e != 0))",
            &Value::Null,
            &small,
        );
        assert!(per_object < 100.0, "{per_object}");
        let huge = Bounds::of(&[&json!({"l": vec![0; 20_000]})]);
        let attack = cost_of(
            "object.l.all(a, object.l.all(b, a == b))",
            &Value::Null,
            &huge,
        );
        assert!(attack > RUNTIME_LIMIT, "{attack}");
    }
}
