//! The hickory request handler: one query in, one response out.
//!
//! Malformed packets never reach this (hickory-server answers FORMERR); everything here
//! is mapped to an rcode in one place, [`Outcome`].

use std::sync::Arc;
use std::time::Instant;

use hickory_proto::op::{Edns, Header, HeaderCounts, MessageType, Metadata, OpCode, ResponseCode};
use hickory_proto::rr::{DNSClass, Record, RecordType};
use hickory_server::net::runtime::Time;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;

use crate::answer::{self, Answer};
use crate::forward::Source;
use crate::metrics::QueryLabels;
use crate::state::DnsState;

/// The highest EDNS version this server speaks.
const EDNS_VERSION: u8 = 0;

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

impl DnsHandler {
    async fn outcome(&self, request: &Request) -> Outcome {
        if request.metadata.message_type != MessageType::Query {
            return Outcome::Error("none", ResponseCode::FormErr);
        }
        if request.metadata.op_code != OpCode::Query {
            return Outcome::Error("none", ResponseCode::NotImp);
        }
        if request
            .edns
            .as_ref()
            .is_some_and(|e| e.version() > EDNS_VERSION)
        {
            return Outcome::Error("none", ResponseCode::BADVERS);
        }
        let queries = request.queries.queries();
        let [query] = queries else {
            // RFC 9619: exactly one question.
            return Outcome::Error("none", ResponseCode::FormErr);
        };
        let state = &self.state;
        let name = query.name();
        let qtype = query.query_type();
        let class = query.query_class();
        if matches!(qtype, RecordType::AXFR | RecordType::IXFR | RecordType::OPT) {
            return Outcome::Error("none", ResponseCode::Refused);
        }
        let local = if class == DNSClass::IN || class == DNSClass::ANY {
            let model = state.model.read().unwrap_or_else(|p| p.into_inner());
            answer::resolve(&model, &state.zones, name, qtype)
        } else {
            None
        };
        if let Some((zone, answer)) = local {
            // Until every informer has listed, an answer could be a wrong NXDOMAIN.
            if !state.synced() {
                return Outcome::Error(zone.as_str(), ResponseCode::ServFail);
            }
            return Outcome::Authoritative(zone.as_str(), answer);
        }
        let Some(forwarder) = &state.forwarder else {
            return Outcome::Error("none", ResponseCode::Refused);
        };
        match forwarder.resolve(name, qtype, class).await {
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
}

#[async_trait::async_trait]
impl RequestHandler for DnsHandler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        let start = Instant::now();
        let outcome = self.outcome(request).await;

        let mut meta = Metadata::response_from_request(&request.metadata);
        meta.recursion_available = self.state.forwarder.is_some();
        let resp_edns = request.edns.as_ref().map(|req| {
            let mut e = Edns::new();
            e.set_max_payload(req.max_payload().max(512));
            e.set_version(EDNS_VERSION);
            e
        });
        let empty: [Record; 0] = [];
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
        let builder = MessageResponseBuilder::new(&request.queries, resp_edns.as_ref());
        let response = builder.build(
            meta,
            answer.answers.iter(),
            answer.authority.iter(),
            empty.iter(),
            answer.additionals.iter(),
        );
        let info = match response_handle.send_response(response).await {
            Ok(info) => info,
            Err(e) => {
                tracing::debug!(error = %e, src = %request.src(), "sending the response failed");
                let mut failed = meta;
                failed.response_code = ResponseCode::ServFail;
                ResponseInfo::from(Header {
                    metadata: failed,
                    counts: HeaderCounts::default(),
                })
            }
        };

        let qtype = request
            .queries
            .queries()
            .first()
            .map_or("none", |q| q.query_type().into());
        let m = &self.state.metrics;
        m.queries
            .get_or_create(&QueryLabels {
                qtype,
                rcode: answer.rcode.to_str(),
                zone,
            })
            .inc();
        m.latency.observe(start.elapsed().as_secs_f64());
        info
    }
}
