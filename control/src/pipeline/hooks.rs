//! Admission hooks: per-resource steps of the object pipeline, registered by group and
//! resource instead of branches on resource names. A hook may add validation causes, change
//! a validated object before it is persisted (state-dependent fields, reservations such as
//! a ClusterIP), refuse a deletion, undo a reservation when the write does not persist, and act
//! after a commit (rebuild a catalog, create what a new object implies).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;
use sluice_api::LogicalClusterPath;

use crate::errors::{ApiResult, Cause};
use crate::resources::{ResourceType, Subresource};
use crate::state::write_state::WriteState;

/// What a hook knows about the write it takes part in.
pub struct HookCx<'a> {
    pub state: &'a WriteState,
    pub t: &'a ResourceType,
    pub cluster: &'a LogicalClusterPath,
    /// The field manager of a create or update (`None` for deletions and the server's own
    /// writes).
    pub manager: Option<&'a str>,
    /// Who asked for a create or update (`None` for the server's own writes).
    pub user: Option<&'a crate::auth::User>,
    /// Warnings for the client (kube's `Warning` header), added by hooks.
    pub warnings: std::sync::Mutex<Vec<String>>,
}

impl HookCx<'_> {
    /// Tell the client something without refusing the write.
    pub fn warn(&self, message: String) {
        self.warnings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(message);
    }

    /// The warnings hooks added.
    pub fn take_warnings(&self) -> Vec<String> {
        std::mem::take(&mut *self.warnings.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// What was committed.
#[derive(Clone, Copy)]
pub enum Committed<'a> {
    /// Created or updated (still present): `old` is what an update replaced.
    Written {
        new: &'a Value,
        old: Option<&'a Value>,
    },
    /// Removed from storage.
    Deleted(&'a Value),
}

/// How deleting an object proceeds when it is not simply removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deletion {
    /// Its contents go first: it is marked, and a controller removes the contents and then
    /// it (`terminating`: its `status.phase` says `Terminating` meanwhile).
    Container { terminating: bool },
    /// It ends gracefully: marked with a grace period, removed by whoever stops it.
    Graceful { seconds: i64 },
}

pub type HookFuture<'a> = Pin<Box<dyn Future<Output = ApiResult<()>> + Send + 'a>>;

/// One resource's admission step. Every method has a do-nothing default.
pub trait Hook: Send + Sync {
    /// A new object, after defaults, server metadata and validation, just before it is
    /// persisted (a refusal here releases what earlier hooks reserved).
    fn admit_create(&self, _cx: &HookCx<'_>, _obj: &mut Value) -> ApiResult<()> {
        Ok(())
    }

    /// An update (of the main resource when `sub` is `None`), after validation, just
    /// before it is persisted.
    fn admit_update(
        &self,
        _cx: &HookCx<'_>,
        _old: &Value,
        _new: &mut Value,
        _sub: Option<Subresource>,
    ) -> ApiResult<()> {
        Ok(())
    }

    /// Validation beyond the type's generic checks.
    fn validate(&self, _obj: &Value) -> Vec<Cause> {
        Vec::new()
    }

    /// Whether `obj` may be deleted.
    fn admit_delete(&self, _cx: &HookCx<'_>, _name: &str, _obj: &Value) -> ApiResult<()> {
        Ok(())
    }

    /// How deleting `obj` proceeds (DeleteOptions in `options`); `None`: as any object
    /// (removed, or marked while it has finalizers).
    fn deletion(&self, _obj: &Value, _options: &Value) -> Option<Deletion> {
        None
    }

    /// A create or update admitted by this hook did not persist (dry run, failed write):
    /// give back what it reserved.
    fn release(&self, _obj: &Value) {}

    /// After the write reached storage.
    fn committed<'a>(&'a self, _cx: &'a HookCx<'a>, _what: Committed<'a>) -> HookFuture<'a> {
        Box::pin(async { Ok(()) })
    }
}

/// The hooks of every resource, by `(group, resource)`.
#[derive(Default, Clone)]
pub struct Hooks {
    by_resource: HashMap<(String, String), Vec<Arc<dyn Hook>>>,
    /// The hooks of custom resources whose definition marks them syncable (they travel
    /// as the built-in kinds do; their definitions come and go while the server runs).
    syncable_custom: Vec<Arc<dyn Hook>>,
}

impl Hooks {
    /// Register `hook` for `group`/`resource` (after the ones registered before it).
    pub fn register(&mut self, group: &str, resource: &str, hook: Arc<dyn Hook>) {
        self.by_resource
            .entry((group.to_string(), resource.to_string()))
            .or_default()
            .push(hook);
    }

    /// Register `hook` for every custom resource marked syncable.
    pub fn register_syncable_custom(&mut self, hook: Arc<dyn Hook>) {
        self.syncable_custom.push(hook);
    }

    /// The hooks of type `t`, in registration order.
    pub fn of(&self, t: &ResourceType) -> &[Arc<dyn Hook>] {
        match self.by_resource.get(&(t.group.clone(), t.resource.clone())) {
            Some(hooks) => hooks,
            None if t.custom().is_some_and(|c| c.syncable) => &self.syncable_custom,
            None => &[],
        }
    }
}
