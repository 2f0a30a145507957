//! Service ClusterIPs in single-cluster mode: assigned on create, kept on update, given
//! back when the write does not persist (released on deletion by the allocator's watcher).

use std::sync::Arc;

use serde_json::Value;

use crate::errors::ApiResult;
use crate::pipeline::hooks::{Hook, HookCx};
use crate::resources::Subresource;
use crate::single_cluster::IpAllocator;

pub struct ClusterIpHook(pub Arc<IpAllocator>);

impl Hook for ClusterIpHook {
    fn admit_create(&self, _cx: &HookCx<'_>, obj: &mut Value) -> ApiResult<()> {
        self.0.assign(obj)
    }

    fn admit_update(
        &self,
        _cx: &HookCx<'_>,
        old: &Value,
        new: &mut Value,
        _sub: Option<Subresource>,
    ) -> ApiResult<()> {
        self.0.keep(old, new)
    }

    fn release(&self, obj: &Value) {
        self.0.release(obj);
    }
}
