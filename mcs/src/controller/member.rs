//! One member cluster as the controller sees it: informers over the kinds the reconcile
//! reads, and the snapshot they make.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::watcher;
use kube::{Api, Client};
use sluice_api::mcs::{ServiceExport, ServiceImport};
use sluice_api::sluice::ImportVips;

use crate::Changes;
use crate::ServiceIndex;
use crate::derived::derived_key;
use crate::model::{ClusterId, ClusterName, MemberSnapshot, Scope, ServiceKey};
use crate::reconcile::{is_managed, mcs_service, slice_service};
use sluice_api::liveness::{LEASE_NAME, LEASE_NAMESPACE};
use sluice_kube::Informer;
use sluice_kube::lease::expires_at;

pub struct Member {
    pub name: ClusterName,
    pub id: ClusterId,
    pub index: u8,
    pub import_vips: ImportVips,
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
        import_vips: ImportVips,
        client: Client,
        changes: Arc<Changes>,
    ) -> Self {
        let all = watcher::Config::default;
        let (slices, slices_by_service) = ServiceIndex::start(
            Api::all(client.clone()),
            "endpointslices",
            slice_service,
            &changes,
        );
        Self {
            // A namespace appearing, going or changing its labels touches every service in
            // it (imports, implicit exports).
            namespaces: Informer::start_with(
                Api::all(client.clone()),
                all(),
                "namespaces",
                changes.widener(),
            ),
            services: Informer::start_with(
                Api::all(client.clone()),
                all(),
                "services",
                // A derived Service belongs to the service it was derived from.
                changes.recorder(|o: &Service| {
                    if is_managed(&o.metadata) {
                        mcs_service(&o.metadata)
                    } else {
                        ServiceKey::from_meta(&o.metadata)
                    }
                }),
            ),
            exports: Informer::start_with(
                Api::all(client.clone()),
                all(),
                "serviceexports",
                changes.recorder(|o: &ServiceExport| ServiceKey::from_meta(&o.metadata)),
            ),
            slices,
            slices_by_service,
            imports: Informer::start_with(
                Api::all(client.clone()),
                all(),
                "serviceimports",
                changes.recorder(|o: &ServiceImport| ServiceKey::from_meta(&o.metadata)),
            ),
            leases: Informer::start_with(
                Api::namespaced(client.clone(), LEASE_NAMESPACE),
                all(),
                "leases",
                changes.waker(),
            ),
            name,
            id,
            index,
            import_vips,
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
        s.import_vips = self.import_vips;
        s.alive = self.alive(now);
        s.namespaces = self
            .namespaces
            .state()
            .iter()
            .filter_map(|n| Some((n.metadata.name.clone()?, (**n).clone())))
            .collect();
        s.services = keyed(&in_scope(&self.services, scope));
        s.services.extend(keyed(&self.derived_in_scope(scope)));
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
        let mut out = match scope {
            Scope::All => self.slices.state(),
            Scope::Keys(keys) => keys
                .iter()
                .flat_map(|k| self.slices_by_service.objects(&self.slices.store, k))
                .collect(),
        };
        out.retain(|s| is_managed(&s.metadata) == managed && slice_service(s).is_some());
        out
    }

    /// The derived Services ([`crate::derived`]) of the services in `scope`.
    pub fn derived_in_scope(&self, scope: &Scope) -> Vec<Arc<Service>> {
        let mut out = match scope {
            Scope::All => self.services.state(),
            Scope::Keys(keys) => keys
                .iter()
                .filter_map(|k| {
                    let d = derived_key(k);
                    self.services.get(&d.namespace, &d.name)
                })
                .collect(),
        };
        out.retain(|s| is_managed(&s.metadata));
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
        Scope::All => informer.state(),
        Scope::Keys(keys) => keys
            .iter()
            .filter_map(|k| informer.get(&k.namespace, &k.name))
            .collect(),
    }
}

fn keyed<K: kube::Resource + Clone>(objs: &[Arc<K>]) -> BTreeMap<ServiceKey, K> {
    objs.iter()
        .filter_map(|o| Some((ServiceKey::from_meta(o.meta())?, (**o).clone())))
        .collect()
}
