//! Answers for the served zones, computed from the [`Model`].
//!
//! `clusterset.local` follows the MCS DNS specification 1.0.0; `cluster.local` the
//! Kubernetes DNS specification, for local clusters. Both share the service/endpoint/SRV
//! logic through [`View`]; they differ in where VIPs and endpoints come from and in how an
//! endpoint is named (`<host>.<clusterid>.` under clusterset, `<host>.` under cluster.local).

use std::net::IpAddr;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::rdata::{A, AAAA, CNAME, NS, SOA, SRV, TXT};
use hickory_proto::rr::{LowerName, Name, RData, Record, RecordType};
use sluice_api::LogicalClusterPath;
use sluice_api::mcs::ServiceImportType;

use crate::model::{Endpoint, LocalService, Model, Port, ServiceKey, Slice};

/// The version the MCS DNS specification asks `dns-version.<zone>` to answer.
pub const SCHEMA_VERSION: &str = "1.0.0";

/// The zones this server is authoritative for and how it answers in them.
#[derive(Clone, Debug)]
pub struct Zones {
    /// `clusterset.local.` unless configured otherwise.
    pub clusterset: Name,
    /// `cluster.local.` for local clusters; `None` leaves it to the cluster's own DNS.
    pub cluster: Option<Name>,
    /// TTL of every positive answer, and the SOA minimum (negative caching).
    pub ttl: u32,
    /// The address `ns.<zone>` resolves to (this server).
    pub ns_addr: IpAddr,
    /// This cluster's id: its own endpoints come first in headless answers.
    pub local_cluster: String,
    clusterset_lower: LowerName,
    cluster_lower: Option<LowerName>,
}

impl Zones {
    pub fn new(clusterset: Name, cluster: Option<Name>, ttl: u32, ns_addr: IpAddr) -> Self {
        Self {
            clusterset_lower: LowerName::from(&clusterset),
            cluster_lower: cluster.as_ref().map(LowerName::from),
            clusterset,
            cluster,
            ttl,
            ns_addr,
            local_cluster: String::new(),
        }
    }
}

/// Which zone answered, for metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZoneKind {
    Clusterset,
    Cluster,
    /// An Ingress host (any name an Ingress of a logical cluster serves).
    Ingress,
}

impl ZoneKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ZoneKind::Clusterset => "clusterset",
            ZoneKind::Cluster => "cluster",
            ZoneKind::Ingress => "ingress",
        }
    }
}

/// A complete authoritative answer.
#[derive(Debug, Default)]
pub struct Answer {
    pub rcode: ResponseCode,
    pub answers: Vec<Record>,
    pub authority: Vec<Record>,
    pub additionals: Vec<Record>,
}

/// The answer for `name`/`qtype` asked from `src` if `name` is inside one of the zones;
/// `None` otherwise (the caller forwards).
pub fn resolve(
    model: &Model,
    zones: &Zones,
    name: &LowerName,
    qtype: RecordType,
    src: Option<IpAddr>,
) -> Option<(ZoneKind, Answer)> {
    let (clusterset, cluster) = (&zones.clusterset_lower, zones.cluster_lower.as_ref());
    if clusterset.zone_of(name) {
        let labels = relative_labels(name, clusterset);
        let ctx = Ctx::new(zones, &zones.clusterset, qtype, name);
        return Some((ZoneKind::Clusterset, ctx.clusterset(model, labels)));
    }
    let (Some(cluster), Some(zone)) = (cluster, zones.cluster.as_ref()) else {
        return None;
    };
    if cluster.zone_of(name) {
        let labels = relative_labels(name, cluster);
        let ctx = Ctx::new(zones, zone, qtype, name);
        let logical = src.and_then(|ip| model.logical_cluster_of(ip));
        return Some((ZoneKind::Cluster, ctx.cluster(model, labels, logical)));
    }
    None
}

/// The answer for an Ingress host outside the served zones: the addresses of the
/// clusters' ingresses that take clients (A or AAAA by family; other types: no data).
/// `None` when no Ingress names `name` (the caller forwards).
pub fn ingress(model: &Model, ttl: u32, name: &LowerName, qtype: RecordType) -> Option<Answer> {
    if !model.has_ingress_hosts() {
        return None;
    }
    let host = name.to_string();
    let host = host.trim_end_matches('.');
    if !model.is_ingress_host(host) {
        return None;
    }
    let owner = Name::from(name);
    let answers = model
        .ingress_addresses()
        .into_iter()
        .filter(|ip| family_matches(qtype, ip))
        .map(|ip| addr_record(&owner, ttl, ip))
        .collect();
    Some(Answer {
        answers,
        ..Answer::default()
    })
}

/// The labels of `name` left of `zone`, left to right; `None` if one is not UTF-8
/// (no such name exists here).
fn relative_labels<'n>(name: &'n LowerName, zone: &LowerName) -> Option<Vec<&'n str>> {
    let keep = usize::from(name.num_labels().saturating_sub(zone.num_labels()));
    name.iter()
        .take(keep)
        .map(|l| std::str::from_utf8(l).ok())
        .collect()
}

fn wants(qtype: RecordType, t: RecordType) -> bool {
    qtype == t || qtype == RecordType::ANY
}

/// An address record for `ip`.
fn addr_record(name: &Name, ttl: u32, ip: IpAddr) -> Record {
    let data = match ip {
        IpAddr::V4(v4) => RData::A(A(v4)),
        IpAddr::V6(v6) => RData::AAAA(AAAA(v6)),
    };
    Record::from_rdata(name.clone(), ttl, data)
}

fn family_matches(qtype: RecordType, ip: &IpAddr) -> bool {
    match qtype {
        RecordType::A => ip.is_ipv4(),
        RecordType::AAAA => ip.is_ipv6(),
        RecordType::ANY => true,
        _ => false,
    }
}

fn is_address(qtype: RecordType) -> bool {
    matches!(qtype, RecordType::A | RecordType::AAAA | RecordType::ANY)
}

/// A service as the shared answer logic sees it.
struct View<'a> {
    /// `<svc>.<ns>.svc.<zone>.`
    name: Name,
    kind: ViewKind<'a>,
    ports: &'a [Port],
    /// Ready endpoints with their owner label relative to `name` (`host.cluster` or `host`).
    ready: Vec<(String, &'a Endpoint, &'a [Port])>,
}

enum ViewKind<'a> {
    Vip(&'a [IpAddr]),
    Headless,
    External(&'a str),
}

struct Ctx<'z> {
    zones: &'z Zones,
    zone: &'z Name,
    qtype: RecordType,
    /// The query name.
    query: &'z LowerName,
}

impl<'z> Ctx<'z> {
    fn new(zones: &'z Zones, zone: &'z Name, qtype: RecordType, query: &'z LowerName) -> Self {
        Self {
            zones,
            zone,
            qtype,
            query,
        }
    }

    fn ttl(&self) -> u32 {
        self.zones.ttl
    }

    fn name(&self, relative: &str) -> Option<Name> {
        Name::from_ascii(relative)
            .ok()?
            .append_domain(self.zone)
            .ok()
    }

    fn soa(&self, serial: u32) -> Record {
        let mname = self.name("ns").unwrap_or_else(|| self.zone.clone());
        let rname = self.name("hostmaster").unwrap_or_else(|| self.zone.clone());
        let ttl = self.ttl();
        let soa = SOA::new(mname, rname, serial, 7200, 1800, 86400, ttl);
        Record::from_rdata(self.zone.clone(), ttl, RData::SOA(soa))
    }

    fn nxdomain(&self, serial: u32) -> Answer {
        Answer {
            rcode: ResponseCode::NXDomain,
            authority: vec![self.soa(serial)],
            ..Answer::default()
        }
    }

    /// The name exists but has no record of the asked type.
    fn nodata(&self, serial: u32) -> Answer {
        Answer {
            authority: vec![self.soa(serial)],
            ..Answer::default()
        }
    }

    fn records(&self, serial: u32, answers: Vec<Record>, additionals: Vec<Record>) -> Answer {
        if answers.is_empty() {
            return self.nodata(serial);
        }
        Answer {
            answers,
            additionals,
            ..Answer::default()
        }
    }

    /// The zone apex and `ns.<zone>`, the same in both zones.
    fn apex(&self, serial: u32) -> Answer {
        let mut answers = Vec::new();
        let mut additionals = Vec::new();
        if wants(self.qtype, RecordType::SOA) {
            answers.push(self.soa(serial));
        }
        if let Some(ns) = self.name("ns")
            && wants(self.qtype, RecordType::NS)
        {
            answers.push(Record::from_rdata(
                self.zone.clone(),
                self.ttl(),
                RData::NS(NS(ns.clone())),
            ));
            additionals.push(addr_record(&ns, self.ttl(), self.zones.ns_addr));
        }
        self.records(serial, answers, additionals)
    }

    fn ns_host(&self, serial: u32) -> Answer {
        let Some(ns) = self.name("ns") else {
            return self.nxdomain(serial);
        };
        let answers = if family_matches(self.qtype, &self.zones.ns_addr) {
            vec![addr_record(&ns, self.ttl(), self.zones.ns_addr)]
        } else {
            vec![]
        };
        self.records(serial, answers, vec![])
    }

    /// `clusterset.local`, relative labels left to right.
    fn clusterset(&self, model: &Model, labels: Option<Vec<&str>>) -> Answer {
        let serial = model.serial;
        let Some(labels) = labels else {
            return self.nxdomain(serial);
        };
        match labels.as_slice() {
            [] => self.apex(serial),
            ["ns"] => self.ns_host(serial),
            ["dns-version"] => {
                let answers = if wants(self.qtype, RecordType::TXT) {
                    let name = self
                        .name("dns-version")
                        .unwrap_or_else(|| self.zone.clone());
                    let txt = TXT::new(vec![SCHEMA_VERSION.to_string()]);
                    vec![Record::from_rdata(name, self.ttl(), RData::TXT(txt))]
                } else {
                    vec![]
                };
                self.records(serial, answers, vec![])
            }
            ["svc"] if model.imports_len() > 0 => self.nodata(serial),
            [ns, "svc"] if model.has_imports_in(ns) => self.nodata(serial),
            [rest @ .., svc, ns, "svc"] => {
                match self.import_view(model, &ServiceKey::new(ns, svc), rest.len(), true) {
                    Some(view) => self.in_service(serial, &view, rest, true),
                    None => self.nxdomain(serial),
                }
            }
            _ => self.nxdomain(serial),
        }
    }

    /// `cluster.local`, relative labels left to right. `logical`: the logical cluster of
    /// the pod that asks, when Sluice placed it; its own Services' names then answer as
    /// their clusterset names do (the VIP here, or the ready endpoints everywhere), so an
    /// app written for one cluster reaches a Service wherever it runs. Names that are no
    /// Service of its logical cluster answer as for any pod.
    fn cluster(
        &self,
        model: &Model,
        labels: Option<Vec<&str>>,
        logical: Option<&LogicalClusterPath>,
    ) -> Answer {
        let serial = model.serial;
        let Some(labels) = labels else {
            return self.nxdomain(serial);
        };
        if let Some(path) = logical
            && let [rest @ .., svc, ns, "svc"] = labels.as_slice()
            && let Some(down) = model.downstream_of(path, ns)
            && let Some(view) =
                self.import_view(model, &ServiceKey::new(down, svc), rest.len(), false)
        {
            return self.in_service(serial, &view, rest, false);
        }
        match labels.as_slice() {
            [] => self.apex(serial),
            ["ns"] => self.ns_host(serial),
            ["svc"] | ["pod"] | [_, "pod"] => self.nodata(serial),
            [ns, "svc"] if model.has_services_in(ns) => self.nodata(serial),
            [ns, "svc"]
                if logical
                    .and_then(|p| model.downstream_of(p, ns))
                    .is_some_and(|down| model.has_imports_in(down)) =>
            {
                self.nodata(serial)
            }
            [ip, ns, "pod"] => match ip.replace('-', ".").parse::<IpAddr>() {
                Ok(addr) if addr.is_ipv4() && model.has_pod(ns, addr) => {
                    let answers = if family_matches(self.qtype, &addr) {
                        let name = self.name(&format!("{ip}.{ns}.pod")).into_iter();
                        name.map(|n| addr_record(&n, self.ttl(), addr)).collect()
                    } else {
                        vec![]
                    };
                    self.records(serial, answers, vec![])
                }
                _ => self.nxdomain(serial),
            },
            [rest @ .., svc, ns, "svc"] => {
                match self.service_view(model, &ServiceKey::new(ns, svc), rest.len()) {
                    Some(view) => self.in_service(serial, &view, rest, false),
                    None => self.nxdomain(serial),
                }
            }
            _ => self.nxdomain(serial),
        }
    }

    /// `<svc>.<ns>.svc.<zone>.`: the query name without its `depth` leftmost labels.
    fn service_name(&self, depth: usize) -> Name {
        let labels = usize::from(self.query.num_labels()).saturating_sub(depth);
        Name::from(self.query).trim_to(labels)
    }

    fn ready<'a>(
        &self,
        slices: impl Iterator<Item = &'a Slice>,
        with_cluster: bool,
    ) -> Vec<(String, &'a Endpoint, &'a [Port])> {
        let mut out = Vec::new();
        let (local, remote): (Vec<&Slice>, Vec<&Slice>) =
            slices.partition(|s| s.cluster == self.zones.local_cluster);
        for slice in local.into_iter().chain(remote) {
            for ep in slice.endpoints.iter().filter(|e| e.ready) {
                let Some(host) = ep.label() else { continue };
                let label = if with_cluster {
                    format!("{host}.{}", slice.cluster)
                } else {
                    host
                };
                out.push((label, ep, slice.ports.as_slice()));
            }
        }
        out
    }

    /// An import's view; `with_cluster`: endpoints named `host.cluster` (clusterset.local),
    /// else `host` (a placed Pod's cluster.local name, as a StatefulSet's Pods are named
    /// in one cluster).
    fn import_view<'m>(
        &self,
        model: &'m Model,
        key: &ServiceKey,
        depth: usize,
        with_cluster: bool,
    ) -> Option<View<'m>> {
        let import = model.import(key)?;
        let (kind, ready) = match import.kind {
            ServiceImportType::ClusterSetIP => (ViewKind::Vip(&import.ips), Vec::new()),
            ServiceImportType::Headless => (
                ViewKind::Headless,
                self.ready(model.mcs_slices(key), with_cluster),
            ),
        };
        Some(View {
            name: self.service_name(depth),
            kind,
            ports: &import.ports,
            ready,
        })
    }

    fn service_view<'m>(
        &self,
        model: &'m Model,
        key: &ServiceKey,
        depth: usize,
    ) -> Option<View<'m>> {
        let (kind, ports): (ViewKind, &[Port]) = match model.service(key)? {
            LocalService::ClusterIp { ips, ports } => (ViewKind::Vip(ips), ports),
            LocalService::Headless { ports } => (ViewKind::Headless, ports),
            LocalService::ExternalName(n) => (ViewKind::External(n), &[]),
        };
        let ready = match kind {
            ViewKind::Headless => self.ready(model.local_slices(key), false),
            _ => Vec::new(),
        };
        Some(View {
            name: self.service_name(depth),
            kind,
            ports,
            ready,
        })
    }

    /// Names at or below a service: the service itself, SRV names, endpoint names and the
    /// empty non-terminals between them.
    fn in_service(&self, serial: u32, view: &View, rest: &[&str], mcs: bool) -> Answer {
        if let ViewKind::External(target) = &view.kind {
            if !rest.is_empty() {
                return self.nxdomain(serial);
            }
            let Ok(target) = Name::from_ascii(format!("{}.", target.trim_end_matches('.'))) else {
                return self.nodata(serial);
            };
            let cname =
                Record::from_rdata(view.name.clone(), self.ttl(), RData::CNAME(CNAME(target)));
            return self.records(serial, vec![cname], vec![]);
        }
        // A headless service with no ready endpoint does not exist (MCS DNS spec).
        if matches!(view.kind, ViewKind::Headless) && view.ready.is_empty() {
            return self.nxdomain(serial);
        }
        // Endpoint labels are `host.cluster` under clusterset, `host` under cluster.local.
        let endpoint_depth = if mcs { 2 } else { 1 };
        match rest {
            [] => self.service_records(serial, view),
            [port, proto] if port.starts_with('_') && proto.starts_with('_') => {
                self.srv_records(serial, view, Some((&port[1..], &proto[1..])))
            }
            [proto] if proto.starts_with('_') => {
                let exists = view
                    .ports
                    .iter()
                    .any(|p| p.name.is_some() && p.protocol == proto[1..]);
                if exists {
                    self.nodata(serial)
                } else {
                    self.nxdomain(serial)
                }
            }
            labels if labels.len() == endpoint_depth && matches!(view.kind, ViewKind::Headless) => {
                let wanted = labels.join(".");
                let matching: Vec<&Endpoint> = view
                    .ready
                    .iter()
                    .filter(|(l, _, _)| *l == wanted)
                    .map(|(_, e, _)| *e)
                    .collect();
                if matching.is_empty() {
                    return self.nxdomain(serial);
                }
                let Ok(name) = Name::from_ascii(&wanted).and_then(|n| n.append_domain(&view.name))
                else {
                    return self.nxdomain(serial);
                };
                let answers = matching
                    .iter()
                    .flat_map(|e| e.addresses.iter())
                    .filter(|ip| family_matches(self.qtype, ip))
                    .map(|ip| addr_record(&name, self.ttl(), *ip))
                    .collect();
                self.records(serial, answers, vec![])
            }
            // `<clusterid>.<svc>.<ns>.svc.<zone>` is reserved and never served; when
            // endpoints live below it, it is an empty non-terminal (RFC 8020: not NXDOMAIN).
            [cluster] if mcs && matches!(view.kind, ViewKind::Headless) => {
                let suffix = format!(".{cluster}");
                if view.ready.iter().any(|(l, _, _)| l.ends_with(&suffix)) {
                    self.nodata(serial)
                } else {
                    self.nxdomain(serial)
                }
            }
            _ => self.nxdomain(serial),
        }
    }

    /// `<svc>.<ns>.svc.<zone>`: the VIPs, or the ready endpoint addresses; SRV for every
    /// named port (the bare-name SRV query).
    fn service_records(&self, serial: u32, view: &View) -> Answer {
        if self.qtype == RecordType::SRV {
            return self.srv_records(serial, view, None);
        }
        if !is_address(self.qtype) {
            return self.nodata(serial);
        }
        let answers = match &view.kind {
            ViewKind::Vip(ips) => ips
                .iter()
                .filter(|ip| family_matches(self.qtype, ip))
                .map(|ip| addr_record(&view.name, self.ttl(), *ip))
                .collect(),
            _ => {
                // One record per address; the same subset for A and AAAA (all of them).
                let mut seen = Vec::new();
                for (_, ep, _) in &view.ready {
                    for ip in &ep.addresses {
                        if family_matches(self.qtype, ip) && !seen.contains(ip) {
                            seen.push(*ip);
                        }
                    }
                }
                seen.into_iter()
                    .map(|ip| addr_record(&view.name, self.ttl(), ip))
                    .collect()
            }
        };
        self.records(serial, answers, vec![])
    }

    /// SRV records for one named port (`Some((name, proto))`) or all named ports.
    fn srv_records(&self, serial: u32, view: &View, only: Option<(&str, &str)>) -> Answer {
        let ports: Vec<&Port> = view
            .ports
            .iter()
            .filter(|p| match (&p.name, only) {
                (None, _) => false,
                (Some(n), Some((name, proto))) => n == name && p.protocol == proto,
                (Some(_), None) => true,
            })
            .collect();
        if ports.is_empty() {
            return match only {
                Some(_) => self.nxdomain(serial),
                None => self.nodata(serial),
            };
        }
        if self.qtype != RecordType::SRV && self.qtype != RecordType::ANY {
            return self.nodata(serial);
        }
        let owner = |p: &Port| -> Option<Name> {
            let n = p.name.as_deref()?;
            match only {
                Some(_) => Name::from_ascii(format!("_{n}._{}", p.protocol))
                    .ok()?
                    .append_domain(&view.name)
                    .ok(),
                None => Some(view.name.clone()),
            }
        };
        let ttl = self.ttl();
        let mut answers: Vec<Record> = Vec::new();
        let mut additionals: Vec<Record> = Vec::new();
        let push = |answers: &mut Vec<Record>, r: Record| {
            if !answers.contains(&r) {
                answers.push(r);
            }
        };
        match &view.kind {
            ViewKind::Vip(ips) => {
                for p in &ports {
                    let Some(owner) = owner(p) else { continue };
                    let srv = SRV::new(0, 100, p.port, view.name.clone());
                    push(
                        &mut answers,
                        Record::from_rdata(owner, ttl, RData::SRV(srv)),
                    );
                }
                additionals.extend(ips.iter().map(|ip| addr_record(&view.name, ttl, *ip)));
            }
            _ => {
                let weight = u16::try_from(100 / view.ready.len().max(1))
                    .unwrap_or(1)
                    .max(1);
                for (label, ep, slice_ports) in &view.ready {
                    let Ok(target) =
                        Name::from_ascii(label).and_then(|n| n.append_domain(&view.name))
                    else {
                        continue;
                    };
                    for p in &ports {
                        let Some(owner) = owner(p) else { continue };
                        // The endpoint's own port of that name (a target port), if known.
                        let port = slice_ports
                            .iter()
                            .find(|sp| sp.name == p.name && sp.protocol == p.protocol)
                            .map_or(p.port, |sp| sp.port);
                        let srv = SRV::new(0, weight, port, target.clone());
                        push(
                            &mut answers,
                            Record::from_rdata(owner, ttl, RData::SRV(srv)),
                        );
                    }
                    for ip in &ep.addresses {
                        let r = addr_record(&target, ttl, *ip);
                        if !additionals.contains(&r) {
                            additionals.push(r);
                        }
                    }
                }
            }
        }
        self.records(serial, answers, additionals)
    }
}
