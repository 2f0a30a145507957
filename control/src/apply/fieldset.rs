//! Field sets: which fields of an object a manager owns, as paths, with the FieldsV1
//! wire form (`{"f:spec":{"f:containers":{"k:{\"name\":\"web\"}":{".":{},"f:image":{}}}}}`).

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::schema::SchemaSet;

/// One step of a path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Elem {
    Field(String),
    /// An item of an associative list, by the JSON of its key fields.
    Key(String),
    /// An item of a set list, by its JSON.
    Value(String),
    /// The list item itself (beside its fields).
    Dot,
}

pub type Path = Vec<Elem>;
pub type FieldSet = BTreeSet<Path>;

/// How a list merges.
#[derive(Debug, PartialEq, Eq)]
pub enum ListKind {
    Map(Vec<String>),
    Set,
    Atomic,
}

/// The list semantics a property schema declares (list-type, or a patch merge key).
pub fn list_kind(prop: Option<&Value>) -> ListKind {
    let Some(p) = prop else {
        return ListKind::Atomic;
    };
    match p.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("map") => {
            let keys: Vec<String> = p["x-kubernetes-list-map-keys"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|k| k.as_str().map(str::to_string))
                .collect();
            if keys.is_empty() {
                ListKind::Atomic
            } else {
                ListKind::Map(keys)
            }
        }
        Some("set") => ListKind::Set,
        Some(_) => ListKind::Atomic,
        None => match p
            .get("x-kubernetes-patch-merge-key")
            .and_then(Value::as_str)
        {
            Some(k) => ListKind::Map(vec![k.to_string()]),
            None => ListKind::Atomic,
        },
    }
}

/// Defaults of key fields of associative lists, which kube's field manager knows from
/// `+default` markers that the published OpenAPI leaves out: a port applied without its
/// protocol is the same item as the stored one the server defaulted to TCP.
const KEY_DEFAULTS: &[(&str, &str)] = &[("protocol", "TCP")];

/// Key field `k` of a list item, or its default.
fn key_field<'a>(item: &'a Value, k: &str) -> Option<std::borrow::Cow<'a, Value>> {
    match item.get(k) {
        Some(v) => Some(std::borrow::Cow::Borrowed(v)),
        None => KEY_DEFAULTS
            .iter()
            .find(|(name, _)| *name == k)
            .map(|(_, d)| std::borrow::Cow::Owned(Value::from(*d))),
    }
}

/// The key of an associative-list item: its key fields (defaulted) as canonical JSON.
pub fn item_key(item: &Value, keys: &[String]) -> String {
    let mut m = Map::new();
    for k in keys {
        if let Some(v) = key_field(item, k) {
            m.insert(k.clone(), v.into_owned());
        }
    }
    Value::Object(m).to_string()
}

/// Whether `item` is the one the key fields `want` name.
fn has_key(item: &Value, want: &Map<String, Value>) -> bool {
    want.iter()
        .all(|(wk, wv)| key_field(item, wk).is_some_and(|v| *v == *wv))
}

/// Schema of property `key` of an object schema (or of its map values).
pub fn property<'a>(set: &'a SchemaSet, schema: Option<&'a Value>, key: &str) -> Option<&'a Value> {
    let s = set.resolve(schema?);
    s.get("properties")
        .and_then(|p| p.get(key))
        .or_else(|| s.get("additionalProperties").filter(|a| a.is_object()))
}

/// Item schema of a list property.
pub fn items<'a>(set: &'a SchemaSet, prop: Option<&'a Value>) -> Option<&'a Value> {
    prop.map(|p| set.resolve(p)).and_then(|p| p.get("items"))
}

/// Every leaf path of `v`.
pub fn collect(
    set: &SchemaSet,
    schema: Option<&Value>,
    v: &Value,
    prefix: &mut Path,
    out: &mut FieldSet,
) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                let sub = property(set, schema, k);
                prefix.push(Elem::Field(k.clone()));
                collect_value(set, sub, child, prefix, out);
                prefix.pop();
            }
        }
        _ => {
            out.insert(prefix.clone());
        }
    }
}

/// A property value: lists by their kind, others as objects or leaves.
fn collect_value(
    set: &SchemaSet,
    prop: Option<&Value>,
    v: &Value,
    prefix: &mut Path,
    out: &mut FieldSet,
) {
    let Value::Array(list) = v else {
        return collect(set, prop, v, prefix, out);
    };
    let item_schema = items(set, prop);
    match list_kind(prop.map(|p| {
        if p.get("x-kubernetes-list-type").is_some()
            || p.get("x-kubernetes-patch-merge-key").is_some()
        {
            p
        } else {
            set.resolve(p)
        }
    })) {
        ListKind::Map(keys) if !list.is_empty() => {
            for item in list {
                prefix.push(Elem::Key(item_key(item, &keys)));
                prefix.push(Elem::Dot);
                out.insert(prefix.clone());
                prefix.pop();
                collect(set, item_schema, item, prefix, out);
                prefix.pop();
            }
        }
        ListKind::Set if !list.is_empty() => {
            for item in list {
                prefix.push(Elem::Value(item.to_string()));
                out.insert(prefix.clone());
                prefix.pop();
            }
        }
        _ => {
            out.insert(prefix.clone());
        }
    }
}

/// The value at `path`, if present.
pub fn get<'a>(v: &'a Value, path: &[Elem]) -> Option<&'a Value> {
    let mut cur = v;
    let mut i = 0;
    while i < path.len() {
        match &path[i] {
            Elem::Field(f) => cur = cur.get(f.as_str())?,
            Elem::Key(k) => {
                let want: Map<String, Value> = serde_json::from_str(k).ok()?;
                cur = cur.as_array()?.iter().find(|item| has_key(item, &want))?;
            }
            Elem::Value(x) => {
                let want: Value = serde_json::from_str(x).ok()?;
                cur = cur.as_array()?.iter().find(|item| **item == want)?;
            }
            Elem::Dot => {}
        }
        i += 1;
    }
    Some(cur)
}

/// Remove what `path` names from `v`.
pub fn remove(v: &mut Value, path: &[Elem]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    let (target, parent) = if *last == Elem::Dot {
        match parent.split_last() {
            Some((item, p)) => (item, p),
            None => return,
        }
    } else {
        (last, parent)
    };
    let mut cur = v;
    for e in parent {
        let next = match e {
            Elem::Field(f) => cur.get_mut(f.as_str()),
            Elem::Key(k) => {
                let Ok(want) = serde_json::from_str::<Map<String, Value>>(k) else {
                    return;
                };
                cur.as_array_mut()
                    .and_then(|a| a.iter_mut().find(|item| has_key(item, &want)))
            }
            Elem::Value(_) | Elem::Dot => None,
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match target {
        Elem::Field(f) => {
            if let Some(m) = cur.as_object_mut() {
                m.remove(f);
            }
        }
        Elem::Key(k) => {
            if let (Ok(want), Some(a)) = (
                serde_json::from_str::<Map<String, Value>>(k),
                cur.as_array_mut(),
            ) {
                a.retain(|item| !has_key(item, &want));
            }
        }
        Elem::Value(x) => {
            if let (Ok(want), Some(a)) = (serde_json::from_str::<Value>(x), cur.as_array_mut()) {
                a.retain(|item| *item != want);
            }
        }
        Elem::Dot => {}
    }
}

fn elem_key(e: &Elem) -> String {
    match e {
        Elem::Field(f) => format!("f:{f}"),
        Elem::Key(k) => format!("k:{k}"),
        Elem::Value(v) => format!("v:{v}"),
        Elem::Dot => ".".into(),
    }
}

/// FieldsV1 form of a set.
pub fn encode(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut cur = &mut root;
        for e in path {
            let entry = cur
                .entry(elem_key(e))
                .or_insert_with(|| Value::Object(Map::new()));
            match entry {
                Value::Object(m) => cur = m,
                _ => break,
            }
        }
    }
    Value::Object(root)
}

/// A set from its FieldsV1 form; malformed parts are skipped.
pub fn decode(v: &Value) -> FieldSet {
    fn walk(v: &Value, prefix: &mut Path, out: &mut FieldSet) {
        let Some(m) = v.as_object() else { return };
        for (k, child) in m {
            let e = if k == "." {
                Elem::Dot
            } else if let Some(f) = k.strip_prefix("f:") {
                Elem::Field(f.to_string())
            } else if let Some(x) = k.strip_prefix("k:") {
                Elem::Key(x.to_string())
            } else if let Some(x) = k.strip_prefix("v:") {
                Elem::Value(x.to_string())
            } else {
                continue;
            };
            prefix.push(e);
            if child.as_object().is_some_and(Map::is_empty) {
                out.insert(prefix.clone());
            } else {
                walk(child, prefix, out);
            }
            prefix.pop();
        }
    }
    let mut out = FieldSet::new();
    walk(v, &mut Vec::new(), &mut out);
    out
}

/// A path as kube prints it in conflicts: `.spec.containers[name="web"].image`.
pub fn display(path: &[Elem]) -> String {
    let mut out = String::new();
    for e in path {
        match e {
            Elem::Field(f) => {
                out.push('.');
                out.push_str(f);
            }
            Elem::Key(k) => {
                let m: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
                let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
                out.push_str(&format!("[{}]", parts.join(",")));
            }
            Elem::Value(v) => out.push_str(&format!("[={v}]")),
            Elem::Dot => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn collect_encode_decode() {
        let set = SchemaSet::builtin();
        let schema = set.definition("io.k8s.api.apps.v1.Deployment");
        let d = json!({"spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "web", "image": "x", "args": ["a"]}]}}}, "metadata": {"finalizers": ["f"]}});
        let mut fs = FieldSet::new();
        collect(set, schema, &d, &mut Vec::new(), &mut fs);
        let shown: Vec<String> = fs.iter().map(|p| display(p)).collect();
        assert!(shown.contains(&".spec.replicas".to_string()), "{shown:?}");
        assert!(
            shown.contains(&".spec.template.spec.containers[name=\"web\"].image".to_string()),
            "{shown:?}"
        );
        assert!(
            shown.contains(&".spec.template.spec.containers[name=\"web\"].args".to_string()),
            "args are atomic: {shown:?}"
        );
        assert!(
            shown.contains(&".metadata.finalizers[=\"f\"]".to_string()),
            "finalizers are a set: {shown:?}"
        );
        let wire = encode(&fs);
        assert_eq!(
            wire["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"web\"}"]["."],
            json!({})
        );
        assert_eq!(decode(&wire), fs);
        let path = fs
            .iter()
            .find(|p| display(p).ends_with("].image"))
            .unwrap()
            .clone();
        assert_eq!(get(&d, &path), Some(&json!("x")));
        let mut d2 = d.clone();
        remove(&mut d2, &path);
        assert!(
            d2["spec"]["template"]["spec"]["containers"][0]
                .get("image")
                .is_none()
        );
        let item = fs
            .iter()
            .find(|p| p.last() == Some(&Elem::Dot))
            .unwrap()
            .clone();
        remove(&mut d2, &item);
        assert_eq!(d2["spec"]["template"]["spec"]["containers"], json!([]));
    }
}
