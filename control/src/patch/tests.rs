use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

const DEPLOYMENT: &str = "io.k8s.api.apps.v1.Deployment";

fn deployment() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}, "finalizers": ["a"]},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [
            {"name": "web", "image": "echo:1", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}], "ports": [{"containerPort": 80}]},
            {"name": "side", "image": "side:1"}
        ]}}}
    })
}

fn smp(target: &Value, patch: Value) -> Result<Value, PatchError> {
    strategic_patch(
        SchemaSet::builtin(),
        DEPLOYMENT,
        target,
        &serde_json::to_vec(&patch).unwrap(),
    )
}

#[test]
fn strategic_merges_containers_by_name() {
    let out = smp(&deployment(), json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "echo:2"}]}}}})).unwrap();
    let cs = out["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    assert_eq!(cs.len(), 2, "merge by name must keep the sidecar");
    assert_eq!(cs[0]["image"], "echo:2");
    assert_eq!(
        cs[0]["env"].as_array().unwrap().len(),
        2,
        "unmentioned fields survive"
    );
}

#[test]
fn strategic_env_merge_delete_and_null() {
    let out = smp(
        &deployment(),
        json!({"metadata": {"labels": {"app": null, "tier": "fe"}},
               "spec": {"template": {"spec": {"containers": [{"name": "web", "env": [{"name": "A", "$patch": "delete"}, {"name": "C", "value": "3"}]}]}}}}),
    )
    .unwrap();
    let env = &out["spec"]["template"]["spec"]["containers"][0]["env"];
    assert_eq!(
        env,
        &json!([{"name": "B", "value": "2"}, {"name": "C", "value": "3"}])
    );
    assert_eq!(out["metadata"]["labels"], json!({"tier": "fe"}));
}

#[test]
fn strategic_directives() {
    // $patch: replace on a list.
    let out = smp(&deployment(), json!({"spec": {"template": {"spec": {"containers": [{"name": "only", "image": "x"}, {"$patch": "replace"}]}}}})).unwrap();
    assert_eq!(
        out["spec"]["template"]["spec"]["containers"],
        json!([{"name": "only", "image": "x"}])
    );
    // $setElementOrder reorders merged items.
    let out = smp(&deployment(), json!({"spec": {"template": {"spec": {"$setElementOrder/containers": [{"name": "side"}, {"name": "web"}], "containers": [{"name": "web", "image": "echo:3"}]}}}})).unwrap();
    let names: Vec<&str> = out["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["side", "web"]);
    // Finalizers merge as a set; $deleteFromPrimitiveList removes.
    let out = smp(&deployment(), json!({"metadata": {"finalizers": ["b"]}})).unwrap();
    assert_eq!(out["metadata"]["finalizers"], json!(["a", "b"]));
    let out = smp(
        &deployment(),
        json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
    )
    .unwrap();
    assert_eq!(out["metadata"]["finalizers"], json!([]));
    // $retainKeys keeps only the listed keys.
    let d =
        json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}});
    let out = smp(
        &d,
        json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
    )
    .unwrap();
    assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));
    // $patch: replace on a map.
    let out = smp(
        &deployment(),
        json!({"metadata": {"labels": {"$patch": "replace", "x": "y"}}}),
    )
    .unwrap();
    assert_eq!(out["metadata"]["labels"], json!({"x": "y"}));
}

#[test]
fn strategic_errors() {
    assert!(matches!(
        smp(&deployment(), json!([1])),
        Err(PatchError::Malformed(_))
    ));
    assert!(matches!(
        smp(&deployment(), json!({"spec": {"template": {"spec": {"containers": [{"image": "no-name"}]}}}})),
        Err(PatchError::Malformed(m)) if m.contains("merge key")
    ));
    assert!(smp(&deployment(), json!({"metadata": {"$patch": "explode"}})).is_err());
}

#[test]
fn long_lists_merge_by_index_with_the_same_meaning() {
    // 20,000 containers; a patch that merges into every other one, deletes every third,
    // adds 20,000 more and orders the result: a scan per item would be 4e8 comparisons.
    let n = 20_000;
    let mut d = deployment();
    d["spec"]["template"]["spec"]["containers"] = Value::Array(
        (0..n)
            .map(|i| json!({"name": format!("c{i}"), "image": "old"}))
            .collect(),
    );
    let mut items = Vec::new();
    for i in 0..n {
        if i % 3 == 0 {
            items.push(json!({"name": format!("c{i}"), "$patch": "delete"}));
        } else if i % 2 == 0 {
            items.push(json!({"name": format!("c{i}"), "image": "new"}));
        }
        items.push(json!({"name": format!("n{i}"), "image": "added"}));
    }
    let order: Vec<Value> = (0..n)
        .rev()
        .map(|i| json!({"name": format!("n{i}")}))
        .collect();
    let out = smp(
        &d,
        json!({"spec": {"template": {"spec": {
            "containers": items,
            "$setElementOrder/containers": order,
        }}}}),
    )
    .unwrap();
    let containers = out["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    let kept = (0..n).filter(|i| i % 3 != 0).count();
    assert_eq!(containers.len(), kept + n);
    // The ordered ones first, as ordered; the rest after, in their own order.
    assert_eq!(containers[0]["name"], format!("n{}", n - 1));
    assert_eq!(containers[n - 1]["name"], "n0");
    assert_eq!(containers[n]["name"], "c1");
    assert_eq!(containers[n]["image"], "old");
    assert_eq!(containers[n + 1]["name"], "c2");
    assert_eq!(containers[n + 1]["image"], "new");
    assert!(containers.iter().all(|c| c["name"] != "c3"));
}

#[test]
fn non_merge_lists_are_replaced() {
    let d = json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "args": ["1", "2"]}]}}}});
    let out = smp(
        &d,
        json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "args": ["3"]}]}}}}),
    )
    .unwrap();
    assert_eq!(
        out["spec"]["template"]["spec"]["containers"][0]["args"],
        json!(["3"])
    );
}

#[test]
fn json_and_merge_patch() {
    let d = deployment();
    let out = json_patch(
        &d,
        br#"[{"op":"replace","path":"/spec/replicas","value":3}]"#,
    )
    .unwrap();
    assert_eq!(out["spec"]["replicas"], 3);
    assert!(matches!(
        json_patch(&d, b"{not json"),
        Err(PatchError::Malformed(_))
    ));
    assert!(matches!(
        json_patch(&d, br#"[{"op":"remove","path":"/nope"}]"#),
        Err(PatchError::Apply(_))
    ));
    let out = merge_patch(&d, br#"{"metadata":{"labels":{"app":null}}}"#).unwrap();
    assert_eq!(out["metadata"]["labels"], json!({}));
    assert!(merge_patch(&d, b"[]").is_err());
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(|n| json!(n)),
        prop_oneof![
            Just("name".to_string()),
            Just("$patch".to_string()),
            Just("replace".to_string()),
            Just("delete".to_string()),
            "[a-z$/]{0,12}"
        ]
        .prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        Just("spec".to_string()),
                        Just("template".to_string()),
                        Just("containers".to_string()),
                        Just("name".to_string()),
                        Just("env".to_string()),
                        Just("metadata".to_string()),
                        Just("finalizers".to_string()),
                        Just("$patch".to_string()),
                        Just("$retainKeys".to_string()),
                        Just("$setElementOrder/containers".to_string()),
                        Just("$deleteFromPrimitiveList/finalizers".to_string()),
                        "[a-z]{1,6}"
                    ],
                    inner
                ),
                0..5
            )
            .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// No patch engine panics on any input: it applies or returns an error.
    #[test]
    fn patch_engines_never_panic(target in arb_json(), patch in arb_json(), raw in prop::collection::vec(any::<u8>(), 0..64)) {
        let bytes = serde_json::to_vec(&patch).unwrap();
        let _ = strategic_patch(SchemaSet::builtin(), DEPLOYMENT, &target, &bytes);
        let _ = strategic_patch(SchemaSet::builtin(), DEPLOYMENT, &target, &raw);
        let _ = merge_patch(&target, &bytes);
        let _ = merge_patch(&target, &raw);
        let _ = json_patch(&target, &bytes);
        let _ = json_patch(&target, &raw);
    }
}
