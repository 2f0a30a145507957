//! One member cluster as the controller sees it: informers over the kinds the reconcile
//! reads, and the snapshot they make.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Client};
use sluice_api::mcs::{ServiceExport, ServiceImport};

use crate::changes::Changes;

use crate::index::ServiceIndex;
use crate::informer::Informer;
use crate::lease::{LEASE_NAME, LEASE_NAMESPACE, expires_at};
use crate::model::{ClusterId, ClusterName, MemberSnapshot, Scope, ServiceKey};
use crate::reconcile::{is_managed, slice_service};

pub struct Member {
    pub name: ClusterName,
    pub id: ClusterId,
    pub index: u8,
    pub client: Client,
    pub namespaces: Informer<Namespace>,
    pub services: Informer<Service>,
    pub exports: Informer<ServiceExport>,
    pub slices: Informer<EndpointSlice>,
    /// The slices by service, own and MCS ones alike.
    pub slices_by_service: Arc<ServiceIndex<EndpointSlice>>,
    pub imports: Informer<ServiceImport>,
    pub leases: Informer<Lease>,
}

impl Member {
    pub fn start(
        name: ClusterName,
        id: ClusterId,
        index: u8,
        client: Client,
        changes: Arc<Changes>,
    ) -> Self {
        let all = watcher::Config::default;
        /// An informer recording the service key `key_of` gives each changed object.
        fn keyed_informer<K>(
            api: Api<K>,
            what: &str,
            changes: &Arc<Changes>,
            key_of: fn(&K) -> Option<ServiceKey>,
        ) -> Informer<K>
        where
            K: kube::Resource
                + Clone
                + serde::de::DeserializeOwned
                + std::fmt::Debug
                + Send
                + Sync
                + 'static,
            K::DynamicType: Default + std::hash::Hash + Eq + Clone,
        {
            Informer::start_with(
                api,
                watcher::Config::default(),
                what,
                changes.recorder(key_of),
            )
        }
        let namespaces = {
            // A namespace appearing, going or changing its labels touches every service in
            // it (imports, implicit exports): reconcile everything.
            let changes = changes.clone();
            Informer::start_with(Api::all(client.clone()), all(), "namespaces", move |e| {
                if !matches!(e, watcher::Event::Init | watcher::Event::InitApply(_)) {
                    changes.touch_all();
                }
            })
        };
        let slices_by_service = ServiceIndex::new(slice_service);
        let leases = {
            // Renewals only wake the loop, which notices a lease that ran out or came back.
            let changes = changes.clone();
            Informer::start_with(
                Api::namespaced(client.clone(), LEASE_NAMESPACE),
                all(),
                "leases",
                move |_| changes.wake(),
            )
        };
        Self {
            namespaces,
            services: keyed_informer(Api::all(client.clone()), "services", &changes, |o| {
                ServiceKey::from_meta(&o.metadata)
            }),
            exports: keyed_informer(Api::all(client.clone()), "serviceexports", &changes, |o| {
                ServiceKey::from_meta(&o.metadata)
            }),
            slices: {
                let (index, record) = (slices_by_service.clone(), changes.recorder(slice_service));
                Informer::start_with(
                    Api::all(client.clone()),
                    all(),
                    "endpointslices",
                    move |e| {
                        index.record(e);
                        record(e);
                    },
                )
            },
            slices_by_service,
            imports: keyed_informer(Api::all(client.clone()), "serviceimports", &changes, |o| {
                ServiceKey::from_meta(&o.metadata)
            }),
            leases,
            name,
            id,
            index,
            client,
        }
    }

    /// Whether every informer has listed once (before that a snapshot would look like
    /// an empty cluster and withdraw its exports).
    pub fn synced(&self) -> bool {
        self.namespaces.is_ready()
            && self.services.is_ready()
            && self.exports.is_ready()
            && self.slices.is_ready()
            && self.imports.is_ready()
            && self.leases.is_ready()
    }

    /// When this cluster's lease runs out; `None`: no lease (alive).
    pub fn lease_expiry(&self) -> Option<Timestamp> {
        self.leases
            .state()
            .iter()
            .find(|l| l.metadata.name.as_deref() == Some(LEASE_NAME))
            .and_then(|l| expires_at(l))
    }

    /// Whether the cluster's lease is current at `now`.
    pub fn alive(&self, now: Timestamp) -> bool {
        self.lease_expiry().is_none_or(|t| t > now)
    }

    /// The member's objects of the services in `scope` (namespaces: all of them).
    pub fn snapshot(&self, now: Timestamp, scope: &Scope) -> MemberSnapshot {
        let mut s = MemberSnapshot::new(self.name.clone(), self.id.clone(), self.index);
        s.alive = self.alive(now);
        s.namespaces = self
            .namespaces
            .state()
            .iter()
            .filter_map(|n| Some((n.metadata.name.clone()?, (**n).clone())))
            .collect();
        s.services = keyed(&in_scope(&self.services, scope));
        s.exports = keyed(&in_scope(&self.exports, scope));
        s.imports = keyed(&in_scope(&self.imports, scope));
        let mut slices: BTreeMap<ServiceKey, Vec<EndpointSlice>> = BTreeMap::new();
        for sl in self.slices_in_scope(scope, false) {
            if let Some(key) = slice_service(&sl) {
                slices.entry(key).or_default().push((*sl).clone());
            }
        }
        s.slices = slices;
        s
    }

    /// The EndpointSlices of the services in `scope`: the Services' own ones, or (with
    /// `managed`) the MCS slices this controller wrote.
    pub fn slices_in_scope(&self, scope: &Scope, managed: bool) -> Vec<Arc<EndpointSlice>> {
        let mut out = self.slices.state();
        out.retain(|s| {
            is_managed(&s.metadata) == managed
                && slice_service(s).is_some_and(|k| scope.contains(&k))
        });
        out
    }

    pub fn imports_in_scope(&self, scope: &Scope) -> Vec<Arc<ServiceImport>> {
        in_scope(&self.imports, scope)
    }

    pub fn exports_in_scope(&self, scope: &Scope) -> Vec<Arc<ServiceExport>> {
        in_scope(&self.exports, scope)
    }
}

/// The objects named by `scope` (namespace and name are the service's).
fn in_scope<K>(informer: &Informer<K>, scope: &Scope) -> Vec<Arc<K>>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Default + std::hash::Hash + Eq + Clone,
{
    match scope {
        Scope::All => informer.store.state(),
        Scope::Services(keys) => keys
            .iter()
            .filter_map(|k| {
                informer
                    .store
                    .get(&ObjectRef::new(&k.name).within(&k.namespace))
            })
            .collect(),
    }
}

fn keyed<K: kube::Resource + Clone>(objs: &[Arc<K>]) -> BTreeMap<ServiceKey, K> {
    objs.iter()
        .filter_map(|o| Some((ServiceKey::from_meta(o.meta())?, (**o).clone())))
        .collect()
}
