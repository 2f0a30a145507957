//! One UDP task's answering: a query seen since the model last changed is answered from
//! its remembered bytes ([`crate::memo`], [`crate::wire`]); any other goes the full path of
//! [`DnsHandler::answer_datagram`], whose authoritative answers are remembered.

use std::net::SocketAddr;
use std::time::Instant;

use hickory_server::server::Request;
use prometheus_client::metrics::counter::Counter;

use crate::handler::{Datagram, DnsHandler, MAX_UDP_PAYLOAD};
use crate::memo::{Memo, Remember};
use crate::wire::{self, Sections};

/// A remembered answer and the counter its queries go to.
struct Remembered {
    sections: Sections,
    queries: Counter,
}

impl Remember for Remembered {
    fn key(&self) -> &[u8] {
        self.sections.key()
    }

    fn weight(&self) -> usize {
        self.sections.size() + std::mem::size_of::<Counter>()
    }
}

/// What to do with a datagram.
pub enum Reply<'r> {
    /// Send these bytes.
    Send(&'r [u8]),
    /// Send nothing.
    Drop,
    /// Ask the upstream ([`DnsHandler::answer_forwarded`]).
    Forward(Box<Request>),
}

/// Answers datagrams for one task, with that task's memo and buffers.
pub struct Responder {
    handler: DnsHandler,
    memo: Memo<Remembered>,
    key: Vec<u8>,
    out: Vec<u8>,
}

impl Responder {
    /// A responder whose memo holds at most `memo_bytes` (its task's share of
    /// [`crate::memo::MAX_BYTES`]).
    pub fn new(handler: DnsHandler, memo_bytes: usize) -> Self {
        Self {
            handler,
            memo: Memo::with_max_bytes(memo_bytes),
            key: Vec::with_capacity(272),
            out: Vec::with_capacity(512),
        }
    }

    /// Answers remembered now.
    pub fn remembered(&self) -> usize {
        self.memo.len()
    }

    /// Answer the datagram `bytes` from `src`.
    pub fn answer(&mut self, bytes: &[u8], src: SocketAddr) -> Reply<'_> {
        let start = Instant::now();
        let state = &self.handler.state;
        let generation = state.generation();
        let query = wire::parse(bytes, &mut self.key);
        if let Some(query) = &query {
            if state.zones.cluster.is_some() {
                // cluster.local answers depend on the asking pod's logical cluster. This
                // read and the full path's are separate: if the model changes between
                // them, the generation read above is already stale, and what is remembered
                // under it is forgotten at the next lookup.
                let model = state.model.read().unwrap_or_else(|p| p.into_inner());
                match model.logical_cluster_of(src.ip()) {
                    Some(path) => {
                        self.key.push(0xFF);
                        self.key.extend_from_slice(path.as_str().as_bytes());
                    }
                    None => self.key.push(0xFE),
                }
            }
            if let Some(r) = self.memo.get(generation, &self.key)
                && r.sections.write(query, MAX_UDP_PAYLOAD, &mut self.out)
            {
                r.queries.inc();
                state.metrics.remembered.inc();
                state.metrics.latency.observe(start.elapsed().as_secs_f64());
                return Reply::Send(&self.out);
            }
        }
        let (datagram, labels) = self.handler.answer_datagram_labelled(bytes, src, start);
        match datagram {
            Datagram::Reply(response) => {
                if let (Some(query), Some(labels)) = (&query, labels)
                    && let Some(sections) = Sections::of(
                        &self.key,
                        &response,
                        query.question,
                        query.edns_payload.is_some(),
                    )
                {
                    let queries = state.metrics.queries.get_or_create(&labels).clone();
                    let value = Remembered { sections, queries };
                    self.memo.insert(generation, value);
                }
                self.out = response;
                Reply::Send(&self.out)
            }
            Datagram::Drop => Reply::Drop,
            Datagram::Forward(request) => Reply::Forward(request),
        }
    }
}
