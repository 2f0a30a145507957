//! CEL as the API server evaluates it (the `cel` crate with its strings, lists and math
//! extensions): expressions compiled once per thread and kept, a reference to any variable
//! the place does not declare refused as kube's type check refuses it, JSON seen as kube's
//! CEL sees it. Used by CRD validation rules ([`crate::crd::cel`]) and webhooks'
//! `matchConditions` ([`crate::webhooks`]).

pub mod cost;
pub mod kube_libs;

use std::collections::HashMap;
use std::sync::Arc;

use cel::{Env, Program};
use serde_json::Value;

/// Characters at most in one expression (kube bounds expressions by estimated cost; Sluice
/// by length and by where they may appear).
pub const MAX_CHARS: usize = 4096;

thread_local! {
    static ENV: Arc<Env> = {
        let mut env = Env::stdlib();
        let _ = env.add_extension(cel::extensions::strings);
        let _ = env.add_extension(cel::extensions::lists);
        let _ = env.add_extension(cel::extensions::math);
        let _ = env.add_extension(kube_libs::extension);
        Arc::new(env)
    };
}

/// This thread's environment (the standard library and the extensions).
pub fn env() -> Arc<Env> {
    ENV.with(Arc::clone)
}

/// Compiled rules kept per thread (a program is not shared across threads), at most this
/// many; the cache starts over when full.
const MAX_CACHED: usize = 4096;

thread_local! {
    static COMPILED: std::cell::RefCell<HashMap<String, std::rc::Rc<Compiled>>> =
        std::cell::RefCell::new(HashMap::new());
}

/// An expression compiled, and the variables it names.
pub struct Compiled {
    pub program: Program,
    variables: Vec<String>,
}

impl Compiled {
    /// Whether the expression names variable `name`.
    pub fn names(&self, name: &str) -> bool {
        self.variables.iter().any(|v| v == name)
    }
}

/// Run `compiled` in `cx` if its estimated cost with the values at hand (`bounds`) is within
/// kube's runtime limit; kube's error when it is not (the evaluation is not started).
pub fn execute_bounded(
    compiled: &Compiled,
    cx: &cel::Context<'_, '_>,
    bounds: &cost::Bounds,
) -> Result<cel::Value, String> {
    let estimate = cost::estimate(compiled.program.expression(), &[], bounds);
    if estimate > cost::RUNTIME_LIMIT {
        return Err(format!(
            "operation cancelled: actual cost limit exceeded (estimated {estimate:.0}, limit {:.0})",
            cost::RUNTIME_LIMIT
        ));
    }
    compiled.program.execute(cx).map_err(|e| e.to_string())
}

/// [`compile`], kept: an expression is compiled once per thread, not once per use.
pub fn compiled(source: &str, declared: &[&str]) -> Option<std::rc::Rc<Compiled>> {
    let key = format!("{}|{source}", declared.join(","));
    if let Some(p) = COMPILED.with(|c| c.borrow().get(&key).cloned()) {
        return Some(p);
    }
    let program = compile(source, declared).ok()?;
    let variables = program
        .references()
        .variables()
        .into_iter()
        .map(str::to_string)
        .collect();
    let compiled = std::rc::Rc::new(Compiled { program, variables });
    COMPILED.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() >= MAX_CACHED {
            c.clear();
        }
        c.insert(key, compiled.clone());
    });
    Some(compiled)
}

/// Compile `source`; its errors in the compiler's words, and a reference to a variable
/// not in `declared` refused as kube's type check refuses it.
pub fn compile(source: &str, declared: &[&str]) -> Result<Program, String> {
    if source.chars().count() > MAX_CHARS {
        return Err(format!(
            "the expression is longer than {MAX_CHARS} characters"
        ));
    }
    let program = env()
        .compile(source)
        .map_err(|e| format!("compilation failed: {e}"))?;
    // The variables a macro binds (`self.all(x, ...)`) are declared by it.
    let bound = comprehension_variables(source);
    let undeclared: Vec<String> = program
        .references()
        .variables()
        .into_iter()
        .filter(|v| {
            !declared.contains(v)
                && !v.starts_with('@')
                && !v.starts_with("__")
                && !bound.iter().any(|b| b == v)
        })
        .map(str::to_string)
        .collect();
    if let Some((f, library)) = program
        .references()
        .functions()
        .into_iter()
        .find_map(|f| kube_only(f).map(|l| (f.to_string(), l)))
    {
        return Err(format!(
            "compilation failed: ERROR: <input>: undeclared reference to '{f}' (in container ''): kube's {library} library is not available in Sluice"
        ));
    }
    if let Some(v) = undeclared.first() {
        return Err(format!(
            "compilation failed: ERROR: <input>: undeclared reference to '{v}' (in container '')"
        ));
    }
    Ok(program)
}

/// kube's CEL libraries the `cel` crate does not have, by the functions that name them: a
/// rule calling one is refused when written rather than failing on every object.
fn kube_only(function: &str) -> Option<&'static str> {
    match function {
        "semver" | "isSemver" | "major" | "minor" | "patch" => Some("semver"),
        f if f.starts_with("format.") => Some("format"),
        _ => None,
    }
}

/// The names macros bind in `source`: `x` of `.all(x, ...)`, `.exists(x, ...)`,
/// `.exists_one(x, ...)`, `.map(x, ...)`, `.filter(x, ...)` (and a map's `k, v` forms).
fn comprehension_variables(source: &str) -> Vec<String> {
    static RE: std::sync::OnceLock<Option<regex::Regex>> = std::sync::OnceLock::new();
    let Some(re) = RE
        .get_or_init(|| {
            regex::Regex::new(
                r"\.(?:all|exists|exists_one|existsOne|map|filter|transformList|transformMap)\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,(?:\s*([A-Za-z_][A-Za-z0-9_]*)\s*,)?",
            )
            .ok()
        })
        .as_ref()
    else {
        return Vec::new();
    };
    re.captures_iter(source)
        .flat_map(|c| [c.get(1), c.get(2)])
        .flatten()
        .map(|m| m.as_str().to_string())
        .collect()
}

/// A JSON value as CEL sees it: integers as `int`, other numbers as `double`, objects as
/// maps with string keys.
pub fn to_cel(v: &Value) -> cel::Value {
    match v {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => cel::Value::Int(i),
            None => cel::Value::Float(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(a) => cel::Value::List(Arc::new(a.iter().map(to_cel).collect())),
        Value::Object(m) => {
            let map: HashMap<String, cel::Value> =
                m.iter().map(|(k, v)| (k.clone(), to_cel(v))).collect();
            cel::Value::from(map)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undeclared_names_and_kube_only_libraries_are_refused_when_compiled() {
        assert!(compile("self.size() > 1", &["self"]).is_ok());
        let e = compile("other.size() > 1", &["self"])
            .err()
            .unwrap_or_default();
        assert!(e.contains("undeclared reference to 'other'"), "{e}");
        assert!(
            compile(
                "quantity(self.limit).isLessThan(quantity('1Gi'))",
                &["self"]
            )
            .is_ok()
        );
        let e = compile("isSemver(self.version)", &["self"])
            .err()
            .unwrap_or_default();
        assert!(e.contains("kube's semver library is not available"), "{e}");
    }
}
