//! Writing the desired state into a member cluster, and only what changed.
//!
//! Every write remembers what it wrote (a hash) and the resourceVersion it got back; the
//! next reconcile skips an object whose desired state hashes the same while the observed
//! object is still at (or behind) that version. So a quiet clusterset costs no writes, an
//! object someone else edited is put back, and server-side defaults never cause a write
//! loop.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Client, Resource};
use serde::Serialize;
use serde_json::Value;
use sluice_api::mcs::{ServiceExport, ServiceExportStatus, ServiceImport};

use crate::model::{ServiceKey, SliceKey};

pub const FIELD_MANAGER: &str = "sluice-mcs";

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Kind {
    Import,
    Slice,
    ExportStatus,
    Service,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Import => "serviceimport",
            Kind::Slice => "endpointslice",
            Kind::ExportStatus => "serviceexport_status",
            Kind::Service => "service",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("{kind} {key}: {source}")]
    Api {
        kind: String,
        key: String,
        source: kube::Error,
    },
    #[error("{0}: {1}")]
    Encode(String, serde_json::Error),
}

struct Written {
    hash: u64,
    rv: Option<String>,
}

/// Writes into one member cluster.
pub struct Writer {
    client: Client,
    written: Mutex<HashMap<(Kind, String, String), Written>>,
}

fn hash_of<T: Serialize>(v: &T) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(v).unwrap_or_default().hash(&mut h);
    h.finish()
}

/// Whether `observed` is the version we wrote, or older (the informer has not seen our
/// write yet). Versions are opaque in general; when both are integers (etcd and Sluice's
/// store), an older one is recognised too.
fn not_newer(observed: Option<&str>, ours: Option<&str>) -> bool {
    match (observed, ours) {
        (Some(o), Some(w)) if o == w => true,
        (Some(o), Some(w)) => match (o.parse::<u64>(), w.parse::<u64>()) {
            (Ok(o), Ok(w)) => o <= w,
            _ => false,
        },
        _ => false,
    }
}

fn with_type<K: Resource<DynamicType = ()> + Serialize>(obj: &K) -> Result<Value, WriteError> {
    let mut v =
        serde_json::to_value(obj).map_err(|e| WriteError::Encode(K::kind(&()).to_string(), e))?;
    v["apiVersion"] = K::api_version(&()).into();
    v["kind"] = K::kind(&()).into();
    Ok(v)
}

impl Writer {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            written: Mutex::new(HashMap::new()),
        }
    }

    fn unchanged(
        &self,
        key: &(Kind, String, String),
        hash: u64,
        observed_rv: Option<&str>,
    ) -> bool {
        let written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        written
            .get(key)
            .is_some_and(|w| w.hash == hash && not_newer(observed_rv, w.rv.as_deref()))
    }

    fn remember(&self, key: (Kind, String, String), hash: u64, rv: Option<String>) {
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        written.insert(key, Written { hash, rv });
    }

    fn forget(&self, key: &(Kind, String, String)) {
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        written.remove(key);
    }

    /// Apply a ServiceImport (metadata and spec, then status). Returns whether it wrote.
    pub async fn import(
        &self,
        key: &ServiceKey,
        desired: &ServiceImport,
        observed_rv: Option<&str>,
    ) -> Result<bool, WriteError> {
        let id = (Kind::Import, key.namespace.clone(), key.name.clone());
        let hash = hash_of(desired);
        if self.unchanged(&id, hash, observed_rv) {
            return Ok(false);
        }
        let api: Api<ServiceImport> = Api::namespaced(self.client.clone(), &key.namespace);
        let err = |source| WriteError::Api {
            kind: "ServiceImport".to_string(),
            key: key.to_string(),
            source,
        };
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let mut body = with_type(desired)?;
        let status = body
            .as_object_mut()
            .and_then(|o| o.remove("status"))
            .unwrap_or(Value::Null);
        api.patch(&key.name, &params, &Patch::Apply(&body))
            .await
            .map_err(err)?;
        // Status through a merge patch: not every API server applies subresources.
        let written = api
            .patch_status(
                &key.name,
                &PatchParams::default(),
                &Patch::Merge(&serde_json::json!({ "status": status })),
            )
            .await
            .map_err(err)?;
        self.remember(id, hash, written.metadata.resource_version);
        Ok(true)
    }

    pub async fn slice(
        &self,
        key: &SliceKey,
        desired: &EndpointSlice,
        observed_rv: Option<&str>,
    ) -> Result<bool, WriteError> {
        self.apply(Kind::Slice, &key.namespace, &key.name, desired, observed_rv)
            .await
    }

    /// Apply a derived Service. Its ClusterIP is the API server's to allocate: the applied
    /// configuration leaves it out, so it is kept across updates.
    pub async fn service(
        &self,
        key: &ServiceKey,
        desired: &Service,
        observed_rv: Option<&str>,
    ) -> Result<bool, WriteError> {
        self.apply(
            Kind::Service,
            &key.namespace,
            &key.name,
            desired,
            observed_rv,
        )
        .await
    }

    /// Server-side apply of a whole object (force: this controller owns what it writes).
    async fn apply<K>(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        desired: &K,
        observed_rv: Option<&str>,
    ) -> Result<bool, WriteError>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Serialize
            + serde::de::DeserializeOwned
            + Clone
            + std::fmt::Debug,
    {
        let id = (kind, namespace.to_string(), name.to_string());
        let hash = hash_of(desired);
        if self.unchanged(&id, hash, observed_rv) {
            return Ok(false);
        }
        let api: Api<K> = Api::namespaced(self.client.clone(), namespace);
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let body = with_type(desired)?;
        let written = api
            .patch(name, &params, &Patch::Apply(&body))
            .await
            .map_err(|source| WriteError::Api {
                kind: K::kind(&()).to_string(),
                key: format!("{namespace}/{name}"),
                source,
            })?;
        self.remember(id, hash, written.meta().resource_version.clone());
        Ok(true)
    }

    /// Replace an explicit ServiceExport's conditions.
    pub async fn export_status(
        &self,
        key: &ServiceKey,
        desired: &ServiceExportStatus,
        observed_rv: Option<&str>,
    ) -> Result<bool, WriteError> {
        let id = (Kind::ExportStatus, key.namespace.clone(), key.name.clone());
        let hash = hash_of(desired);
        if self.unchanged(&id, hash, observed_rv) {
            return Ok(false);
        }
        let api: Api<ServiceExport> = Api::namespaced(self.client.clone(), &key.namespace);
        let body = serde_json::json!({ "status": desired });
        let written = api
            .patch_status(&key.name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map_err(|source| WriteError::Api {
                kind: "ServiceExport".to_string(),
                key: key.to_string(),
                source,
            })?;
        self.remember(id, hash, written.metadata.resource_version);
        Ok(true)
    }

    pub async fn delete_import(&self, key: &ServiceKey) -> Result<(), WriteError> {
        self.delete::<ServiceImport>(Kind::Import, &key.namespace, &key.name)
            .await
    }

    pub async fn delete_slice(&self, key: &SliceKey) -> Result<(), WriteError> {
        self.delete::<EndpointSlice>(Kind::Slice, &key.namespace, &key.name)
            .await
    }

    pub async fn delete_service(&self, key: &ServiceKey) -> Result<(), WriteError> {
        self.delete::<Service>(Kind::Service, &key.namespace, &key.name)
            .await
    }

    /// Delete an object (already gone is fine) and forget what was written to it.
    async fn delete<K>(&self, kind: Kind, namespace: &str, name: &str) -> Result<(), WriteError>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + serde::de::DeserializeOwned
            + Clone
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), namespace);
        self.forget(&(kind, namespace.to_string(), name.to_string()));
        ignore_missing(api.delete(name, &DeleteParams::default()).await).map_err(|source| {
            WriteError::Api {
                kind: K::kind(&()).to_string(),
                key: format!("{namespace}/{name}"),
                source,
            }
        })
    }
}

fn ignore_missing<T>(r: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::not_newer;

    #[test]
    fn versions() {
        assert!(not_newer(Some("7"), Some("7")));
        assert!(not_newer(Some("5"), Some("7")));
        assert!(!not_newer(Some("8"), Some("7")));
        assert!(!not_newer(None, Some("7")));
        assert!(not_newer(Some("abc"), Some("abc")));
        assert!(!not_newer(Some("abc"), Some("abd")));
    }
}
