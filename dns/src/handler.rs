//! The full path: one query in, one response out — hickory's decoder, [`crate::answer`],
//! hickory's encoder. Serves TCP (hickory-server's `RequestHandler`, which answers FORMERR
//! itself for what it cannot parse) and every UDP datagram the
//! [`crate::responder::Responder`] has no remembered answer for ([`DnsHandler::answer_datagram`],
//! which answers FORMERR for a datagram whose header parses and body does not). Every
//! outcome is mapped to an rcode in one place, [`Outcome`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use hickory_proto::op::{
    Edns, Header, HeaderCounts, Message, MessageType, Metadata, OpCode, ResponseCode,
};
use hickory_proto::rr::{DNSClass, Record, RecordType};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder, BinEncodable, BinEncoder};
use hickory_server::net::runtime::Time;
use hickory_server::net::xfer::Protocol;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;

use crate::answer::{self, Answer};
use crate::forward::Source;
use crate::metrics::QueryLabels;
use crate::state::DnsState;

/// The highest EDNS version this server speaks.
const EDNS_VERSION: u8 = 0;

/// Largest UDP answer, whatever a client's EDNS offers: the DNS flag day 2020 size, which
/// fits one unfragmented packet, so the server is no amplifier of a spoofed source's query.
pub const MAX_UDP_PAYLOAD: u16 = 1232;

#[derive(Clone)]
pub struct DnsHandler {
    pub state: Arc<DnsState>,
}

/// What a query came to, before it is written.
enum Outcome {
    /// An authoritative answer from a served zone.
    Authoritative(&'static str, Answer),
    /// An answer from the upstream (or its cache).
    Forwarded(Answer),
    /// No records: an error rcode.
    Error(&'static str, ResponseCode),
}

/// What to do with a datagram.
pub enum Datagram {
    /// Send this response.
    Reply(Vec<u8>),
    /// Send nothing: shorter than a header, or not a query.
    Drop,
    /// Ask the upstream ([`DnsHandler::answer_forwarded`]).
    Forward(Box<Request>),
}

/// A response ready to be encoded.
pub struct Prepared {
    meta: Metadata,
    edns: Option<Edns>,
    zone: &'static str,
    answer: Answer,
}

impl DnsHandler {
    /// The outcome if it can be had without IO; `None` when the query must be forwarded.
    fn local(&self, request: &Request) -> Option<Outcome> {
        if request.metadata.message_type != MessageType::Query {
            return Some(Outcome::Error("none", ResponseCode::FormErr));
        }
        if request.metadata.op_code != OpCode::Query {
            return Some(Outcome::Error("none", ResponseCode::NotImp));
        }
        if request
            .edns
            .as_ref()
            .is_some_and(|e| e.version() > EDNS_VERSION)
        {
            return Some(Outcome::Error("none", ResponseCode::BADVERS));
        }
        let queries = request.queries.queries();
        let [query] = queries else {
            // RFC 9619: exactly one question.
            return Some(Outcome::Error("none", ResponseCode::FormErr));
        };
        let state = &self.state;
        let qtype = query.query_type();
        let class = query.query_class();
        if matches!(qtype, RecordType::AXFR | RecordType::IXFR | RecordType::OPT) {
            return Some(Outcome::Error("none", ResponseCode::Refused));
        }
        let local = if class == DNSClass::IN || class == DNSClass::ANY {
            let model = state.model.read().unwrap_or_else(|p| p.into_inner());
            answer::resolve(
                &model,
                &state.zones,
                query.name(),
                qtype,
                Some(request.src().ip()),
            )
            .or_else(|| {
                answer::ingress(&model, state.zones.ttl, query.name(), qtype)
                    .map(|a| (answer::ZoneKind::Ingress, a))
            })
        } else {
            None
        };
        if let Some((zone, answer)) = local {
            // Until every informer has listed, an answer could be a wrong NXDOMAIN.
            if !state.synced() {
                return Some(Outcome::Error(zone.as_str(), ResponseCode::ServFail));
            }
            return Some(Outcome::Authoritative(zone.as_str(), answer));
        }
        if state.forwarder.is_none() {
            return Some(Outcome::Error("none", ResponseCode::Refused));
        }
        None
    }

    /// Ask the upstream (a query [`Self::local`] did not answer).
    async fn forward(&self, request: &Request) -> Outcome {
        let (Some(forwarder), Some(query)) =
            (&self.state.forwarder, request.queries.queries().first())
        else {
            return Outcome::Error("none", ResponseCode::Refused);
        };
        let state = &self.state;
        let name = query.name();
        match forwarder
            .resolve(name, query.query_type(), query.query_class())
            .await
        {
            Ok((f, source)) => {
                match source {
                    Source::Cache => state.metrics.cache_hits.inc(),
                    Source::Upstream => state.metrics.cache_misses.inc(),
                };
                Outcome::Forwarded(Answer {
                    rcode: f.rcode,
                    answers: f.answers,
                    authority: f.authority,
                    additionals: f.additionals,
                })
            }
            Err(e) => {
                tracing::debug!(error = %e, %name, "forward failed");
                state.metrics.forward_failures.inc();
                Outcome::Error("forward", ResponseCode::ServFail)
            }
        }
    }

    /// The complete outcome of a request.
    pub async fn outcome(&self, request: &Request) -> Prepared {
        let outcome = match self.local(request) {
            Some(o) => o,
            None => self.forward(request).await,
        };
        self.prepare(request, outcome)
    }

    fn prepare(&self, request: &Request, outcome: Outcome) -> Prepared {
        let mut meta = Metadata::response_from_request(&request.metadata);
        meta.recursion_available = self.state.forwarder.is_some();
        let edns = request.edns.as_ref().map(|req| {
            let mut e = Edns::new();
            e.set_max_payload(req.max_payload().clamp(512, MAX_UDP_PAYLOAD));
            e.set_version(EDNS_VERSION);
            e
        });
        let (zone, answer) = match outcome {
            Outcome::Authoritative(zone, a) => {
                meta.authoritative = true;
                (zone, a)
            }
            Outcome::Forwarded(a) => ("forward", a),
            Outcome::Error(zone, rcode) => (
                zone,
                Answer {
                    rcode,
                    ..Answer::default()
                },
            ),
        };
        meta.response_code = answer.rcode;
        Prepared {
            meta,
            edns,
            zone,
            answer,
        }
    }

    /// Count the query; its labels.
    fn record(&self, request: &Request, prepared: &Prepared, start: Instant) -> QueryLabels {
        let qtype = request
            .queries
            .queries()
            .first()
            .map_or("none", |q| q.query_type().into());
        let m = &self.state.metrics;
        let labels = QueryLabels {
            qtype,
            rcode: prepared.answer.rcode.to_str(),
            zone: prepared.zone,
        };
        m.queries.get_or_create(&labels).inc();
        m.latency.observe(start.elapsed().as_secs_f64());
        labels
    }

    /// One UDP datagram, decoded and answered in full (the reference the memoized
    /// [`crate::responder::Responder`] falls back to).
    pub fn answer_datagram(&self, bytes: &[u8], src: SocketAddr) -> Datagram {
        self.answer_datagram_labelled(bytes, src, Instant::now()).0
    }

    /// [`Self::answer_datagram`], and the metric labels of the answer when it is
    /// authoritative: an answer from the model alone, which may be remembered.
    pub(crate) fn answer_datagram_labelled(
        &self,
        bytes: &[u8],
        src: SocketAddr,
        start: Instant,
    ) -> (Datagram, Option<QueryLabels>) {
        let request = match Request::from_bytes(bytes.to_vec(), src, Protocol::Udp) {
            Ok(r) => r,
            Err(_) => return (formerr(bytes).map_or(Datagram::Drop, Datagram::Reply), None),
        };
        if request.metadata.message_type == MessageType::Response {
            // Never answer answers: that is how reflection loops start.
            return (Datagram::Drop, None);
        }
        match self.local(&request) {
            Some(outcome) => {
                let authoritative = matches!(outcome, Outcome::Authoritative(..));
                let prepared = self.prepare(&request, outcome);
                let labels = self.record(&request, &prepared, start);
                let response = encode(&request, prepared, Protocol::Udp);
                (Datagram::Reply(response), authoritative.then_some(labels))
            }
            None => (Datagram::Forward(Box::new(request)), None),
        }
    }

    /// Forward a request the fast path could not answer; the encoded response.
    pub async fn answer_forwarded(&self, request: Box<Request>) -> Vec<u8> {
        let start = Instant::now();
        let prepared = self.outcome(&request).await;
        self.record(&request, &prepared, start);
        encode(&request, prepared, request.protocol())
    }
}

/// FORMERR for a datagram whose header parses but whose body does not.
fn formerr(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut decoder = BinDecoder::new(bytes);
    let header = Header::read(&mut decoder).ok()?;
    if header.metadata.message_type == MessageType::Response {
        return None;
    }
    let mut meta = Metadata::response_from_request(&header.metadata);
    meta.response_code = ResponseCode::FormErr;
    let mut out = Vec::with_capacity(12);
    let mut encoder = BinEncoder::new(&mut out);
    Header {
        metadata: meta,
        counts: HeaderCounts::default(),
    }
    .emit(&mut encoder)
    .ok()?;
    Some(out)
}

/// Encode a response. UDP responses fit the client's EDNS size (512 without EDNS, never
/// over [`MAX_UDP_PAYLOAD`]); one that does not fit goes as its question alone with TC set,
/// and the client asks again over TCP (RFC 7766). Built as a hickory-proto `Message` so that
/// answer names are compressed against the question.
fn encode(request: &Request, p: Prepared, protocol: Protocol) -> Vec<u8> {
    let max = match protocol {
        Protocol::Udp => p
            .edns
            .as_ref()
            .map_or(512, |e| e.max_payload().min(MAX_UDP_PAYLOAD)),
        _ => u16::MAX,
    };
    let mut msg = Message::response(p.meta.id, p.meta.op_code);
    msg.metadata = p.meta;
    msg.queries = request
        .queries
        .queries()
        .iter()
        .map(|q| q.original().clone())
        .collect();
    msg.answers = p.answer.answers;
    msg.authorities = p.answer.authority;
    msg.additionals = p.answer.additionals;
    msg.edns = p.edns;
    let mut bytes = Vec::with_capacity(512);
    let mut encoder = BinEncoder::new(&mut bytes);
    encoder.set_max_size(max);
    if msg.emit(&mut encoder).is_ok() {
        return bytes;
    }
    if protocol == Protocol::Udp {
        msg.answers.clear();
        msg.authorities.clear();
        msg.additionals.clear();
        msg.metadata.truncation = true;
        bytes.clear();
        let mut encoder = BinEncoder::new(&mut bytes);
        encoder.set_max_size(max);
        if msg.emit(&mut encoder).is_ok() {
            return bytes;
        }
    }
    bytes.clear();
    let mut meta = p.meta;
    meta.response_code = ResponseCode::ServFail;
    let mut encoder = BinEncoder::new(&mut bytes);
    let _ = Header {
        metadata: meta,
        counts: HeaderCounts::default(),
    }
    .emit(&mut encoder);
    bytes
}

#[async_trait::async_trait]
impl RequestHandler for DnsHandler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        let start = Instant::now();
        let p = self.outcome(request).await;
        let empty: [Record; 0] = [];
        let response = MessageResponseBuilder::new(&request.queries, p.edns.as_ref()).build(
            p.meta,
            p.answer.answers.iter(),
            p.answer.authority.iter(),
            empty.iter(),
            p.answer.additionals.iter(),
        );
        let info = match response_handle.send_response(response).await {
            Ok(info) => info,
            Err(e) => {
                tracing::debug!(error = %e, src = %request.src(), "sending the response failed");
                let mut failed = p.meta;
                failed.response_code = ResponseCode::ServFail;
                ResponseInfo::from(Header {
                    metadata: failed,
                    counts: HeaderCounts::default(),
                })
            }
        };
        self.record(request, &p, start);
        info
    }
}
