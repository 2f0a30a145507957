//! One request's attempts: which endpoint comes next, whether a failure may be retried,
//! and the error the client gets when no endpoint served. The hyper path and the
//! HTTP/1.1 fast path both drive this, so they retry, hold, count and answer alike.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use super::hold::Held;
use super::local::LocalError;
use crate::balance::Endpoint;
use crate::dial::MAX_TRIED;
use crate::reason::Reason;
use crate::service::Service;

/// Attempts per request that may have reached an endpoint (the first and two retries).
/// Refused connections do not count: see [`MAX_TRIED`].
pub const MAX_ATTEMPTS: usize = 3;

/// The least wait before an endpoint that refused a connection is tried again when it is
/// the only one left (up to as much again is added at random).
pub const RECONNECT_BACKOFF: Duration = Duration::from_millis(100);

/// Why an attempt failed, for metrics and the retry decision.
#[derive(Debug)]
pub enum Failure {
    /// No byte reached the endpoint: always retried.
    Connect,
    /// The exchange broke after the request was (perhaps) sent.
    Reset,
    /// A 503 from a draining endpoint.
    Draining,
}

impl Failure {
    pub fn reason(&self) -> Reason {
        match self {
            Failure::Connect => Reason::Connect,
            Failure::Reset => Reason::Reset,
            Failure::Draining => Reason::Draining,
        }
    }
}

/// Methods a proxy may send twice (RFC 9110 §9.2.2).
pub fn idempotent(method: &str) -> bool {
    matches!(
        method,
        "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PUT" | "DELETE"
    )
}

/// The attempts of one request on one service.
pub struct Attempts<'a> {
    svc: &'a Service,
    retry_any: bool,
    tried: [SocketAddr; MAX_TRIED],
    n: usize,
    /// Attempts of the `n` whose connection failed (nothing was sent).
    refused: usize,
    last: Option<(Failure, SocketAddr)>,
    stopped: bool,
    /// How long the request waited for an endpoint before it gave up, if it did.
    held_out: Option<Duration>,
}

impl<'a> Attempts<'a> {
    /// Count the request against the retry budget and start.
    pub fn new(svc: &'a Service, idempotent: bool) -> Self {
        svc.budget.request();
        Self {
            svc,
            retry_any: idempotent,
            tried: [SocketAddr::from(([0, 0, 0, 0], 0)); MAX_TRIED],
            n: 0,
            refused: 0,
            last: None,
            stopped: false,
            held_out: None,
        }
    }

    /// Whether another attempt is allowed: [`MAX_ATTEMPTS`] that reached (or may have
    /// reached) an endpoint, [`MAX_TRIED`] in all.
    fn may_try_again(&self) -> bool {
        self.n - self.refused < MAX_ATTEMPTS && self.n < MAX_TRIED
    }

    /// The endpoint for the next attempt: none when the last failure may not be retried,
    /// the attempts or the retry budget are spent, or no untried endpoint serves within
    /// the service's hold ([`super::hold`]).
    pub async fn next_endpoint(&mut self) -> Option<Arc<Endpoint>> {
        if self.stopped || !self.may_try_again() {
            return None;
        }
        if self.n > 0 {
            if !self.svc.budget.try_retry() {
                return None;
            }
            self.svc.metrics.retry(&self.svc.name);
        }
        if let Some(ep) = self.svc.balancer.pick(&self.tried[..self.n]) {
            return Some(self.attempt(ep));
        }
        // None: subscribe, then pick again, so no change between the pick and the wait is
        // missed (and a request that finds an endpoint pays for no subscription).
        let mut changes = self.svc.balancer.changes();
        if let Some(ep) = self.svc.balancer.pick(&self.tried[..self.n]) {
            return Some(self.attempt(ep));
        }
        let held = Held::start(self.svc)?;
        // Every endpoint was tried and the last refused the connection (or dropped it):
        // nothing was sent, so the same endpoints are tried again after a short, jittered
        // backoff, not only once the endpoints change. A burst of connects (the requests a
        // hold releases at once) can overflow an endpoint's queue for a moment.
        let mut again = matches!(self.last, Some((Failure::Connect, _))).then(|| {
            let jitter = rand::rng().random_range(0..RECONNECT_BACKOFF.as_millis() as u64);
            Instant::now() + RECONNECT_BACKOFF + Duration::from_millis(jitter)
        });
        loop {
            if !held.wait(&mut changes, again).await {
                self.held_out = Some(held.elapsed());
                return None;
            }
            let mut ep = self.svc.balancer.pick(&self.tried[..self.n]);
            if ep.is_none() && again.is_some_and(|t| Instant::now() >= t) {
                again = None;
                ep = self.svc.balancer.pick(&[]);
            }
            if let Some(ep) = ep {
                held.served();
                return Some(self.attempt(ep));
            }
        }
    }

    fn attempt(&mut self, ep: Arc<Endpoint>) -> Arc<Endpoint> {
        self.tried[self.n] = ep.address;
        self.n += 1;
        ep
    }

    /// Whether a 503 from a draining endpoint should be retried rather than passed on.
    pub fn retries_draining(&self) -> bool {
        self.retry_any && self.may_try_again()
    }

    /// The current attempt on `ep` failed after `elapsed`.
    pub fn failed(&mut self, ep: &Endpoint, failure: Failure, elapsed: Duration) {
        ep.failure(elapsed);
        self.svc
            .metrics
            .failure(&self.svc.name, &ep.cluster, failure.reason());
        match failure {
            Failure::Connect => self.refused += 1,
            _ if !self.retry_any => self.stopped = true,
            _ => {}
        }
        self.last = Some((failure, ep.address));
    }

    /// The current attempt on `ep` got no response headers within the request timeout.
    /// Not retried: the endpoint may still be working on it.
    pub fn timed_out(self, ep: &Endpoint, elapsed: Duration) -> LocalError {
        ep.failure(elapsed);
        self.svc
            .metrics
            .failure(&self.svc.name, &ep.cluster, Reason::Timeout);
        LocalError::new(
            Reason::Timeout,
            format!(
                "{} did not answer within {:?}",
                ep.address,
                self.svc.request_timeout()
            ),
        )
    }

    /// No attempt served: 503 if there was no endpoint to try, else 502 naming the last
    /// failure.
    pub fn exhausted(self) -> LocalError {
        let waited = self
            .held_out
            .map(|d| format!(" (waited {} ms for one)", d.as_millis()))
            .unwrap_or_default();
        match self.last {
            None => {
                self.svc
                    .metrics
                    .failure(&self.svc.name, "", Reason::NoEndpoint);
                LocalError::new(
                    Reason::NoEndpoint,
                    format!("no serving endpoint for {}{waited}", self.svc.name),
                )
            }
            Some((f, addr)) => LocalError::new(f.reason(), format!("{addr}: {}", f.reason())),
        }
    }
}
