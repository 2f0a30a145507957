//! Walking an object against its schema: unknown fields are reported (strict field
//! validation) or pruned, as kube-apiserver does when it decodes into typed structs.

use serde_json::Value;

use super::SchemaSet;

/// What to do with fields the schema does not know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unknown {
    /// Collect their paths and remove them.
    Prune,
}

impl SchemaSet {
    /// Remove fields not in the schema of definition `def`; return their paths
    /// (`spec.template.spec.containers[0].foo`).
    pub fn prune_unknown(&self, def: &str, value: &mut Value) -> Vec<String> {
        let mut unknown = Vec::new();
        if let Some(schema) = self.definition(def) {
            self.walk(schema, value, "", &mut unknown, Unknown::Prune);
        }
        unknown
    }

    fn walk(
        &self,
        schema: &Value,
        value: &mut Value,
        path: &str,
        unknown: &mut Vec<String>,
        mode: Unknown,
    ) {
        let schema = self.resolve(schema);
        if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
            return;
        }
        match value {
            Value::Object(map) => {
                let props = schema.get("properties").and_then(Value::as_object);
                let additional = schema.get("additionalProperties");
                let Some(props) = props else {
                    if let Some(add) = additional.filter(|a| a.is_object()) {
                        for (k, v) in map.iter_mut() {
                            self.walk(add, v, &join(path, k), unknown, mode);
                        }
                    }
                    return;
                };
                let mut remove = Vec::new();
                for (k, v) in map.iter_mut() {
                    match props.get(k) {
                        Some(sub) => self.walk(sub, v, &join(path, k), unknown, mode),
                        None => match additional {
                            Some(add) if add.is_object() => {
                                self.walk(add, v, &join(path, k), unknown, mode)
                            }
                            Some(Value::Bool(true)) => {}
                            _ => {
                                unknown.push(join(path, k));
                                remove.push(k.clone());
                            }
                        },
                    }
                }
                if mode == Unknown::Prune {
                    for k in remove {
                        map.remove(&k);
                    }
                }
            }
            Value::Array(items) => {
                if let Some(item_schema) = schema.get("items") {
                    for (i, v) in items.iter_mut().enumerate() {
                        self.walk(item_schema, v, &format!("{path}[{i}]"), unknown, mode);
                    }
                }
            }
            _ => {}
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_and_prunes_unknown_fields() {
        let set = SchemaSet::builtin();
        let mut d = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "x", "labels": {"a": "b"}, "bogus": 1},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "c", "image": "i", "imagee": "typo"}]}}, "extra": true}
        });
        let mut unknown = set.prune_unknown("io.k8s.api.apps.v1.Deployment", &mut d);
        unknown.sort();
        assert_eq!(
            unknown,
            vec![
                "metadata.bogus",
                "spec.extra",
                "spec.template.spec.containers[0].imagee"
            ]
        );
        assert!(d["spec"].get("extra").is_none());
        assert_eq!(d["metadata"]["labels"]["a"], "b");
        let mut cm = json!({"data": {"k": "v"}, "metadata": {"name": "c"}});
        assert!(
            set.prune_unknown("io.k8s.api.core.v1.ConfigMap", &mut cm)
                .is_empty()
        );
    }
}
