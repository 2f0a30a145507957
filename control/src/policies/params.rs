//! A binding's parameter objects: the `paramKind` resolved in the logical cluster's own
//! catalog (built-ins and its CRDs), then one object by name or every object a selector
//! matches, in the binding's namespace or the request's. Read from the store the write
//! path sees; a tenant's policy reads only its own logical cluster.

use serde_json::Value;
use sluice_api::LogicalClusterPath;

use super::config::{ParamKind, ParamRef, ParamSource};
use crate::state::ApiState;

/// Parameter objects one binding evaluates at most (each is a full evaluation of the
/// policy); more is a misconfiguration the failure policy decides.
pub const MAX_PARAMS: usize = 128;

/// Why the parameters could not be read: a misconfigured policy or binding.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParamError {
    #[error("failed to find resource referenced by paramKind: '{0}'")]
    UnknownKind(String),
    #[error("paramRef.namespace must not be provided for a cluster-scoped `paramKind`")]
    NamespaceOfClusterScoped,
    #[error(
        "cannot use namespaced paramRef in policy binding that matches cluster-scoped resources"
    )]
    NoNamespace,
    #[error("more than {MAX_PARAMS} parameter objects match the binding's paramRef")]
    TooMany,
}

/// The parameter objects of `param_ref` for a request in `namespace`, sorted by name.
pub fn find(
    state: &ApiState,
    cluster: &LogicalClusterPath,
    kind: &ParamKind,
    param_ref: &ParamRef,
    namespace: Option<&str>,
) -> Result<Vec<Value>, ParamError> {
    let catalog = state.crds.catalog(cluster);
    let Some(t) = catalog
        .types()
        .iter()
        .find(|t| t.group == kind.group && t.version == kind.version && t.kind == kind.kind)
    else {
        let gv = if kind.group.is_empty() {
            kind.version.clone()
        } else {
            format!("{}/{}", kind.group, kind.version)
        };
        return Err(ParamError::UnknownKind(format!("{gv}, Kind={}", kind.kind)));
    };
    let ns = match (t.namespaced, param_ref.namespace.as_deref()) {
        (false, Some(_)) => return Err(ParamError::NamespaceOfClusterScoped),
        (false, None) => None,
        (true, Some(ns)) => Some(ns),
        (true, None) => Some(namespace.ok_or(ParamError::NoNamespace)?),
    };
    let view = |v: Value| match t.conversion {
        Some(c) => (c.from_storage)(v),
        None => v,
    };
    match &param_ref.source {
        ParamSource::Name(name) => Ok(state
            .store
            .get(&t.prefix.key(cluster, ns, name))
            .and_then(|e| serde_json::from_slice::<Value>(&e.value).ok())
            .map(view)
            .into_iter()
            .collect()),
        ParamSource::Selector(selector) => {
            let mut out = Vec::new();
            let mut too_many = false;
            state
                .store
                .scan(&t.prefix.scope(Some(cluster), ns), None, |_, e| {
                    let Ok(obj) = serde_json::from_slice::<Value>(&e.value) else {
                        return true;
                    };
                    if selector.matches(&crate::webhooks::matching::labels_of(&obj)) {
                        if out.len() == MAX_PARAMS {
                            too_many = true;
                            return false;
                        }
                        out.push(view(obj));
                    }
                    true
                });
            if too_many {
                return Err(ParamError::TooMany);
            }
            Ok(out)
        }
    }
}
