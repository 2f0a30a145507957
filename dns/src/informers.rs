//! Informers: one kube-rs watcher per object kind, each folding its events into the
//! [`Model`]. The server answers SERVFAIL until every informer has listed once.

use std::collections::HashSet;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use sluice_api::mcs::ServiceImport;
use sluice_api::sluice::Cluster;
use sluice_api::sync::LABEL_LOGICAL_CLUSTER;

use crate::model::{IngressId, Model, ServiceKey, ingress_id, stale};
use crate::state::DnsState;

/// An object kind the model reflects.
pub trait Reflected: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static {
    type Id: Eq + Hash + Clone + Send;
    const NAME: &'static str;
    fn id(&self) -> Option<Self::Id>;
    fn apply(model: &mut Model, obj: &Self);
    fn delete(model: &mut Model, id: &Self::Id);
    fn ids(model: &Model) -> Vec<Self::Id>;
    /// Which objects of the kind to watch: all, unless a kind says otherwise.
    fn watch_config() -> watcher::Config {
        watcher::Config::default()
    }
    /// Answers wait for this kind's first list (SERVFAIL until then). Kinds read from the
    /// control plane do not hold the cluster's own names back while it is away.
    const GATES_READINESS: bool = true;
}

fn ns_name<K: Resource>(obj: &K) -> Option<(String, String)> {
    let m = obj.meta();
    Some((m.namespace.clone()?, m.name.clone()?))
}

impl Reflected for ServiceImport {
    type Id = ServiceKey;
    const NAME: &'static str = "serviceimports";
    fn id(&self) -> Option<ServiceKey> {
        ns_name(self).map(|(ns, n)| ServiceKey::new(&ns, &n))
    }
    fn apply(model: &mut Model, obj: &Self) {
        model.apply_import(obj)
    }
    fn delete(model: &mut Model, id: &ServiceKey) {
        model.delete_import(id)
    }
    fn ids(model: &Model) -> Vec<ServiceKey> {
        model.import_keys()
    }
}

impl Reflected for Service {
    type Id = ServiceKey;
    const NAME: &'static str = "services";
    fn id(&self) -> Option<ServiceKey> {
        ns_name(self).map(|(ns, n)| ServiceKey::new(&ns, &n))
    }
    fn apply(model: &mut Model, obj: &Self) {
        model.apply_service(obj)
    }
    fn delete(model: &mut Model, id: &ServiceKey) {
        model.delete_service(id)
    }
    fn ids(model: &Model) -> Vec<ServiceKey> {
        model.service_keys()
    }
}

impl Reflected for EndpointSlice {
    type Id = (String, String);
    const NAME: &'static str = "endpointslices";
    fn id(&self) -> Option<Self::Id> {
        ns_name(self)
    }
    fn apply(model: &mut Model, obj: &Self) {
        model.apply_slice(obj)
    }
    fn delete(model: &mut Model, id: &Self::Id) {
        model.delete_slice(&id.0, &id.1)
    }
    fn ids(model: &Model) -> Vec<Self::Id> {
        model.slice_ids()
    }
}

impl Reflected for Pod {
    type Id = (String, String);
    const NAME: &'static str = "pods";
    fn id(&self) -> Option<Self::Id> {
        ns_name(self)
    }
    fn apply(model: &mut Model, obj: &Self) {
        model.apply_pod(obj)
    }
    fn delete(model: &mut Model, id: &Self::Id) {
        model.delete_pod(&id.0, &id.1)
    }
    fn ids(model: &Model) -> Vec<Self::Id> {
        model.pod_ids()
    }
}

impl Reflected for Namespace {
    type Id = String;
    const NAME: &'static str = "namespaces";
    fn id(&self) -> Option<String> {
        self.metadata.name.clone()
    }
    fn apply(model: &mut Model, obj: &Self) {
        model.apply_namespace(obj)
    }
    fn delete(model: &mut Model, id: &String) {
        model.delete_namespace(id)
    }
    fn ids(model: &Model) -> Vec<String> {
        model.namespace_ids()
    }
    /// Only the namespaces Sluice placed (a pod's logical cluster comes from them).
    fn watch_config() -> watcher::Config {
        watcher::Config::default().labels(LABEL_LOGICAL_CLUSTER)
    }
}

/// Every logical cluster's Ingresses (the control plane's wildcard): their hosts are
/// answered with the clusters' ingress addresses.
impl Reflected for Ingress {
    type Id = IngressId;
    const NAME: &'static str = "ingresses";
    const GATES_READINESS: bool = false;
    fn id(&self) -> Option<IngressId> {
        ingress_id(self)
    }
    fn apply(model: &mut Model, obj: &Self) {
        model.apply_ingress(obj)
    }
    fn delete(model: &mut Model, id: &IngressId) {
        model.delete_ingress(id)
    }
    fn ids(model: &Model) -> Vec<IngressId> {
        model.ingress_ids()
    }
}

/// The control plane's clusters: where their ingresses listen, Ready, drained.
impl Reflected for Cluster {
    type Id = String;
    const NAME: &'static str = "clusters";
    const GATES_READINESS: bool = false;
    fn id(&self) -> Option<String> {
        self.metadata.name.clone()
    }
    fn apply(model: &mut Model, obj: &Self) {
        model.apply_cluster(obj)
    }
    fn delete(model: &mut Model, id: &String) {
        model.delete_cluster(id)
    }
    fn ids(model: &Model) -> Vec<String> {
        model.cluster_names()
    }
}

/// Watch every object of kind `K` in all namespaces, forever (the watcher retries with
/// backoff on errors and re-lists when its resourceVersion is too old).
pub async fn run<K>(client: Client, state: Arc<DnsState>)
where
    K: Reflected,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::all(client);
    let mut stream = sluice_kube::informer::watch(api, K::watch_config()).boxed();
    let mut listing: Option<HashSet<K::Id>> = None;
    let mut synced = false;
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(kind = K::NAME, error = %e, "watch failed; retrying");
                continue;
            }
        };
        let mut model = state.model.write().unwrap_or_else(|p| p.into_inner());
        match event {
            watcher::Event::Init => listing = Some(HashSet::new()),
            watcher::Event::InitApply(obj) => {
                if let (Some(seen), Some(id)) = (listing.as_mut(), obj.id()) {
                    seen.insert(id);
                }
                K::apply(&mut model, &obj);
            }
            watcher::Event::InitDone => {
                if let Some(seen) = listing.take() {
                    for id in stale(K::ids(&model), &seen) {
                        K::delete(&mut model, &id);
                    }
                }
                if !synced {
                    synced = true;
                    if K::GATES_READINESS && state.unsynced.fetch_sub(1, Ordering::AcqRel) == 1 {
                        state.metrics.synced.set(1);
                    }
                    tracing::info!(kind = K::NAME, "informer synced");
                }
            }
            watcher::Event::Apply(obj) => K::apply(&mut model, &obj),
            watcher::Event::Delete(obj) => {
                if let Some(id) = obj.id() {
                    K::delete(&mut model, &id);
                }
            }
        }
        state.changed();
        state.metrics.record_objects(&model);
    }
}
