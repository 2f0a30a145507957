//! Who a tunnel peer is and whom it trusts.
//!
//! Identities are SPIFFE-style URIs in the certificate's URI SAN,
//! `spiffe://<clusterset>/cluster/<cluster>/<workload>`, as Istio and Linkerd name
//! workloads; the trust domain is the clusterset. The trust bundle holds several roots so a
//! clusterset CA can be rotated (old and new roots trusted side by side). Both directions
//! verify the chain, the validity period and the SPIFFE URI during the handshake, so an
//! untrusted or expired peer never gets a stream.

use std::fmt;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime, pem::PemObject};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, RootCertStore};

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("{0:?} is not a SPIFFE id of the form spiffe://<clusterset>/cluster/<name>/<workload>")]
    BadSpiffeId(String),
    #[error("the certificate has no SPIFFE URI SAN")]
    NoSpiffeId,
    #[error("no certificate found in {0}")]
    NoCertificate(String),
    #[error("no private key found in {0}")]
    NoKey(String),
    #[error("reading {0}: {1}")]
    Read(String, std::io::Error),
    #[error("PEM in {0}: {1}")]
    Pem(String, String),
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    #[error("certificate: {0}")]
    Certificate(String),
}

/// `spiffe://<clusterset>/cluster/<cluster>/<workload>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SpiffeId {
    clusterset: String,
    cluster: String,
    workload: String,
}

impl SpiffeId {
    pub fn new(clusterset: &str, cluster: &str, workload: &str) -> Result<Self, IdentityError> {
        Self::parse(&format!(
            "spiffe://{clusterset}/cluster/{cluster}/{workload}"
        ))
    }

    pub fn parse(uri: &str) -> Result<Self, IdentityError> {
        let bad = || IdentityError::BadSpiffeId(uri.to_string());
        let rest = uri.strip_prefix("spiffe://").ok_or_else(bad)?;
        let mut parts = rest.splitn(4, '/');
        let clusterset = parts.next().filter(|s| !s.is_empty()).ok_or_else(bad)?;
        if parts.next() != Some("cluster") {
            return Err(bad());
        }
        let cluster = parts.next().filter(|s| !s.is_empty()).ok_or_else(bad)?;
        let workload = parts.next().filter(|s| !s.is_empty()).ok_or_else(bad)?;
        let label = |s: &str| {
            s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
        };
        if !label(clusterset) || !label(cluster) {
            return Err(bad());
        }
        Ok(Self {
            clusterset: clusterset.to_string(),
            cluster: cluster.to_string(),
            workload: workload.to_string(),
        })
    }

    pub fn clusterset(&self) -> &str {
        &self.clusterset
    }

    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The SPIFFE id in a certificate's URI SANs.
    pub fn of_certificate(der: &[u8]) -> Result<Self, IdentityError> {
        use x509_parser::extensions::GeneralName;
        let (_, cert) = x509_parser::parse_x509_certificate(der)
            .map_err(|e| IdentityError::Certificate(e.to_string()))?;
        let san = cert
            .subject_alternative_name()
            .map_err(|e| IdentityError::Certificate(e.to_string()))?
            .ok_or(IdentityError::NoSpiffeId)?;
        san.value
            .general_names
            .iter()
            .find_map(|n| match n {
                GeneralName::URI(u) if u.starts_with("spiffe://") => Some(Self::parse(u)),
                _ => None,
            })
            .ok_or(IdentityError::NoSpiffeId)?
    }
}

impl fmt::Display for SpiffeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "spiffe://{}/cluster/{}/{}",
            self.clusterset, self.cluster, self.workload
        )
    }
}

fn read(path: &str) -> Result<Vec<u8>, IdentityError> {
    std::fs::read(path).map_err(|e| IdentityError::Read(path.to_string(), e))
}

/// The roots a peer's chain must lead to.
#[derive(Clone, Debug)]
pub struct TrustBundle {
    roots: Arc<RootCertStore>,
}

impl TrustBundle {
    /// Every certificate in `pem` is a root.
    pub fn from_pem(pem: &[u8], origin: &str) -> Result<Self, IdentityError> {
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(pem) {
            let c = c.map_err(|e| IdentityError::Pem(origin.to_string(), e.to_string()))?;
            roots.add(c)?;
        }
        if roots.is_empty() {
            return Err(IdentityError::NoCertificate(origin.to_string()));
        }
        Ok(Self {
            roots: Arc::new(roots),
        })
    }

    pub fn from_files(paths: &[String]) -> Result<Self, IdentityError> {
        let mut pem = Vec::new();
        for p in paths {
            pem.extend(read(p)?);
            pem.push(b'\n');
        }
        Self::from_pem(&pem, &paths.join(","))
    }

    pub fn len(&self) -> usize {
        self.roots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.roots.is_empty()
    }
}

/// This proxy's certificate chain and key, and the SPIFFE id they carry.
#[derive(Debug)]
pub struct Identity {
    pub id: SpiffeId,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl Clone for Identity {
    fn clone(&self) -> Self {
        Self {
            id: self.id.clone(),
            chain: self.chain.clone(),
            key: self.key.clone_key(),
        }
    }
}

impl Identity {
    pub fn from_pem(cert: &[u8], key: &[u8], origin: &str) -> Result<Self, IdentityError> {
        let pem = |e: rustls::pki_types::pem::Error| {
            IdentityError::Pem(origin.to_string(), e.to_string())
        };
        let chain = CertificateDer::pem_slice_iter(cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(pem)?;
        let leaf = chain
            .first()
            .ok_or_else(|| IdentityError::NoCertificate(origin.to_string()))?;
        let id = SpiffeId::of_certificate(leaf)?;
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| match e {
            rustls::pki_types::pem::Error::NoItemsFound => IdentityError::NoKey(origin.to_string()),
            e => pem(e),
        })?;
        Ok(Self { id, chain, key })
    }

    pub fn from_files(cert: &str, key: &str) -> Result<Self, IdentityError> {
        Self::from_pem(&read(cert)?, &read(key)?, cert)
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn spiffe_check(
    end_entity: &CertificateDer<'_>,
    clusterset: &str,
    cluster: Option<&str>,
) -> Result<SpiffeId, rustls::Error> {
    let reject =
        || rustls::Error::InvalidCertificate(CertificateError::ApplicationVerificationFailure);
    let id = SpiffeId::of_certificate(end_entity).map_err(|_| reject())?;
    if id.clusterset() != clusterset || cluster.is_some_and(|c| c != id.cluster()) {
        return Err(reject());
    }
    Ok(id)
}

/// Server side: a client must chain to the bundle and be a member of the clusterset.
#[derive(Debug)]
struct MemberClientVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    clusterset: String,
}

impl ClientCertVerifier for MemberClientVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.inner
            .verify_client_cert(end_entity, intermediates, now)?;
        spiffe_check(end_entity, &self.clusterset, None)?;
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Client side: the gateway must chain to the bundle and be the expected cluster's.
/// Certificates carry no DNS names (SPIFFE ids only), so the server name is not used.
#[derive(Debug)]
struct PeerServerVerifier {
    roots: Arc<RootCertStore>,
    algs: WebPkiSupportedAlgorithms,
    clusterset: String,
    cluster: String,
}

impl ServerCertVerifier for PeerServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.algs.all,
        )?;
        spiffe_check(end_entity, &self.clusterset, Some(&self.cluster))?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algs.supported_schemes()
    }
}

/// The gateway's TLS: our identity, clients verified as clusterset members; TLS 1.3 only
/// (QUIC requires it, and the TCP tunnel needs nothing older).
pub fn server_config(
    identity: &Identity,
    bundle: &TrustBundle,
    alpn: &[u8],
) -> Result<rustls::ServerConfig, IdentityError> {
    let provider = provider();
    let inner = WebPkiClientVerifier::builder_with_provider(bundle.roots.clone(), provider.clone())
        .build()
        .map_err(|e| IdentityError::Certificate(e.to_string()))?;
    let verifier = Arc::new(MemberClientVerifier {
        inner,
        clusterset: identity.id.clusterset().to_string(),
    });
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(verifier)
        .with_single_cert(identity.chain.clone(), identity.key.clone_key())?;
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(config)
}

/// A client TLS configuration for tunnels to `cluster`'s gateway.
pub fn client_config(
    identity: &Identity,
    bundle: &TrustBundle,
    cluster: &str,
    alpn: &[u8],
) -> Result<rustls::ClientConfig, IdentityError> {
    let provider = provider();
    let verifier = Arc::new(PeerServerVerifier {
        roots: bundle.roots.clone(),
        algs: provider.signature_verification_algorithms,
        clusterset: identity.id.clusterset().to_string(),
        cluster: cluster.to_string(),
    });
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_client_auth_cert(identity.chain.clone(), identity.key.clone_key())?;
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spiffe_ids() {
        let id = SpiffeId::parse("spiffe://prod/cluster/east/proxy").unwrap();
        assert_eq!((id.clusterset(), id.cluster()), ("prod", "east"));
        assert_eq!(id.to_string(), "spiffe://prod/cluster/east/proxy");
        for bad in [
            "http://prod/cluster/east/proxy",
            "spiffe://prod/ns/east/proxy",
            "spiffe://prod/cluster//proxy",
            "spiffe://prod/cluster/east",
            "spiffe:///cluster/east/x",
            "spiffe://pr od/cluster/east/x",
        ] {
            assert!(SpiffeId::parse(bad).is_err(), "{bad}");
        }
    }
}
