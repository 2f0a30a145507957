//! One reconcile of the whole clusterset: snapshots in, the desired MCS objects of every
//! member cluster out.
//!
//! The steps: admit members (drop duplicate cluster ids), collect every alive member's
//! exports, merge each service's valid exports (oldest wins), then give every alive member
//! whose namespace exists a ServiceImport and the MCS EndpointSlices of every source, and
//! finally VIPs and conditions. Dead members neither export nor import: their endpoints
//! disappear everywhere, and the controller cannot write to them anyway.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::time::{SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use sluice_api::mcs::{
    ClusterStatus, LABEL_MANAGED_BY, MANAGED_BY, ServiceExportStatus, ServiceImport,
    ServiceImportStatus, ServiceImportType,
};
use sluice_api::sluice::ImportVips;

use crate::conditions;
use crate::derived;
use crate::export::{self, Export, Source};
use crate::merge::{self, Merged};
use crate::meta::LABEL_KUBE_SERVICE_NAME;
use crate::model::{ClusterId, ClusterName, MemberSnapshot, Scope, ServiceKey, SliceKey};
use crate::slices;
use crate::vip::{VipAllocator, VipError, VipRange};

/// A problem with one member cluster, to be reported on its `Cluster` object.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    #[error(
        "cluster {excluded} has cluster id {id}, which cluster {kept} already has; \
         {excluded} is left out of the clusterset until the ids differ"
    )]
    DuplicateClusterId {
        id: ClusterId,
        kept: ClusterName,
        excluded: ClusterName,
    },
    #[error("cluster {name} is listed more than once; only its first snapshot is used")]
    DuplicateClusterName { name: ClusterName },
    #[error("cluster {cluster}: {unassigned} ClusterSetIP import(s) have no VIP: {source}")]
    Vips {
        cluster: ClusterName,
        unassigned: usize,
        #[source]
        source: VipError,
    },
}

impl ClusterError {
    /// The `Cluster` object the error belongs on.
    pub fn cluster(&self) -> &ClusterName {
        match self {
            Self::DuplicateClusterId { excluded, .. } => excluded,
            Self::DuplicateClusterName { name } => name,
            Self::Vips { cluster, .. } => cluster,
        }
    }
}

/// What every member cluster should hold.
#[derive(Clone, Debug, Default)]
pub struct Desired {
    /// One entry per alive, admitted member. A member without an entry (dead, or left out
    /// for a duplicate id) must be left as it is: nothing in it is known to be stale.
    pub clusters: BTreeMap<ClusterName, ClusterDesired>,
    pub errors: Vec<ClusterError>,
}

impl Desired {
    pub fn cluster(&self, name: &ClusterName) -> Option<&ClusterDesired> {
        self.clusters.get(name)
    }

    /// The errors to report on `name`'s `Cluster` object.
    pub fn errors_of<'a>(
        &'a self,
        name: &'a ClusterName,
    ) -> impl Iterator<Item = &'a ClusterError> + 'a {
        self.errors.iter().filter(move |e| e.cluster() == name)
    }
}

/// The MCS objects one member cluster should hold.
#[derive(Clone, Debug)]
pub struct ClusterDesired {
    pub cluster: ClusterId,
    /// The services this desired state speaks for; other services are left as they are.
    pub scope: Scope,
    /// Spec and status; metadata carries name, namespace, labels and annotations only.
    pub imports: BTreeMap<ServiceKey, ServiceImport>,
    pub slices: BTreeMap<SliceKey, EndpointSlice>,
    /// Derived Services ([`crate::derived`]) by their own key; only in a cluster whose
    /// imports get their VIPs that way.
    pub services: BTreeMap<ServiceKey, Service>,
    /// The status of every explicit ServiceExport in this cluster.
    pub export_statuses: BTreeMap<ServiceKey, ServiceExportStatus>,
}

impl ClusterDesired {
    fn new(cluster: ClusterId, scope: Scope) -> Self {
        Self {
            cluster,
            scope,
            imports: BTreeMap::new(),
            slices: BTreeMap::new(),
            services: BTreeMap::new(),
            export_statuses: BTreeMap::new(),
        }
    }

    pub fn import_keys(&self) -> impl Iterator<Item = &ServiceKey> {
        self.imports.keys()
    }

    pub fn slice_keys(&self) -> impl Iterator<Item = &SliceKey> {
        self.slices.keys()
    }

    /// The observed ServiceImports to delete: Sluice's (see [`is_managed`]), in scope and
    /// not desired.
    pub fn stale_imports<'o>(
        &self,
        observed: impl IntoIterator<Item = &'o ServiceImport>,
    ) -> Vec<ServiceKey> {
        observed
            .into_iter()
            .filter(|i| is_managed(&i.metadata))
            .filter_map(|i| ServiceKey::from_meta(&i.metadata))
            .filter(|k| self.scope.contains(k) && !self.imports.contains_key(k))
            .collect()
    }

    /// The observed EndpointSlices to delete: Sluice's MCS slices of services in scope that
    /// are not desired. Slices of other controllers (the Service's own ones included) are
    /// never returned.
    pub fn stale_slices<'o>(
        &self,
        observed: impl IntoIterator<Item = &'o EndpointSlice>,
    ) -> Vec<SliceKey> {
        observed
            .into_iter()
            .filter(|s| is_managed(&s.metadata))
            .filter(|s| mcs_service(&s.metadata).is_none_or(|k| self.scope.contains(&k)))
            .filter_map(|s| SliceKey::from_meta(&s.metadata))
            .filter(|k| !self.slices.contains_key(k))
            .collect()
    }

    /// The observed derived Services to delete: Sluice's, of services in scope, not
    /// desired (the import went, turned Headless, or the cluster stopped using them).
    pub fn stale_services<'o>(
        &self,
        observed: impl IntoIterator<Item = &'o Service>,
    ) -> Vec<ServiceKey> {
        observed
            .into_iter()
            .filter(|s| is_managed(&s.metadata))
            .filter(|s| mcs_service(&s.metadata).is_none_or(|k| self.scope.contains(&k)))
            .filter_map(|s| ServiceKey::from_meta(&s.metadata))
            .filter(|k| !self.services.contains_key(k))
            .collect()
    }
}

pub use sluice_api::mcs::{is_managed, mcs_service, slice_service};

/// [`reconcile_scoped`] at the current time.
pub fn reconcile(members: &[MemberSnapshot], vips: &mut VipAllocator, scope: &Scope) -> Desired {
    reconcile_scoped(members, vips, &now(), scope)
}

/// The current time in whole seconds, the precision `metav1.Time` keeps on the wire, so a
/// condition read back compares equal to the one written.
fn now() -> Time {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let ts = i64::try_from(secs)
        .ok()
        .and_then(|s| Timestamp::from_second(s).ok())
        .unwrap_or(Timestamp::UNIX_EPOCH);
    Time(ts)
}

/// The desired state of every member. `now` stamps conditions whose status changes.
/// `vips` is updated: new imports get VIPs, VIPs of imports that went are freed.
pub fn reconcile_at(members: &[MemberSnapshot], vips: &mut VipAllocator, now: &Time) -> Desired {
    reconcile_scoped(members, vips, now, &Scope::All)
}

/// [`reconcile_at`] for the services of `scope` only: the snapshots hold those services'
/// objects (and may hold others, which are ignored), and the desired state speaks for
/// them alone — VIPs of services outside the scope stay held, their objects stay put.
pub fn reconcile_scoped(
    members: &[MemberSnapshot],
    vips: &mut VipAllocator,
    now: &Time,
    scope: &Scope,
) -> Desired {
    let mut errors = Vec::new();
    let admitted = admit(members, &mut errors);
    let alive: Vec<&MemberSnapshot> = admitted.iter().copied().filter(|m| m.alive).collect();
    let mut clusters: BTreeMap<ClusterName, ClusterDesired> = alive
        .iter()
        .map(|m| {
            let desired = ClusterDesired::new(m.cluster.clone(), scope.clone());
            (m.name.clone(), desired)
        })
        .collect();

    let mut by_service: BTreeMap<&ServiceKey, Vec<Export<'_>>> = BTreeMap::new();
    for member in &alive {
        for e in export::exports(member)
            .into_iter()
            .filter(|e| scope.contains(e.key))
        {
            by_service.entry(e.key).or_default().push(e);
        }
    }

    for (key, exports) in &by_service {
        let mut sources: Vec<Source<'_>> = exports.iter().filter_map(Export::source).collect();
        sources.sort_by(|a, b| a.export.age_cmp(&b.export));
        let merged = merge::merge(&sources, incumbent_type(&alive, key));

        for e in exports.iter().filter(|e| e.object.is_some()) {
            if let Some(c) = clusters.get_mut(&e.member.name) {
                let status = conditions::export_status(e, merged.as_ref(), now);
                c.export_statuses.insert((*key).clone(), status);
            }
        }

        let Some(merged) = merged else { continue };
        let mcs_slices: Vec<EndpointSlice> = sources
            .iter()
            .flat_map(|s| {
                let ports = merged.ports.get(s.cluster()).map_or(&[][..], Vec::as_slice);
                slices::build(s, ports)
            })
            .collect();
        let import = import(key, &merged);
        for member in alive.iter().filter(|m| m.namespace_usable(&key.namespace)) {
            let Some(c) = clusters.get_mut(&member.name) else {
                continue;
            };
            c.imports.insert((*key).clone(), import.clone());
            // kube-proxy finds a derived Service's endpoints by the usual label.
            let derived = (member.import_vips == ImportVips::DerivedService
                && import.spec.r#type == ServiceImportType::ClusterSetIP)
                .then(|| derived::derived_name(key));
            for slice in &mcs_slices {
                if let Some(slice_key) = SliceKey::from_meta(&slice.metadata) {
                    let mut slice = slice.clone();
                    if let Some(name) = &derived {
                        slice
                            .metadata
                            .labels
                            .get_or_insert_default()
                            .insert(LABEL_KUBE_SERVICE_NAME.to_string(), name.clone());
                    }
                    c.slices.insert(slice_key, slice);
                }
            }
        }
    }

    for member in &alive {
        if let Some(c) = clusters.get_mut(&member.name)
            && let Some(e) = assign_vips(member, c, vips, now)
        {
            errors.push(e);
        }
    }
    // Members that left the clusterset free their VIPs; dead ones keep them, in case they
    // come back before their imports are observed again.
    let members_ids: BTreeSet<&ClusterId> = admitted.iter().map(|m| &m.cluster).collect();
    vips.retain_clusters(|id| members_ids.contains(id));

    Desired { clusters, errors }
}

/// Members sorted by name; a member whose name or cluster id an earlier one has is left out.
fn admit<'a>(
    members: &'a [MemberSnapshot],
    errors: &mut Vec<ClusterError>,
) -> Vec<&'a MemberSnapshot> {
    let mut ordered: Vec<&MemberSnapshot> = members.iter().collect();
    ordered.sort_by(|a, b| a.name.cmp(&b.name));
    let mut names: BTreeSet<&ClusterName> = BTreeSet::new();
    let mut ids: BTreeMap<&ClusterId, &ClusterName> = BTreeMap::new();
    let mut admitted = Vec::with_capacity(ordered.len());
    for m in ordered {
        if !names.insert(&m.name) {
            errors.push(ClusterError::DuplicateClusterName {
                name: m.name.clone(),
            });
            continue;
        }
        if let Some(kept) = ids.get(&m.cluster) {
            errors.push(ClusterError::DuplicateClusterId {
                id: m.cluster.clone(),
                kept: (*kept).clone(),
                excluded: m.name.clone(),
            });
            continue;
        }
        ids.insert(&m.cluster, &m.name);
        admitted.push(m);
    }
    admitted
}

/// The type the service's existing ServiceImports have, if they agree.
fn incumbent_type(alive: &[&MemberSnapshot], key: &ServiceKey) -> Option<ServiceImportType> {
    let mut types = alive
        .iter()
        .filter_map(|m| m.imports.get(key))
        .map(|i| i.spec.r#type);
    let first = types.next()?;
    types.all(|t| t == first).then_some(first)
}

/// The ServiceImport of a merged service, before its VIP and conditions.
fn import(key: &ServiceKey, merged: &Merged<'_>) -> ServiceImport {
    let mut labels = merged.labels.clone();
    labels.insert(LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string());
    ServiceImport {
        metadata: ObjectMeta {
            name: Some(key.name.clone()),
            namespace: Some(key.namespace.clone()),
            labels: Some(labels),
            annotations: (!merged.annotations.is_empty()).then(|| merged.annotations.clone()),
            ..Default::default()
        },
        spec: merged.spec.clone(),
        status: Some(ServiceImportStatus {
            clusters: merged
                .clusters
                .iter()
                .map(|c| ClusterStatus {
                    cluster: c.to_string(),
                })
                .collect(),
            conditions: Vec::new(),
        }),
    }
}

/// Gives `member`'s ClusterSetIP imports their VIPs and every import its conditions, then
/// frees the VIPs of imports that went. Returns the VIP problem of this member, if any.
fn assign_vips(
    member: &MemberSnapshot,
    desired: &mut ClusterDesired,
    vips: &mut VipAllocator,
    now: &Time,
) -> Option<ClusterError> {
    let mut failure: Option<(VipError, usize)> = None;
    match VipRange::for_index(member.index) {
        // The cluster's own API server allocates them: nothing held here is used.
        _ if member.import_vips == ImportVips::DerivedService => {
            derived_vips(member, desired);
            vips.retain(&member.cluster, |_| false);
        }
        Err(e) => {
            let unassigned = desired
                .imports
                .values()
                .filter(|i| i.spec.r#type == ServiceImportType::ClusterSetIP)
                .count();
            failure = Some((e, unassigned));
        }
        Ok(range) => {
            let held = vips.cluster(&member.cluster, range);
            // First re-claim the VIPs the imports already carry (a restarted controller
            // starts empty), so no new allocation can take one of them.
            for (key, import) in &desired.imports {
                if import.spec.r#type == ServiceImportType::ClusterSetIP
                    && held.get(key).is_none()
                    && let Some(ip) = observed_vip(member, key)
                {
                    held.claim(key, ip);
                }
            }
            for (key, import) in desired.imports.iter_mut() {
                if import.spec.r#type != ServiceImportType::ClusterSetIP {
                    continue;
                }
                match held.allocate(key) {
                    Ok(ip) => {
                        import.spec.ips = vec![ip.to_string()];
                        import.spec.ip_families = vec!["IPv4".to_string()];
                    }
                    Err(e) => {
                        import.spec.ip_families = Vec::new();
                        let count = failure.as_ref().map_or(0, |(_, n)| *n);
                        failure = Some((e, count + 1));
                    }
                }
            }
        }
    }

    for (key, import) in desired.imports.iter_mut() {
        let previous = member
            .imports
            .get(key)
            .and_then(|i| i.status.as_ref())
            .map_or(&[][..], |s| s.conditions.as_slice());
        let no_vip =
            import.spec.r#type == ServiceImportType::ClusterSetIP && import.spec.ips.is_empty();
        let vip_error = failure.as_ref().map(|(e, _)| e).filter(|_| no_vip);
        if let Some(status) = import.status.as_mut() {
            status.conditions =
                conditions::import_conditions(previous, status.clusters.len(), vip_error, now);
        }
    }

    // A Headless import keeps a VIP it held: should it turn ClusterSetIP again, clients
    // get the address they knew.
    vips.retain(&member.cluster, |k| {
        desired.imports.contains_key(k) || !desired.scope.contains(k)
    });

    failure.map(|(source, unassigned)| ClusterError::Vips {
        cluster: member.name.clone(),
        unassigned,
        source,
    })
}

/// Gives `member`'s ClusterSetIP imports a derived Service each, and each import the
/// addresses its derived Service was given (none until the Service is created and the
/// next round sees it).
fn derived_vips(member: &MemberSnapshot, desired: &mut ClusterDesired) {
    for (key, import) in desired.imports.iter_mut() {
        if import.spec.r#type != ServiceImportType::ClusterSetIP {
            continue;
        }
        let service = derived::service(key, import);
        let service_key = derived::derived_key(key);
        let (ips, families) = member
            .services
            .get(&service_key)
            .filter(|s| is_managed(&s.metadata))
            .map(derived::allocated)
            .unwrap_or_default();
        import.spec.ips = ips;
        import.spec.ip_families = families;
        import.metadata.annotations.get_or_insert_default().insert(
            derived::ANNOTATION_DERIVED_SERVICE.to_string(),
            service_key.name.clone(),
        );
        desired.services.insert(service_key, service);
    }
}

/// The IPv4 VIP the member's observed ServiceImport carries, if any.
fn observed_vip(member: &MemberSnapshot, key: &ServiceKey) -> Option<Ipv4Addr> {
    member
        .imports
        .get(key)?
        .spec
        .ips
        .iter()
        .find_map(|ip| ip.parse().ok())
}
