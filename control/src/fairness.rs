//! Fairness between tenants, after API Priority and Fairness: requests of the system's
//! own parts (administrators, syncers, the clusterset's components, the server's
//! controllers) are never queued behind tenants; tenants' requests share a pool of
//! concurrent slots, each logical cluster at most its own share of it, so one tenant
//! flooding the server waits in its own queue — and past a short wait is told 429 with
//! `Retry-After` — while the others and the system keep being served. Long-running
//! requests (watches, followed logs) hold no slot: they cost a connection, not a worker.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How many of a kind of request may run at once, and how long one may wait for a slot.
#[derive(Clone, Debug)]
pub struct FairnessLimits {
    /// Off (kube-apiserver's `--enable-priority-and-fairness=false`): every request runs
    /// at once, whoever sends it — for benchmarks that compare, and for a server with one
    /// trusted tenant.
    pub enabled: bool,
    /// Tenants' requests running at once, in all.
    pub tenant_slots: usize,
    /// One logical cluster's share of them.
    pub slots_per_cluster: usize,
    /// How long a request waits for a slot before it is refused with 429.
    pub queue_wait: Duration,
}

impl Default for FairnessLimits {
    fn default() -> Self {
        Self {
            enabled: true,
            tenant_slots: 256,
            slots_per_cluster: 32,
            queue_wait: Duration::from_secs(4),
        }
    }
}

/// Who a request is for the purpose of fairness.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Flow {
    /// The system's own parts: not limited here.
    System,
    /// A tenant's request in a logical cluster (its path is the flow).
    Tenant(String),
}

/// Why a request was not let in.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[error("Too many requests, please try again later.")]
pub struct TooManyRequests {
    /// What `Retry-After` says, in seconds.
    pub retry_after_seconds: u64,
}

/// The slots a request holds while it runs.
pub struct Admitted {
    _cluster: Option<OwnedSemaphorePermit>,
    _pool: Option<OwnedSemaphorePermit>,
}

/// The queues of tenants' requests.
pub struct Fairness {
    limits: FairnessLimits,
    pool: Arc<Semaphore>,
    per_cluster: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// Entries kept for clusters whose slots are all free, before they are swept.
const IDLE_ENTRIES: usize = 4096;

impl Fairness {
    pub fn new(limits: FairnessLimits) -> Self {
        Self {
            pool: Arc::new(Semaphore::new(limits.tenant_slots)),
            per_cluster: Mutex::new(HashMap::new()),
            limits,
        }
    }

    fn cluster_semaphore(&self, cluster: &str) -> Arc<Semaphore> {
        let mut map = self.per_cluster.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() > IDLE_ENTRIES {
            let full = self.limits.slots_per_cluster;
            map.retain(|_, s| Arc::strong_count(s) > 1 || s.available_permits() < full);
        }
        map.entry(cluster.to_string())
            .or_insert_with(|| Arc::new(Semaphore::new(self.limits.slots_per_cluster)))
            .clone()
    }

    /// Wait for the slots `flow` needs, or refuse once the wait is over.
    pub async fn admit(&self, flow: &Flow) -> Result<Admitted, TooManyRequests> {
        let (true, Flow::Tenant(cluster)) = (self.limits.enabled, flow) else {
            return Ok(Admitted {
                _cluster: None,
                _pool: None,
            });
        };
        let refused = TooManyRequests {
            retry_after_seconds: 1,
        };
        let deadline = tokio::time::Instant::now() + self.limits.queue_wait;
        let own = self.cluster_semaphore(cluster);
        let cluster_permit = tokio::time::timeout_at(deadline, own.acquire_owned())
            .await
            .map_err(|_| refused.clone())?
            .map_err(|_| refused.clone())?;
        let pool_permit = tokio::time::timeout_at(deadline, self.pool.clone().acquire_owned())
            .await
            .map_err(|_| refused.clone())?
            .map_err(|_| refused)?;
        Ok(Admitted {
            _cluster: Some(cluster_permit),
            _pool: Some(pool_permit),
        })
    }

    /// Tenants' requests running now, for `/metrics`.
    pub fn tenant_requests_running(&self) -> usize {
        self.limits.tenant_slots - self.pool.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> FairnessLimits {
        FairnessLimits {
            enabled: true,
            tenant_slots: 4,
            slots_per_cluster: 2,
            queue_wait: Duration::from_millis(50),
        }
    }

    #[tokio::test]
    async fn a_flooding_tenant_waits_in_its_own_queue() {
        let f = Fairness::new(limits());
        let a = Flow::Tenant("root:a".into());
        let held: Vec<Admitted> = vec![f.admit(&a).await.unwrap(), f.admit(&a).await.unwrap()];
        // root:a has used its share: its next request is refused after the wait...
        assert_eq!(
            f.admit(&a).await.err(),
            Some(TooManyRequests {
                retry_after_seconds: 1
            })
        );
        // ...while another tenant and the system are served.
        let b = f.admit(&Flow::Tenant("root:b".into())).await;
        assert!(b.is_ok());
        assert!(f.admit(&Flow::System).await.is_ok());
        assert_eq!(f.tenant_requests_running(), 3);
        drop(held);
        assert!(f.admit(&a).await.is_ok());
    }

    #[tokio::test]
    async fn a_freed_slot_lets_a_queued_request_in() {
        let f = Arc::new(Fairness::new(FairnessLimits {
            queue_wait: Duration::from_secs(5),
            ..limits()
        }));
        let a = Flow::Tenant("root:a".into());
        let first = f.admit(&a).await.unwrap();
        let _second = f.admit(&a).await.unwrap();
        let queued = {
            let (f, a) = (f.clone(), a.clone());
            tokio::spawn(async move { f.admit(&a).await.is_ok() })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(first);
        assert!(queued.await.unwrap());
    }
}
