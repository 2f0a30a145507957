//! ClusterSetIP VIPs: one IPv4 address per ServiceImport in each importing cluster, from
//! that cluster's range `127.(60+index).0.0/16` (DESIGN.md, the local clusterset table).
//!
//! A VIP must stay the same for the import's whole life, since clients hold it (DNS
//! answers, open connections). The [`VipAllocator`] remembers what it handed out while the
//! controller runs; after a restart, [`crate::reconcile`] re-claims the VIPs found on the
//! observed ServiceImports before handing out new ones.
//!
//! Usable addresses are `127.(60+index).a.b` with `b` in 1..=254: every `.x.0` and `.x.255`
//! is skipped, so nothing looks like a network or broadcast address. Allocation starts at
//! `.0.1` and then continues round-robin after the last address handed out, so a VIP freed
//! a moment ago is not given to another service while clients may still hold it.

use std::collections::BTreeMap;
use std::fmt;
use std::net::Ipv4Addr;

use crate::model::{ClusterId, ServiceKey};

const FIRST_OCTET: u8 = 127;
const SECOND_OCTET_BASE: u8 = 60;
/// Host offsets within the /16.
const RANGE_SIZE: u32 = 1 << 16;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VipError {
    #[error("cluster index {index} has no VIP range (127.(60+index) must stay within 127.255)")]
    NoRange { index: u8 },
    #[error("VIP range {range} is exhausted")]
    Exhausted { range: VipRange },
}

/// One importing cluster's VIP range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VipRange {
    second_octet: u8,
}

impl VipRange {
    pub fn for_index(index: u8) -> Result<Self, VipError> {
        SECOND_OCTET_BASE
            .checked_add(index)
            .map(|second_octet| Self { second_octet })
            .ok_or(VipError::NoRange { index })
    }

    /// Whether `ip` is an address this range hands out.
    pub fn is_usable(&self, ip: Ipv4Addr) -> bool {
        let [a, b, _, d] = ip.octets();
        a == FIRST_OCTET && b == self.second_octet && d != 0 && d != 255
    }

    fn address(&self, offset: u32) -> Ipv4Addr {
        let [_, _, c, d] = offset.to_be_bytes();
        Ipv4Addr::new(FIRST_OCTET, self.second_octet, c, d)
    }
}

impl fmt::Display for VipRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{FIRST_OCTET}.{}.0.0/16", self.second_octet)
    }
}

/// The VIPs handed out, per importing cluster. Keep one for the controller's lifetime and
/// pass it to every [`crate::reconcile`].
#[derive(Clone, Debug, Default)]
pub struct VipAllocator {
    clusters: BTreeMap<ClusterId, ClusterVips>,
}

#[derive(Clone, Debug)]
pub(crate) struct ClusterVips {
    range: VipRange,
    by_service: BTreeMap<ServiceKey, Ipv4Addr>,
    by_ip: BTreeMap<Ipv4Addr, ServiceKey>,
    /// The next offset to try.
    cursor: u32,
}

impl VipAllocator {
    pub fn new() -> Self {
        Self::default()
    }

    /// The VIP `service` holds in `cluster`, if any.
    pub fn get(&self, cluster: &ClusterId, service: &ServiceKey) -> Option<Ipv4Addr> {
        self.clusters.get(cluster)?.by_service.get(service).copied()
    }

    /// How many VIPs are held in `cluster`.
    pub fn len(&self, cluster: &ClusterId) -> usize {
        self.clusters.get(cluster).map_or(0, |c| c.by_service.len())
    }

    pub fn is_empty(&self) -> bool {
        self.clusters.values().all(|c| c.by_service.is_empty())
    }

    /// The allocations of `cluster` in `range`. A cluster that changed index starts over:
    /// its old VIPs are not routable any more.
    pub(crate) fn cluster(&mut self, cluster: &ClusterId, range: VipRange) -> &mut ClusterVips {
        let entry = self
            .clusters
            .entry(cluster.clone())
            .or_insert_with(|| ClusterVips::new(range));
        if entry.range != range {
            *entry = ClusterVips::new(range);
        }
        entry
    }

    /// Frees every VIP of `cluster` whose service `keep` rejects.
    pub(crate) fn retain(&mut self, cluster: &ClusterId, keep: impl Fn(&ServiceKey) -> bool) {
        if let Some(c) = self.clusters.get_mut(cluster) {
            c.by_service.retain(|k, _| keep(k));
            c.by_ip.retain(|_, k| keep(k));
        }
    }

    /// Forgets clusters `keep` rejects (no longer members).
    pub(crate) fn retain_clusters(&mut self, keep: impl Fn(&ClusterId) -> bool) {
        self.clusters.retain(|id, _| keep(id));
    }
}

impl ClusterVips {
    fn new(range: VipRange) -> Self {
        Self {
            range,
            by_service: BTreeMap::new(),
            by_ip: BTreeMap::new(),
            cursor: 1,
        }
    }

    pub(crate) fn get(&self, service: &ServiceKey) -> Option<Ipv4Addr> {
        self.by_service.get(service).copied()
    }

    /// Takes `ip` for `service` if `service` holds none yet and `ip` is usable and free.
    pub(crate) fn claim(&mut self, service: &ServiceKey, ip: Ipv4Addr) -> bool {
        if self.by_service.contains_key(service)
            || !self.range.is_usable(ip)
            || self.by_ip.contains_key(&ip)
        {
            return false;
        }
        self.by_service.insert(service.clone(), ip);
        self.by_ip.insert(ip, service.clone());
        true
    }

    /// The VIP of `service`, allocating a free one if it has none.
    pub(crate) fn allocate(&mut self, service: &ServiceKey) -> Result<Ipv4Addr, VipError> {
        if let Some(ip) = self.get(service) {
            return Ok(ip);
        }
        for _ in 0..RANGE_SIZE {
            let ip = self.range.address(self.cursor);
            self.cursor = (self.cursor + 1) % RANGE_SIZE;
            if self.claim(service, ip) {
                return Ok(ip);
            }
        }
        Err(VipError::Exhausted { range: self.range })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ServiceKey {
        ServiceKey::new("shop", name)
    }

    #[test]
    fn ranges_follow_the_index() {
        let r = VipRange::for_index(2).unwrap();
        assert_eq!(r.to_string(), "127.62.0.0/16");
        assert!(r.is_usable("127.62.0.1".parse().unwrap()));
        assert!(!r.is_usable("127.62.1.0".parse().unwrap()));
        assert!(!r.is_usable("127.62.1.255".parse().unwrap()));
        assert!(!r.is_usable("127.61.0.1".parse().unwrap()));
        assert!(VipRange::for_index(195).is_ok());
        assert_eq!(
            VipRange::for_index(196),
            Err(VipError::NoRange { index: 196 })
        );
    }

    #[test]
    fn allocates_from_dot_one_and_skips_edges() {
        let mut a = VipAllocator::new();
        let id = ClusterId::new("east").unwrap();
        let c = a.cluster(&id, VipRange::for_index(0).unwrap());
        c.cursor = 254;
        let first = c.allocate(&key("a")).unwrap();
        let second = c.allocate(&key("b")).unwrap();
        assert_eq!(first, Ipv4Addr::new(127, 60, 0, 254));
        assert_eq!(
            second,
            Ipv4Addr::new(127, 60, 1, 1),
            "skips .0.255 and .1.0"
        );
        assert_eq!(c.allocate(&key("a")).unwrap(), first, "stable");
    }

    #[test]
    fn freed_vips_are_not_reused_at_once() {
        let mut a = VipAllocator::new();
        let id = ClusterId::new("east").unwrap();
        let range = VipRange::for_index(0).unwrap();
        let first = a.cluster(&id, range).allocate(&key("a")).unwrap();
        assert_eq!(first, Ipv4Addr::new(127, 60, 0, 1));
        a.retain(&id, |k| k != &key("a"));
        assert_eq!(a.get(&id, &key("a")), None);
        let next = a.cluster(&id, range).allocate(&key("b")).unwrap();
        assert_ne!(next, first);
    }

    #[test]
    fn claims_refuse_taken_or_foreign_addresses() {
        let mut a = VipAllocator::new();
        let id = ClusterId::new("east").unwrap();
        let c = a.cluster(&id, VipRange::for_index(1).unwrap());
        let ip = Ipv4Addr::new(127, 61, 3, 4);
        assert!(c.claim(&key("a"), ip));
        assert!(!c.claim(&key("b"), ip), "taken");
        assert!(
            !c.claim(&key("b"), Ipv4Addr::new(127, 60, 3, 4)),
            "other range"
        );
        assert!(
            !c.claim(&key("a"), Ipv4Addr::new(127, 61, 3, 5)),
            "already holds one"
        );
    }

    #[test]
    fn exhaustion_is_an_error() {
        let mut a = VipAllocator::new();
        let id = ClusterId::new("east").unwrap();
        let c = a.cluster(&id, VipRange::for_index(0).unwrap());
        let usable = 256 * 254;
        for i in 0..usable {
            c.allocate(&key(&format!("s{i}"))).unwrap();
        }
        assert!(matches!(
            c.allocate(&key("one-too-many")),
            Err(VipError::Exhausted { .. })
        ));
    }

    #[test]
    fn a_new_index_starts_over() {
        let mut a = VipAllocator::new();
        let id = ClusterId::new("east").unwrap();
        a.cluster(&id, VipRange::for_index(0).unwrap())
            .allocate(&key("a"))
            .unwrap();
        let c = a.cluster(&id, VipRange::for_index(1).unwrap());
        assert_eq!(c.get(&key("a")), None);
    }
}
