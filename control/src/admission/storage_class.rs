//! kube's `DefaultStorageClass` admission plugin: a PersistentVolumeClaim created without
//! `spec.storageClassName` gets the cluster's default StorageClass (the one annotated
//! `storageclass.kubernetes.io/is-default-class: "true"`; the newest when several are), so
//! `kubectl get pvc` shows the class it will be provisioned by. An empty class name (`""`)
//! means "no dynamic provisioning" and is kept. A physical cluster's server only: a logical
//! cluster has no StorageClasses, and its claims take the class of wherever they run.

use serde_json::Value;

use crate::errors::ApiResult;
use crate::pipeline::hooks::{Hook, HookCx};
use crate::storage::ResourcePrefix;

/// The annotation that marks the default StorageClass.
pub const DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";

pub struct DefaultStorageClass;

impl Hook for DefaultStorageClass {
    fn admit_create(&self, cx: &HookCx<'_>, obj: &mut Value) -> ApiResult<()> {
        if obj["spec"]
            .get("storageClassName")
            .is_some_and(|c| !c.is_null())
        {
            return Ok(());
        }
        let scope = format!(
            "{}{}//",
            ResourcePrefix::new("storage.k8s.io", "storageclasses").as_str(),
            cx.cluster
        );
        // The newest default, then the first by name (kube's plugin picks the newest).
        let mut best: Option<(String, String)> = None;
        cx.state.store.scan(&scope, None, |_, entry| {
            if let Ok(class) = serde_json::from_slice::<Value>(&entry.value)
                && class["metadata"]["annotations"][DEFAULT_CLASS] == "true"
                && let Some(name) = class["metadata"]["name"].as_str()
            {
                let created = class["metadata"]["creationTimestamp"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                let newer = best
                    .as_ref()
                    .is_none_or(|(c, n)| created > *c || (created == *c && name < n.as_str()));
                if newer {
                    best = Some((created, name.to_string()));
                }
            }
            true
        });
        if let Some((_, name)) = best
            && let Some(spec) = obj["spec"].as_object_mut()
        {
            spec.insert("storageClassName".into(), Value::from(name));
        }
        Ok(())
    }
}
