//! Field ownership (`metadata.managedFields`) and server-side apply.
//!
//! Every write records which manager set which fields. An apply merges the applied
//! configuration into the live object, refuses to change fields another manager owns
//! (409 with `FieldManagerConflict` causes) unless forced, and removes fields the applier
//! owned before but no longer applies (when no one else owns them).

pub mod fieldset;

use serde_json::{Value, json};

use fieldset::{Elem, FieldSet, ListKind, Path};

use crate::schema::SchemaSet;

/// One `managedFields` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub manager: String,
    pub operation: String,
    pub api_version: String,
    pub subresource: Option<String>,
    pub time: String,
    pub fields: FieldSet,
}

/// A field another manager owns with a different value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    pub manager: String,
    pub api_version: String,
    pub path: String,
}

/// Where an object's schema comes from, for list semantics.
pub struct Schema<'a> {
    pub set: &'a SchemaSet,
    pub root: Option<&'a Value>,
}

/// Metadata fields owned like content; the rest of `metadata` is the server's.
const OWNED_METADATA: &[&str] = &["labels", "annotations", "finalizers", "ownerReferences"];

fn owned_fields(s: &Schema<'_>, obj: &Value, subresource: Option<&str>) -> FieldSet {
    let mut all = FieldSet::new();
    fieldset::collect(s.set, s.root, obj, &mut Vec::new(), &mut all);
    all.into_iter()
        .filter(|p| match p.first() {
            Some(Elem::Field(f)) if f == "apiVersion" || f == "kind" => false,
            Some(Elem::Field(f)) if f == "metadata" => {
                matches!(p.get(1), Some(Elem::Field(m)) if OWNED_METADATA.contains(&m.as_str()))
            }
            Some(Elem::Field(f)) if f == "status" => subresource == Some("status"),
            _ => subresource != Some("status"),
        })
        .collect()
}

pub fn read_entries(obj: &Value) -> Vec<Entry> {
    obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            Some(Entry {
                manager: e["manager"].as_str()?.to_string(),
                operation: e["operation"].as_str().unwrap_or("Update").to_string(),
                api_version: e["apiVersion"].as_str().unwrap_or("").to_string(),
                subresource: e["subresource"].as_str().map(str::to_string),
                time: e["time"].as_str().unwrap_or("").to_string(),
                fields: fieldset::decode(&e["fieldsV1"]),
            })
        })
        .collect()
}

fn write_entries(obj: &mut Value, entries: &[Entry]) {
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": fieldset::encode(&e.fields),
            });
            if let Some(s) = &e.subresource {
                v["subresource"] = json!(s);
            }
            v
        })
        .collect();
    let meta = crate::object::meta_mut(obj);
    if list.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), Value::Array(list));
    }
}

fn upsert<'a>(
    entries: &'a mut Vec<Entry>,
    manager: &str,
    operation: &str,
    api_version: &str,
    subresource: Option<&str>,
) -> &'a mut Entry {
    let pos = entries.iter().position(|e| {
        e.manager == manager && e.operation == operation && e.subresource.as_deref() == subresource
    });
    let i = match pos {
        Some(i) => i,
        None => {
            entries.push(Entry {
                manager: manager.to_string(),
                operation: operation.to_string(),
                api_version: api_version.to_string(),
                subresource: subresource.map(str::to_string),
                time: String::new(),
                fields: FieldSet::new(),
            });
            entries.len() - 1
        }
    };
    let e = &mut entries[i];
    e.api_version = api_version.to_string();
    e.time = crate::object::now_rfc3339();
    e
}

/// Record a non-apply write (create, update, patch) by `manager`: it takes ownership of
/// every field it set or changed; fields that disappeared are owned by no one.
pub fn record_update(
    s: &Schema<'_>,
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    api_version: &str,
    subresource: Option<&str>,
) {
    let explicit = old
        .is_some_and(|o| o["metadata"]["managedFields"] != new["metadata"]["managedFields"])
        || (old.is_none() && new["metadata"]["managedFields"].is_array());
    let mut entries = if explicit {
        read_entries(new)
    } else {
        old.map(read_entries).unwrap_or_default()
    };
    let after = owned_fields(s, new, subresource);
    let before = old
        .map(|o| owned_fields(s, o, subresource))
        .unwrap_or_default();
    let changed: FieldSet = after
        .iter()
        .filter(|p| {
            !before.contains(*p) || old.and_then(|o| fieldset::get(o, p)) != fieldset::get(new, p)
        })
        .cloned()
        .collect();
    let gone: FieldSet = before.difference(&after).cloned().collect();
    for e in entries.iter_mut() {
        e.fields
            .retain(|p| !gone.contains(p) && !changed.contains(p));
    }
    if !changed.is_empty() && !explicit {
        upsert(&mut entries, manager, "Update", api_version, subresource)
            .fields
            .extend(changed);
    }
    write_entries(new, &entries);
}

/// Merge `applied` into `live`: maps merge, associative lists merge by key, sets union,
/// everything else is replaced.
fn merge(s: &Schema<'_>, schema: Option<&Value>, live: &Value, applied: &Value) -> Value {
    match (live, applied) {
        (Value::Object(l), Value::Object(a)) => {
            let mut out = l.clone();
            for (k, av) in a {
                let prop = fieldset::property(s.set, schema, k);
                let merged = match (l.get(k), av) {
                    (Some(Value::Array(la)), Value::Array(aa)) => merge_list(s, prop, la, aa),
                    (Some(lv), _) => merge(s, prop, lv, av),
                    (None, _) => av.clone(),
                };
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        _ => applied.clone(),
    }
}

fn merge_list(s: &Schema<'_>, prop: Option<&Value>, live: &[Value], applied: &[Value]) -> Value {
    let kind_source = prop.map(|p| {
        if p.get("x-kubernetes-list-type").is_some()
            || p.get("x-kubernetes-patch-merge-key").is_some()
        {
            p
        } else {
            s.set.resolve(p)
        }
    });
    match fieldset::list_kind(kind_source) {
        ListKind::Map(keys) => {
            let item_schema = fieldset::items(s.set, prop);
            let mut out: Vec<Value> = live.to_vec();
            for a in applied {
                let k = fieldset::item_key(a, &keys);
                match out.iter().position(|l| fieldset::item_key(l, &keys) == k) {
                    Some(i) => out[i] = merge(s, item_schema, &out[i], a),
                    None => out.push(a.clone()),
                }
            }
            Value::Array(out)
        }
        ListKind::Set => {
            let mut out = live.to_vec();
            for a in applied {
                if !out.contains(a) {
                    out.push(a.clone());
                }
            }
            Value::Array(out)
        }
        ListKind::Atomic => Value::Array(applied.to_vec()),
    }
}

/// Server-side apply of `applied` by `manager` onto `live` (`None`: the object is new).
/// Returns the new object with its managedFields, or the conflicts.
pub fn apply(
    s: &Schema<'_>,
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    api_version: &str,
    force: bool,
) -> Result<Value, Vec<Conflict>> {
    let applied_set = owned_fields(s, applied, None);
    let mut entries = live.map(read_entries).unwrap_or_default();
    let Some(live) = live else {
        let mut obj = applied.clone();
        upsert(&mut entries, manager, "Apply", api_version, None).fields = applied_set;
        write_entries(&mut obj, &entries);
        return Ok(obj);
    };
    let mut conflicts = Vec::new();
    for e in entries
        .iter()
        .filter(|e| !(e.manager == manager && e.operation == "Apply") && e.subresource.is_none())
    {
        for p in e.fields.intersection(&applied_set) {
            if p.last() == Some(&Elem::Dot) {
                continue;
            }
            if fieldset::get(live, p) != fieldset::get(applied, p) {
                conflicts.push(Conflict {
                    manager: e.manager.clone(),
                    api_version: e.api_version.clone(),
                    path: fieldset::display(p),
                });
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflicts);
    }
    let previous: FieldSet = entries
        .iter()
        .find(|e| e.manager == manager && e.operation == "Apply" && e.subresource.is_none())
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    let mut out = merge(s, s.root, live, applied);
    // Fields this manager applied before and no longer applies, owned by no one else.
    let others: FieldSet = entries
        .iter()
        .filter(|e| !(e.manager == manager && e.operation == "Apply"))
        .flat_map(|e| e.fields.iter().cloned())
        .collect();
    let stale: Vec<&Path> = previous
        .iter()
        .filter(|p| !applied_set.contains(*p) && !others.contains(*p))
        .collect();
    for p in removal_order(&stale) {
        fieldset::remove(&mut out, p);
    }
    // Forced conflicts move to the applier; fields applied with the same value stay shared.
    let taken: FieldSet = applied_set
        .iter()
        .filter(|p| {
            p.last() != Some(&Elem::Dot) && fieldset::get(live, p) != fieldset::get(applied, p)
        })
        .cloned()
        .collect();
    for e in entries.iter_mut() {
        if !(e.manager == manager && e.operation == "Apply") {
            e.fields.retain(|p| !taken.contains(p));
        }
    }
    upsert(&mut entries, manager, "Apply", api_version, None).fields = applied_set;
    if let Some(m) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    write_entries(&mut out, &entries);
    Ok(out)
}

/// kube-apiserver's message for apply conflicts.
/// In which order to remove `stale` paths: whole list items first (an item is found by its
/// key fields, so they must still be there), then the deepest fields first. Fields of an
/// item that goes anyway are left out, and so are an item's key fields: they stay while any
/// of the item stays.
fn removal_order<'a>(stale: &[&'a Path]) -> Vec<&'a Path> {
    let items: Vec<&'a Path> = stale
        .iter()
        .copied()
        .filter(|p| {
            p.len() >= 2
                && p[p.len() - 1] == Elem::Dot
                && matches!(p[p.len() - 2], Elem::Key(_) | Elem::Value(_))
        })
        .collect();
    let inside_removed_item = |p: &Path| {
        items
            .iter()
            .any(|i| p.len() > i.len() - 1 && p[..i.len() - 1] == i[..i.len() - 1] && p != *i)
    };
    let is_key_field = |p: &Path| match p.as_slice() {
        [.., Elem::Key(k), Elem::Field(f)] => {
            serde_json::from_str::<serde_json::Map<String, Value>>(k)
                .is_ok_and(|m| m.contains_key(f))
        }
        _ => false,
    };
    let mut fields: Vec<&'a Path> = stale
        .iter()
        .copied()
        .filter(|p| !items.contains(p) && !inside_removed_item(p) && !is_key_field(p))
        .collect();
    fields.sort_by_key(|p| std::cmp::Reverse(p.len()));
    let mut order: Vec<&'a Path> = items;
    order.sort_by_key(|p| p.len());
    order.extend(fields);
    order
}

pub fn conflict_message(conflicts: &[Conflict]) -> String {
    let n = conflicts.len();
    let lines: Vec<String> = conflicts
        .iter()
        .map(|c| {
            format!(
                "conflict with \"{}\" using {}: {}",
                c.manager, c.api_version, c.path
            )
        })
        .collect();
    if n == 1 {
        format!("Apply failed with 1 conflict: {}", lines[0])
    } else {
        format!("Apply failed with {n} conflicts: {}", lines.join("\n"))
    }
}

/// The field manager of a request: `fieldManager`, else the User-Agent's program name.
pub fn manager_name(query: Option<&str>, user_agent: Option<&str>) -> String {
    if let Some(m) = query.filter(|m| !m.is_empty()) {
        return m.to_string();
    }
    user_agent
        .and_then(|ua| ua.split('/').next())
        .filter(|s| !s.is_empty())
        .unwrap_or("unknown")
        .to_string()
}

/// Drop the `managedFields` a client may send in an applied configuration.
pub fn strip_managed(v: &mut Value) {
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Schema<'static> {
        let set = SchemaSet::builtin();
        Schema {
            set,
            root: set.definition("io.k8s.api.apps.v1.Deployment"),
        }
    }

    fn deployment(replicas: i64, image: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "web", "image": image}]}}}})
    }

    #[test]
    fn apply_conflict_force_and_removal() {
        let s = schema();
        let created = apply(&s, None, &deployment(2, "a"), "alice", "apps/v1", false).unwrap();
        assert_eq!(created["metadata"]["managedFields"][0]["manager"], "alice");
        // Bob applies a different replica count: conflict naming alice.
        let err = apply(
            &s,
            Some(&created),
            &deployment(3, "a"),
            "bob",
            "apps/v1",
            false,
        )
        .unwrap_err();
        assert_eq!(
            err,
            vec![Conflict {
                manager: "alice".into(),
                api_version: "apps/v1".into(),
                path: ".spec.replicas".into()
            }]
        );
        assert_eq!(
            conflict_message(&err),
            "Apply failed with 1 conflict: conflict with \"alice\" using apps/v1: .spec.replicas"
        );
        // Same values are shared, not conflicts.
        let shared = apply(
            &s,
            Some(&created),
            &deployment(2, "a"),
            "bob",
            "apps/v1",
            false,
        )
        .unwrap();
        assert_eq!(read_entries(&shared).len(), 2);
        // Forced: bob takes replicas (and shares the image, applied with the same value).
        let mut bobs = deployment(3, "a");
        bobs["metadata"].as_object_mut().unwrap().remove("labels");
        let forced = apply(&s, Some(&created), &bobs, "bob", "apps/v1", true).unwrap();
        assert_eq!(forced["spec"]["replicas"], 3);
        let alice = read_entries(&forced)
            .into_iter()
            .find(|e| e.manager == "alice")
            .unwrap();
        assert!(
            !alice
                .fields
                .iter()
                .any(|p| fieldset::display(p) == ".spec.replicas")
        );
        // Alice stops applying the label: it is removed (nobody else owns it).
        let mut without = deployment(2, "a");
        without["metadata"]["labels"] = json!({});
        without["spec"].as_object_mut().unwrap().remove("replicas");
        let next = apply(&s, Some(&forced), &without, "alice", "apps/v1", false).unwrap();
        assert!(next["metadata"]["labels"].get("app").is_none(), "{next}");
        assert_eq!(next["spec"]["replicas"], 3, "bob's field stays");
    }

    /// A list item keyed by fields (a container port) that is no longer applied goes whole,
    /// key fields and all, even where the server defaulted a field the applier left out.
    #[test]
    fn an_item_no_longer_applied_goes_whole() {
        let s = schema();
        let with_port = |port: i64| {
            let mut d = deployment(1, "a");
            d["spec"]["template"]["spec"]["containers"][0]["ports"] =
                json!([{"name": "admin", "containerPort": port}]);
            d
        };
        let mut live = apply(&s, None, &with_port(9154), "helm", "apps/v1", false).unwrap();
        // What the API server defaults: the port's protocol.
        live["spec"]["template"]["spec"]["containers"][0]["ports"][0]["protocol"] = json!("TCP");
        // The same port applied again is the same item, not a second one.
        let again = apply(&s, Some(&live), &with_port(9154), "helm", "apps/v1", false).unwrap();
        let ports = &again["spec"]["template"]["spec"]["containers"][0]["ports"];
        assert_eq!(
            ports,
            &json!([{"name": "admin", "containerPort": 9154, "protocol": "TCP"}])
        );
        let next = apply(&s, Some(&live), &with_port(9155), "helm", "apps/v1", false).unwrap();
        let ports = &next["spec"]["template"]["spec"]["containers"][0]["ports"];
        assert_eq!(ports.as_array().unwrap().len(), 1, "{ports}");
        assert_eq!(ports[0]["containerPort"], 9155, "{ports}");
    }

    #[test]
    fn updates_take_ownership() {
        let s = schema();
        let created = apply(&s, None, &deployment(2, "a"), "alice", "apps/v1", false).unwrap();
        let mut scaled = created.clone();
        scaled["spec"]["replicas"] = json!(5);
        record_update(
            &s,
            Some(&created),
            &mut scaled,
            "kubectl-scale",
            "apps/v1",
            None,
        );
        let entries = read_entries(&scaled);
        let scale = entries
            .iter()
            .find(|e| e.manager == "kubectl-scale")
            .unwrap();
        assert_eq!(scale.operation, "Update");
        assert!(
            scale
                .fields
                .iter()
                .any(|p| fieldset::display(p) == ".spec.replicas")
        );
        let err = apply(
            &s,
            Some(&scaled),
            &deployment(2, "a"),
            "alice",
            "apps/v1",
            false,
        )
        .unwrap_err();
        assert_eq!(err[0].manager, "kubectl-scale");
    }
}
