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
use tokio::sync::Notify;

use crate::informer::Informer;
use crate::lease::{LEASE_NAME, LEASE_NAMESPACE, expires_at};
use crate::meta::{LABEL_KUBE_SERVICE_NAME, label};
use crate::model::{ClusterId, ClusterName, MemberSnapshot, ServiceKey};
use crate::reconcile::is_managed;

pub struct Member {
    pub name: ClusterName,
    pub id: ClusterId,
    pub index: u8,
    pub client: Client,
    pub namespaces: Informer<Namespace>,
    pub services: Informer<Service>,
    pub exports: Informer<ServiceExport>,
    pub slices: Informer<EndpointSlice>,
    pub imports: Informer<ServiceImport>,
    pub leases: Informer<Lease>,
}

impl Member {
    pub fn start(
        name: ClusterName,
        id: ClusterId,
        index: u8,
        client: Client,
        changed: Arc<Notify>,
    ) -> Self {
        let all = watcher::Config::default;
        Self {
            namespaces: Informer::start(
                Api::all(client.clone()),
                all(),
                changed.clone(),
                "namespaces",
            ),
            services: Informer::start(Api::all(client.clone()), all(), changed.clone(), "services"),
            exports: Informer::start(
                Api::all(client.clone()),
                all(),
                changed.clone(),
                "serviceexports",
            ),
            slices: Informer::start(
                Api::all(client.clone()),
                all(),
                changed.clone(),
                "endpointslices",
            ),
            imports: Informer::start(
                Api::all(client.clone()),
                all(),
                changed.clone(),
                "serviceimports",
            ),
            leases: Informer::start(
                Api::namespaced(client.clone(), LEASE_NAMESPACE),
                all(),
                changed,
                "leases",
            ),
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

    pub fn snapshot(&self, now: Timestamp) -> MemberSnapshot {
        let mut s = MemberSnapshot::new(self.name.clone(), self.id.clone(), self.index);
        s.alive = self.lease_expiry().is_none_or(|t| t > now);
        s.namespaces = self
            .namespaces
            .state()
            .iter()
            .filter_map(|n| Some((n.metadata.name.clone()?, (**n).clone())))
            .collect();
        s.services = keyed(&self.services.state());
        s.exports = keyed(&self.exports.state());
        s.imports = keyed(&self.imports.state());
        let mut slices: BTreeMap<ServiceKey, Vec<EndpointSlice>> = BTreeMap::new();
        for sl in self.slices.state() {
            if is_managed(&sl.metadata) {
                continue;
            }
            let (Some(ns), Some(svc)) = (
                sl.metadata.namespace.clone(),
                label(&sl.metadata, LABEL_KUBE_SERVICE_NAME).map(str::to_string),
            ) else {
                continue;
            };
            slices
                .entry(ServiceKey::new(ns, svc))
                .or_default()
                .push((*sl).clone());
        }
        s.slices = slices;
        s
    }
}

fn keyed<K: kube::Resource + Clone>(objs: &[Arc<K>]) -> BTreeMap<ServiceKey, K> {
    objs.iter()
        .filter_map(|o| Some((ServiceKey::from_meta(o.meta())?, (**o).clone())))
        .collect()
}
