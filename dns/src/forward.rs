//! Everything outside the served zones goes to one upstream resolver, with a cache.
//!
//! UDP first, TCP when the upstream truncates. Positive answers are cached for their
//! smallest TTL (at most [`MAX_TTL`]), negative ones for the SOA minimum (at most
//! [`MAX_NEGATIVE_TTL`]), so a flood of the same name costs the upstream one query.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hickory_proto::op::{Edns, Message, Query, ResponseCode};
use hickory_proto::rr::{DNSClass, LowerName, Name, RData, Record, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

pub const MAX_TTL: u32 = 300;
pub const MAX_NEGATIVE_TTL: u32 = 30;
const CACHE_CAPACITY: usize = 50_000;
const TIMEOUT: Duration = Duration::from_secs(2);
/// Most queries waiting on the upstream at once: beyond it a query is answered SERVFAIL at
/// once, so a flood of unique names costs a bounded number of sockets and tasks.
pub const MAX_IN_FLIGHT: usize = 512;

#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("upstream {0}: {1}")]
    Io(SocketAddr, std::io::Error),
    #[error("upstream {0} did not answer within {1:?}")]
    Timeout(SocketAddr, Duration),
    #[error("upstream {0} sent a malformed answer: {1}")]
    Malformed(SocketAddr, String),
    #[error("{MAX_IN_FLIGHT} queries already wait on upstream {0}")]
    Busy(SocketAddr),
}

/// An upstream answer, as cached.
#[derive(Clone, Debug)]
pub struct Forwarded {
    pub rcode: ResponseCode,
    pub answers: Vec<Record>,
    pub authority: Vec<Record>,
    pub additionals: Vec<Record>,
}

struct Entry {
    expires: Instant,
    stored: Instant,
    answer: Forwarded,
}

pub struct Forwarder {
    upstream: SocketAddr,
    cache: Mutex<HashMap<(LowerName, RecordType, DNSClass), Entry>>,
    in_flight: tokio::sync::Semaphore,
}

/// Whether the answer came from the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Cache,
    Upstream,
}

impl Forwarder {
    pub fn new(upstream: SocketAddr) -> Self {
        Self {
            upstream,
            cache: Mutex::new(HashMap::new()),
            in_flight: tokio::sync::Semaphore::new(MAX_IN_FLIGHT),
        }
    }

    pub async fn resolve(
        &self,
        name: &LowerName,
        qtype: RecordType,
        class: DNSClass,
    ) -> Result<(Forwarded, Source), ForwardError> {
        let key = (name.clone(), qtype, class);
        if let Some(hit) = self.cached(&key) {
            return Ok((hit, Source::Cache));
        }
        let Ok(_permit) = self.in_flight.try_acquire() else {
            return Err(ForwardError::Busy(self.upstream));
        };
        let answer = self.ask(Name::from(name), qtype, class).await?;
        let ttl = cache_ttl(&answer);
        if ttl > 0 {
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            if cache.len() >= CACHE_CAPACITY {
                let now = Instant::now();
                cache.retain(|_, e| e.expires > now);
                if cache.len() >= CACHE_CAPACITY {
                    cache.clear();
                }
            }
            let now = Instant::now();
            cache.insert(
                key,
                Entry {
                    expires: now + Duration::from_secs(u64::from(ttl)),
                    stored: now,
                    answer: answer.clone(),
                },
            );
        }
        Ok((answer, Source::Upstream))
    }

    /// A cached answer with TTLs counted down by the time it has spent in the cache.
    fn cached(&self, key: &(LowerName, RecordType, DNSClass)) -> Option<Forwarded> {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let entry = cache.get(key)?;
        let now = Instant::now();
        if entry.expires <= now {
            return None;
        }
        let age = u32::try_from(now.duration_since(entry.stored).as_secs()).unwrap_or(u32::MAX);
        let mut answer = entry.answer.clone();
        for r in answer
            .answers
            .iter_mut()
            .chain(answer.authority.iter_mut())
            .chain(answer.additionals.iter_mut())
        {
            r.ttl = r.ttl.saturating_sub(age);
        }
        Some(answer)
    }

    async fn ask(
        &self,
        name: Name,
        qtype: RecordType,
        class: DNSClass,
    ) -> Result<Forwarded, ForwardError> {
        let up = self.upstream;
        let mut query = Query::query(name, qtype);
        query.set_query_class(class);
        let mut msg = Message::query();
        msg.metadata.recursion_desired = true;
        msg.add_query(query.clone());
        let mut edns = Edns::new();
        edns.set_max_payload(1232);
        msg.set_edns(edns);
        let bytes = msg
            .to_vec()
            .map_err(|e| ForwardError::Malformed(up, e.to_string()))?;
        let io = |e| ForwardError::Io(up, e);

        let bind: SocketAddr = if up.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let socket = UdpSocket::bind(bind).await.map_err(io)?;
        socket.connect(up).await.map_err(io)?;
        socket.send(&bytes).await.map_err(io)?;
        let mut buf = vec![0u8; 4096];
        let reply = loop {
            let n = tokio::time::timeout(TIMEOUT, socket.recv(&mut buf))
                .await
                .map_err(|_| ForwardError::Timeout(up, TIMEOUT))?
                .map_err(io)?;
            match Message::from_vec(&buf[..n]) {
                // Answers to someone else's id or question are spoofing attempts or late:
                // keep waiting.
                Ok(m) if m.metadata.id == msg.metadata.id && asks(&m, &query) => break m,
                Ok(_) => continue,
                Err(e) => return Err(ForwardError::Malformed(up, e.to_string())),
            }
        };
        let reply = if reply.metadata.truncation {
            tokio::time::timeout(TIMEOUT, ask_tcp(up, &bytes))
                .await
                .map_err(|_| ForwardError::Timeout(up, TIMEOUT))??
        } else {
            reply
        };
        let rcode = reply.metadata.response_code;
        Ok(Forwarded {
            rcode,
            answers: reply.answers,
            authority: reply.authorities,
            additionals: reply
                .additionals
                .into_iter()
                .filter(|r| r.record_type() != RecordType::OPT)
                .collect(),
        })
    }
}

/// Whether `reply` answers `query` (names compared case-insensitively).
fn asks(reply: &Message, query: &Query) -> bool {
    matches!(reply.queries.as_slice(), [q] if q.query_type() == query.query_type()
        && q.query_class() == query.query_class()
        && LowerName::new(q.name()) == LowerName::new(query.name()))
}

async fn ask_tcp(up: SocketAddr, bytes: &[u8]) -> Result<Message, ForwardError> {
    let io = |e| ForwardError::Io(up, e);
    let mut stream = TcpStream::connect(up).await.map_err(io)?;
    let len = u16::try_from(bytes.len())
        .map_err(|_| ForwardError::Malformed(up, "query too long".into()))?;
    stream.write_all(&len.to_be_bytes()).await.map_err(io)?;
    stream.write_all(bytes).await.map_err(io)?;
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).await.map_err(io)?;
    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut buf).await.map_err(io)?;
    Message::from_vec(&buf).map_err(|e| ForwardError::Malformed(up, e.to_string()))
}

/// How long an answer may be cached: 0 for failures.
fn cache_ttl(a: &Forwarded) -> u32 {
    match a.rcode {
        ResponseCode::NoError if !a.answers.is_empty() => a
            .answers
            .iter()
            .map(|r| r.ttl)
            .min()
            .unwrap_or(0)
            .min(MAX_TTL),
        ResponseCode::NoError | ResponseCode::NXDomain => a
            .authority
            .iter()
            .find_map(|r| match &r.data {
                RData::SOA(soa) => Some(soa.minimum.min(r.ttl)),
                _ => None,
            })
            .unwrap_or(0)
            .min(MAX_NEGATIVE_TTL),
        _ => 0,
    }
}
