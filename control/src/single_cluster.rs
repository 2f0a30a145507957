//! Single-cluster mode: the API server of one local physical cluster. It allocates Service
//! ClusterIPs from a CIDR and node ports (NodePort and LoadBalancer Services) from
//! 30000-32767, refusing a requested one that is taken or out of range as kube-apiserver
//! does, and releases both when Services go (the system namespaces and the
//! `default/kubernetes` Service come from [`crate::bootstrap`]).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::str::FromStr;
use std::sync::Mutex;

use serde_json::{Value, json};
use tokio::sync::watch;

use crate::errors::{ApiError, ApiResult, Cause, GroupResource};
use crate::storage::{EventType, ResourcePrefix, Store};

/// An IPv4 CIDR such as `127.40.0.0/16`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Cidr {
    base: u32,
    prefix: u8,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "invalid service CIDR {0:?}: expected an IPv4 network such as 10.96.0.0/16 (prefix 8 to 28)"
)]
pub struct CidrError(String);

impl FromStr for Ipv4Cidr {
    type Err = CidrError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || CidrError(s.to_string());
        let (ip, prefix) = s.split_once('/').ok_or_else(err)?;
        let ip: Ipv4Addr = ip.parse().map_err(|_| err())?;
        let prefix: u8 = prefix.parse().map_err(|_| err())?;
        if !(8..=28).contains(&prefix) {
            return Err(err());
        }
        let mask = u32::MAX << (32 - prefix);
        Ok(Self {
            base: u32::from(ip) & mask,
            prefix,
        })
    }
}

impl Ipv4Cidr {
    fn size(&self) -> u32 {
        1u32 << (32 - self.prefix)
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let v = u32::from(ip);
        v >= self.base && v < self.base + self.size()
    }

    /// The first usable address: the `kubernetes` Service's.
    pub fn first(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.base + 1)
    }
}

/// Which ClusterIPs and node ports are taken.
pub struct IpAllocator {
    cidr: Ipv4Cidr,
    used: Mutex<BTreeSet<u32>>,
    node_ports: Mutex<BTreeSet<u16>>,
}

/// kube-apiserver's default `--service-node-port-range`.
const NODE_PORTS: std::ops::RangeInclusive<u16> = 30000..=32767;

/// The node ports a Service holds.
fn node_ports(svc: &Value) -> Vec<u16> {
    svc["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| u16::try_from(p["nodePort"].as_u64()?).ok())
        .collect()
}

/// Whether a Service of this type gets node ports.
fn wants_node_ports(svc: &Value) -> bool {
    matches!(
        svc["spec"]["type"].as_str(),
        Some("NodePort" | "LoadBalancer")
    )
}

fn invalid_node_port(svc: &Value, i: usize, port: &Value, detail: String) -> ApiError {
    invalid_service(
        svc,
        Cause::invalid(
            format!("spec.ports[{i}].nodePort"),
            &port.to_string(),
            detail,
        ),
    )
}

fn services() -> ResourcePrefix {
    ResourcePrefix::new("", "services")
}

fn cluster_ips(svc: &Value) -> Vec<Ipv4Addr> {
    let mut out: Vec<Ipv4Addr> = svc["spec"]["clusterIPs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str()?.parse().ok())
        .collect();
    if let Some(ip) = svc["spec"]["clusterIP"]
        .as_str()
        .and_then(|s| s.parse().ok())
        && !out.contains(&ip)
    {
        out.push(ip);
    }
    out
}

/// A Service refused for `cause`: the one shape of every refusal here.
fn invalid_service(svc: &Value, cause: Cause) -> ApiError {
    ApiError::Invalid {
        gr: GroupResource {
            group: String::new(),
            resource: "services".into(),
        },
        kind: "Service".into(),
        name: svc["metadata"]["name"].as_str().unwrap_or("").to_string(),
        causes: vec![cause],
    }
}

fn invalid_ip(svc: &Value, ip: &str, detail: String) -> ApiError {
    invalid_service(svc, Cause::invalid("spec.clusterIPs", ip, detail))
}

impl IpAllocator {
    /// Start from the addresses stored Services hold.
    pub fn new(cidr: Ipv4Cidr, store: &Store) -> Self {
        let mut used = BTreeSet::new();
        let mut ports = BTreeSet::new();
        store.scan(services().as_str(), None, |_, e| {
            if let Ok(v) = serde_json::from_slice::<Value>(&e.value) {
                ports.extend(node_ports(&v));
                used.extend(
                    cluster_ips(&v)
                        .into_iter()
                        .filter(|ip| cidr.contains(*ip))
                        .map(u32::from),
                );
            }
            true
        });
        Self {
            cidr,
            used: Mutex::new(used),
            node_ports: Mutex::new(ports),
        }
    }

    pub fn cidr(&self) -> Ipv4Cidr {
        self.cidr
    }

    fn used(&self) -> std::sync::MutexGuard<'_, BTreeSet<u32>> {
        self.used.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn taken_ports(&self) -> std::sync::MutexGuard<'_, BTreeSet<u16>> {
        self.node_ports.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Give the ports of a NodePort or LoadBalancer Service their node ports: the requested
    /// one if free and in range, else the next free; `held` ports are the Service's already.
    fn assign_node_ports(&self, svc: &mut Value, held: &[u16]) -> ApiResult<()> {
        if !wants_node_ports(svc) {
            return Ok(());
        }
        let mut taken = self.taken_ports();
        let mut claimed: Vec<u16> = Vec::new();
        let snapshot = svc.clone();
        let result = (|| {
            let Some(ports) = svc["spec"]["ports"].as_array_mut() else {
                return Ok(());
            };
            for (i, port) in ports.iter_mut().enumerate() {
                match &port["nodePort"] {
                    Value::Null => {
                        let free =
                            NODE_PORTS
                                .clone()
                                .find(|p| !taken.contains(p))
                                .ok_or_else(|| {
                                    ApiError::Internal(
                                        "failed to allocate a nodePort: range is full".into(),
                                    )
                                })?;
                        taken.insert(free);
                        claimed.push(free);
                        port["nodePort"] = json!(free);
                    }
                    requested => {
                        let n = requested
                            .as_u64()
                            .and_then(|n| u16::try_from(n).ok())
                            .filter(|n| NODE_PORTS.contains(n))
                            .ok_or_else(|| {
                                invalid_node_port(&snapshot, i, requested, format!(
                                    "provided port is not in the valid range. The range of valid ports is {}-{}",
                                    NODE_PORTS.start(), NODE_PORTS.end()
                                ))
                            })?;
                        if held.contains(&n) || claimed.contains(&n) {
                            continue;
                        }
                        if !taken.insert(n) {
                            return Err(invalid_node_port(
                                &snapshot,
                                i,
                                requested,
                                "provided port is already allocated".into(),
                            ));
                        }
                        claimed.push(n);
                    }
                }
            }
            Ok(())
        })();
        if result.is_err() {
            for p in claimed {
                taken.remove(&p);
            }
        }
        result
    }

    /// Give a new Service its ClusterIP (the requested one if free, else the next free) and
    /// its node ports.
    pub fn assign(&self, svc: &mut Value) -> ApiResult<()> {
        self.assign_node_ports(svc, &[])?;
        if let Err(e) = self.assign_cluster_ip(svc) {
            let mut taken = self.taken_ports();
            for p in node_ports(svc) {
                taken.remove(&p);
            }
            return Err(e);
        }
        Ok(())
    }

    fn assign_cluster_ip(&self, svc: &mut Value) -> ApiResult<()> {
        let ty = svc["spec"]["type"].as_str().unwrap_or("ClusterIP");
        if ty == "ExternalName" {
            return Ok(());
        }
        if svc["spec"]["clusterIP"] == "None" {
            svc["spec"]["clusterIPs"] = json!(["None"]);
            return Ok(());
        }
        let requested = svc["spec"]["clusterIP"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        let mut used = self.used();
        let ip = match requested {
            Some(r) => {
                let ip: Ipv4Addr = r
                    .parse()
                    .map_err(|_| invalid_ip(svc, &r, "must be a valid IP address".into()))?;
                if !self.cidr.contains(ip) {
                    return Err(invalid_ip(
                        svc,
                        &r,
                        "the provided IP is not in the valid range of the service CIDR".into(),
                    ));
                }
                if !used.insert(u32::from(ip)) {
                    return Err(invalid_ip(
                        svc,
                        &r,
                        format!("failed to allocate IP {r}: provided IP is already allocated"),
                    ));
                }
                ip
            }
            None => {
                let start = self.cidr.base + 2;
                let end = self.cidr.base + self.cidr.size() - 1;
                let free = (start..end).find(|v| !used.contains(v)).ok_or_else(|| {
                    ApiError::Internal("failed to allocate a serviceIP: range is full".into())
                })?;
                used.insert(free);
                Ipv4Addr::from(free)
            }
        };
        svc["spec"]["clusterIP"] = json!(ip.to_string());
        svc["spec"]["clusterIPs"] = json!([ip.to_string()]);
        svc["spec"]["ipFamilies"] = json!(["IPv4"]);
        svc["spec"]["ipFamilyPolicy"] = json!("SingleStack");
        Ok(())
    }

    /// Keep an updated Service's addresses (they cannot change) and its node ports (a port
    /// that names none keeps the one its (port, protocol) had; new ones are allocated).
    pub fn keep(&self, old: &Value, new: &mut Value) -> ApiResult<()> {
        if wants_node_ports(new)
            && let Some(ports) = new["spec"]["ports"].as_array_mut()
        {
            for port in ports.iter_mut().filter(|p| p["nodePort"].is_null()) {
                let had = old["spec"]["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|o| {
                        o["port"] == port["port"]
                            && o["protocol"].as_str().unwrap_or("TCP")
                                == port["protocol"].as_str().unwrap_or("TCP")
                    });
                if let Some(n) = had.map(|o| o["nodePort"].clone()).filter(|n| !n.is_null()) {
                    port["nodePort"] = n;
                }
            }
        }
        self.assign_node_ports(new, &node_ports(old))?;
        for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            let requested = &new["spec"][field];
            if requested.is_null() || (requested.as_str() == Some("") && field == "clusterIP") {
                new["spec"][field] = old["spec"][field].clone();
            } else if *requested != old["spec"][field]
                && field.starts_with("clusterIP")
                && !old["spec"][field].is_null()
            {
                return Err(invalid_service(
                    new,
                    Cause::invalid(
                        format!("spec.{field}"),
                        &requested.to_string(),
                        "field is immutable",
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Free the addresses and node ports of a Service that is gone (or was never stored).
    pub fn release(&self, svc: &Value) {
        let mut used = self.used();
        for ip in cluster_ips(svc) {
            used.remove(&u32::from(ip));
        }
        let mut taken = self.taken_ports();
        for p in node_ports(svc) {
            taken.remove(&p);
        }
    }

    pub fn in_use(&self) -> usize {
        self.used().len()
    }
}

/// Release addresses as Services are deleted, whoever deleted them.
pub async fn run_releaser(
    store: Store,
    allocator: std::sync::Arc<IpAllocator>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let from = store.revision();
        let Ok(mut sub) = store.watch(&services(), from) else {
            return;
        };
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                e = sub.next() => match e {
                    Ok(e) if e.kind == EventType::Deleted => {
                        if let Ok(v) = serde_json::from_slice::<Value>(&e.value) {
                            allocator.release(&v);
                        }
                    }
                    Ok(_) => {}
                    Err(_) => break,
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_and_allocation() {
        let cidr: Ipv4Cidr = "127.40.0.0/16".parse().unwrap();
        assert_eq!(cidr.first(), Ipv4Addr::new(127, 40, 0, 1));
        assert!(cidr.contains(Ipv4Addr::new(127, 40, 255, 254)));
        assert!(!cidr.contains(Ipv4Addr::new(127, 41, 0, 1)));
        assert!("127.40.0.0".parse::<Ipv4Cidr>().is_err());
        assert!("::1/64".parse::<Ipv4Cidr>().is_err());
        let alloc = IpAllocator {
            cidr,
            used: Mutex::new(BTreeSet::from([u32::from(cidr.first())])),
            node_ports: Mutex::default(),
        };
        let mut a = json!({"metadata": {"name": "a"}, "spec": {"type": "ClusterIP"}});
        alloc.assign(&mut a).unwrap();
        assert_eq!(a["spec"]["clusterIP"], "127.40.0.2");
        let mut b = json!({"metadata": {"name": "b"}, "spec": {"clusterIP": "127.40.0.2"}});
        assert!(matches!(
            alloc.assign(&mut b),
            Err(ApiError::Invalid { .. })
        ));
        let mut outside = json!({"metadata": {"name": "c"}, "spec": {"clusterIP": "10.0.0.1"}});
        assert!(alloc.assign(&mut outside).is_err());
        let mut headless = json!({"metadata": {"name": "h"}, "spec": {"clusterIP": "None"}});
        alloc.assign(&mut headless).unwrap();
        assert_eq!(headless["spec"]["clusterIPs"], json!(["None"]));
        alloc.release(&a);
        let mut again = json!({"metadata": {"name": "d"}, "spec": {}});
        alloc.assign(&mut again).unwrap();
        assert_eq!(
            again["spec"]["clusterIP"], "127.40.0.2",
            "released addresses are reused"
        );
        let mut changed = again.clone();
        changed["spec"]["clusterIP"] = json!("127.40.0.9");
        assert!(alloc.keep(&again, &mut changed).is_err());
        let mut unset = again.clone();
        unset["spec"].as_object_mut().unwrap().remove("clusterIP");
        alloc.keep(&again, &mut unset).unwrap();
        assert_eq!(unset["spec"]["clusterIP"], "127.40.0.2");
    }

    #[test]
    fn node_ports_are_allocated_kept_refused_and_released() {
        let alloc = IpAllocator {
            cidr: "127.40.0.0/16".parse().unwrap(),
            used: Mutex::default(),
            node_ports: Mutex::default(),
        };
        let svc = |name: &str, ports: Value| json!({"metadata": {"name": name}, "spec": {"type": "NodePort", "ports": ports}});
        let mut a = svc("a", json!([{"port": 80}, {"port": 81, "nodePort": 30080}]));
        alloc.assign(&mut a).unwrap();
        assert_eq!(a["spec"]["ports"][0]["nodePort"], 30000);
        assert_eq!(a["spec"]["ports"][1]["nodePort"], 30080);
        let mut b = svc("b", json!([{"port": 80, "nodePort": 30080}]));
        let Err(ApiError::Invalid { causes, .. }) = alloc.assign(&mut b) else {
            panic!("a taken node port is refused");
        };
        assert!(
            causes[0]
                .message
                .contains("provided port is already allocated")
        );
        assert_eq!(causes[0].field, "spec.ports[0].nodePort");
        let mut c = svc("c", json!([{"port": 80, "nodePort": 80}]));
        assert!(alloc.assign(&mut c).is_err(), "out of range");
        assert_eq!(alloc.in_use(), 1, "a refused Service holds no address");
        // An update that names no node port keeps the old ones; a new port gets one.
        let mut updated = svc("a", json!([{"port": 80}, {"port": 81}, {"port": 82}]));
        alloc.keep(&a, &mut updated).unwrap();
        assert_eq!(updated["spec"]["ports"][0]["nodePort"], 30000);
        assert_eq!(updated["spec"]["ports"][1]["nodePort"], 30080);
        assert_eq!(updated["spec"]["ports"][2]["nodePort"], 30001);
        alloc.release(&updated);
        alloc.assign(&mut b).unwrap();
        assert_eq!(
            b["spec"]["ports"][0]["nodePort"], 30080,
            "released ports are free"
        );
        let mut cluster_ip = json!({"metadata": {"name": "d"}, "spec": {"ports": [{"port": 80}]}});
        alloc.assign(&mut cluster_ip).unwrap();
        assert!(cluster_ip["spec"]["ports"][0]["nodePort"].is_null());
    }
}
