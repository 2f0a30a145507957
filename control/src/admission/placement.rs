//! Objects of a placed namespace carry its state labels (`state.sluice.dev/<cluster>`) and
//! its downstream name (`sluice.dev/downstream-namespace`):
//! the placement controller labels what exists when a namespace is placed or moved, and
//! this hook labels what is created or replaced afterwards, so a syncer never sees an
//! object of a placed namespace without its placement, nor one that claims a placement of
//! its own.

use std::collections::BTreeMap;

use serde_json::Value;
use sluice_api::sync::{
    ANNOTATION_DOWNSTREAM_NAMESPACE, STATE_LABEL_PREFIX, STATE_SYNC, placed_clusters, state_label,
};
use sluice_api::synced_kinds::SyncedKind;

use crate::admission::downstream_names;
use crate::errors::ApiResult;
use crate::pipeline::hooks::{Hook, HookCx};
use crate::resources::Subresource;

pub struct StateLabels;

impl StateLabels {
    /// Make `obj`'s state labels those of its namespace.
    fn follow_namespace(cx: &HookCx<'_>, obj: &mut Value) {
        let Some(ns) = obj["metadata"]["namespace"].as_str().map(str::to_string) else {
            return;
        };
        let ns = ns.as_str();
        let stored = downstream_names::stored_namespace(cx.state, cx.cluster, ns);
        // Where it lives downstream: its namespace's name there, whatever the client said.
        let down = downstream_names::of_stored(cx.state, cx.cluster, ns, stored.as_ref());
        crate::object::set_annotation(obj, ANNOTATION_DOWNSTREAM_NAMESPACE, &down);
        // A Pod a syncer mirrored up runs where it runs: it has no placement of its own.
        let mirror = SyncedKind::find(&cx.t.group, &cx.t.resource).is_some_and(|k| {
            k.is_mirror(
                obj["metadata"]["labels"]
                    .as_object()
                    .into_iter()
                    .flat_map(|l| l.keys()),
            )
        });
        if mirror {
            return;
        }
        let ns_labels: BTreeMap<String, String> = stored
            .and_then(|v| serde_json::from_value(v["metadata"]["labels"].clone()).ok())
            .unwrap_or_default();
        let placed = placed_clusters(ns_labels.iter());
        let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
            return;
        };
        let labels = meta
            .entry("labels")
            .or_insert_with(|| Value::Object(Default::default()));
        if !labels.is_object() {
            return;
        }
        let Some(labels) = labels.as_object_mut() else {
            return;
        };
        labels.retain(|k, _| !k.starts_with(STATE_LABEL_PREFIX));
        for c in placed {
            labels.insert(state_label(&c), Value::from(STATE_SYNC));
        }
        if labels.is_empty() {
            meta.remove("labels");
        }
    }
}

impl Hook for StateLabels {
    fn admit_create(&self, cx: &HookCx<'_>, obj: &mut Value) -> ApiResult<()> {
        Self::follow_namespace(cx, obj);
        Ok(())
    }

    fn admit_update(
        &self,
        cx: &HookCx<'_>,
        _old: &Value,
        new: &mut Value,
        sub: Option<Subresource>,
    ) -> ApiResult<()> {
        if sub.is_none() {
            Self::follow_namespace(cx, new);
        }
        Ok(())
    }
}
