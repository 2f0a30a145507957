//! A thin etcd v3 client: the KV calls and the prefix watch the etcd backend makes, on
//! tonic over one channel balanced across the endpoints, with TLS by rustls (ring).
//!
//! The messages and service stubs are generated code committed in [`pb`]; this module adds
//! only connecting and the few request shapes the backend needs, so the storage layer speaks
//! in keys, revisions and outcomes rather than protobuf.

pub mod pb;

use std::time::Duration;

use futures::{Stream, StreamExt};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use pb::etcdserverpb::{
    CompactionRequest, Compare, RangeRequest, RangeResponse, RequestOp, TxnRequest, TxnResponse,
    WatchCreateRequest, WatchRequest, WatchResponse, compare, kv_client::KvClient, request_op,
    watch_client::WatchClient, watch_request,
};

/// Why an etcd call failed.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    #[error("endpoint {endpoint:?}: {reason}")]
    Endpoint { endpoint: String, reason: String },
    #[error("TLS: {0}")]
    Tls(String),
    #[error("{}: {}", .0.code(), .0.message())]
    Status(#[from] tonic::Status),
}

impl EtcdError {
    /// The request failed before reaching any member (no connection could be made), so it
    /// may be sent again without risk of applying twice.
    pub fn never_sent(&self) -> bool {
        matches!(self, Self::Status(s)
            if s.code() == tonic::Code::Unavailable && s.message().contains("tcp connect error"))
    }

    /// etcd refused because the revision asked for was compacted away.
    pub fn compacted(&self) -> bool {
        matches!(self, Self::Status(s)
            if s.code() == tonic::Code::OutOfRange || s.message().contains("compacted"))
    }
}

/// How to reach etcd.
#[derive(Clone, Debug, Default)]
pub struct ConnectOptions {
    /// CA bundle (PEM) that signed the members' serving certificates.
    pub ca_pem: Option<Vec<u8>>,
    /// Client certificate and key (PEM), when the members ask for one.
    pub identity_pem: Option<(Vec<u8>, Vec<u8>)>,
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
    /// HTTP/2 keep-alive: ping interval and how long a ping may go unanswered.
    pub keep_alive: (Duration, Duration),
}

/// A client of one etcd cluster; cheap to clone (one shared channel).
#[derive(Clone)]
pub struct EtcdClient {
    channel: Channel,
}

impl EtcdClient {
    /// A client balanced over `endpoints` (`http://` or `https://` URLs). Connections are
    /// made lazily: the first call fails if no member answers.
    pub fn connect(endpoints: &[String], options: &ConnectOptions) -> Result<Self, EtcdError> {
        let tls = if endpoints.iter().any(|e| e.starts_with("https://")) {
            let mut tls = ClientTlsConfig::new();
            if let Some(ca) = &options.ca_pem {
                tls = tls.ca_certificate(Certificate::from_pem(ca));
            }
            if let Some((cert, key)) = &options.identity_pem {
                tls = tls.identity(Identity::from_pem(cert, key));
            }
            Some(tls)
        } else {
            None
        };
        let mut list = Vec::with_capacity(endpoints.len());
        for url in endpoints {
            let bad = |reason: String| EtcdError::Endpoint {
                endpoint: url.clone(),
                reason,
            };
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(bad("must start with http:// or https://".into()));
            }
            let mut endpoint = Endpoint::from_shared(url.clone())
                .map_err(|e| bad(e.to_string()))?
                .timeout(options.request_timeout)
                .connect_timeout(options.connect_timeout)
                .http2_keep_alive_interval(options.keep_alive.0)
                .keep_alive_timeout(options.keep_alive.1)
                .keep_alive_while_idle(true);
            if let Some(tls) = &tls {
                if url.starts_with("http://") {
                    return Err(bad("mixes http:// and https:// endpoints".into()));
                }
                endpoint = endpoint
                    .tls_config(tls.clone())
                    .map_err(|e| EtcdError::Tls(e.to_string()))?;
            }
            list.push(endpoint);
        }
        Ok(Self {
            channel: Channel::balance_list(list.into_iter()),
        })
    }

    fn kv(&self) -> KvClient<Channel> {
        KvClient::new(self.channel.clone())
    }

    /// Keys in `[from, end)` at `revision` (0: the newest), at most `limit` of them.
    pub async fn range(
        &self,
        from: Vec<u8>,
        end: Vec<u8>,
        limit: i64,
        revision: i64,
    ) -> Result<RangeResponse, EtcdError> {
        let request = RangeRequest {
            key: from,
            range_end: end,
            limit,
            revision,
            ..Default::default()
        };
        Ok(self.kv().range(request).await?.into_inner())
    }

    /// One transaction: if every comparison holds, `then`, else `otherwise`.
    pub async fn txn(
        &self,
        when: Vec<Compare>,
        then: Vec<RequestOp>,
        otherwise: Vec<RequestOp>,
    ) -> Result<TxnResponse, EtcdError> {
        let request = TxnRequest {
            compare: when,
            success: then,
            failure: otherwise,
        };
        Ok(self.kv().txn(request).await?.into_inner())
    }

    /// Drop every revision older than `revision`.
    pub async fn compact(&self, revision: i64) -> Result<(), EtcdError> {
        let request = CompactionRequest {
            revision,
            physical: false,
        };
        self.kv().compact(request).await?;
        Ok(())
    }

    /// Every change to keys in `[key, end)` from `start_revision` on.
    pub async fn watch(
        &self,
        key: Vec<u8>,
        end: Vec<u8>,
        start_revision: i64,
    ) -> Result<impl Stream<Item = Result<WatchResponse, EtcdError>> + use<>, EtcdError> {
        let create = WatchRequest {
            request_union: Some(watch_request::RequestUnion::CreateRequest(
                WatchCreateRequest {
                    key,
                    range_end: end,
                    start_revision,
                    ..Default::default()
                },
            )),
        };
        // The request stream stays open after the one create request: closing it would end
        // the watch.
        let requests = futures::stream::iter([create]).chain(futures::stream::pending());
        let responses = WatchClient::new(self.channel.clone())
            .watch(requests)
            .await?
            .into_inner();
        Ok(responses.map(|r| r.map_err(EtcdError::from)))
    }
}

/// Holds when `key` does not exist (its creation revision is 0).
pub fn absent(key: Vec<u8>) -> Compare {
    Compare {
        result: compare::CompareResult::Equal as i32,
        target: compare::CompareTarget::Create as i32,
        key,
        range_end: Vec::new(),
        target_union: Some(compare::TargetUnion::CreateRevision(0)),
    }
}

/// Holds when `key` was last written at `revision`.
pub fn modified_at(key: Vec<u8>, revision: i64) -> Compare {
    Compare {
        result: compare::CompareResult::Equal as i32,
        target: compare::CompareTarget::Mod as i32,
        key,
        range_end: Vec::new(),
        target_union: Some(compare::TargetUnion::ModRevision(revision)),
    }
}

/// A transaction step that writes `value` at `key`.
pub fn put(key: Vec<u8>, value: Vec<u8>) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestPut(
            pb::etcdserverpb::PutRequest {
                key,
                value,
                ..Default::default()
            },
        )),
    }
}

/// A transaction step that deletes `key`.
pub fn delete(key: Vec<u8>) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestDeleteRange(
            pb::etcdserverpb::DeleteRangeRequest {
                key,
                ..Default::default()
            },
        )),
    }
}

/// A transaction step that reads `key`.
pub fn get(key: Vec<u8>) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestRange(RangeRequest {
            key,
            ..Default::default()
        })),
    }
}
