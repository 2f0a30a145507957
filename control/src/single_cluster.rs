//! Single-cluster mode: the API server of one local physical cluster. It allocates Service
//! ClusterIPs from a CIDR and releases them when Services go (the system namespaces and the
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

/// Which ClusterIPs are taken.
pub struct IpAllocator {
    cidr: Ipv4Cidr,
    used: Mutex<BTreeSet<u32>>,
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

fn invalid_ip(svc: &Value, ip: &str, detail: String) -> ApiError {
    ApiError::Invalid {
        gr: GroupResource {
            group: String::new(),
            resource: "services".into(),
        },
        kind: "Service".into(),
        name: svc["metadata"]["name"].as_str().unwrap_or("").to_string(),
        causes: vec![Cause::invalid("spec.clusterIPs", ip, detail)],
    }
}

impl IpAllocator {
    /// Start from the addresses stored Services hold.
    pub fn new(cidr: Ipv4Cidr, store: &Store) -> Self {
        let mut used = BTreeSet::new();
        store.scan(services().as_str(), None, |_, e| {
            if let Ok(v) = serde_json::from_slice::<Value>(&e.value) {
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
        }
    }

    pub fn cidr(&self) -> Ipv4Cidr {
        self.cidr
    }

    fn used(&self) -> std::sync::MutexGuard<'_, BTreeSet<u32>> {
        self.used.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Give a new Service its ClusterIP: the requested one if free, else the next free.
    pub fn assign(&self, svc: &mut Value) -> ApiResult<()> {
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

    /// Keep an updated Service's addresses: they cannot change.
    pub fn keep(&self, old: &Value, new: &mut Value) -> ApiResult<()> {
        for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            let requested = &new["spec"][field];
            if requested.is_null() || (requested.as_str() == Some("") && field == "clusterIP") {
                new["spec"][field] = old["spec"][field].clone();
            } else if *requested != old["spec"][field]
                && field.starts_with("clusterIP")
                && !old["spec"][field].is_null()
            {
                return Err(ApiError::Invalid {
                    gr: GroupResource {
                        group: String::new(),
                        resource: "services".into(),
                    },
                    kind: "Service".into(),
                    name: new["metadata"]["name"].as_str().unwrap_or("").to_string(),
                    causes: vec![Cause::invalid(
                        format!("spec.{field}"),
                        &requested.to_string(),
                        "field is immutable",
                    )],
                });
            }
        }
        Ok(())
    }

    /// Free the addresses of a Service that is gone (or was never stored).
    pub fn release(&self, svc: &Value) {
        let mut used = self.used();
        for ip in cluster_ips(svc) {
            used.remove(&u32::from(ip));
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
}
