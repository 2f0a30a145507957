//! A clusterset certificate authority: issues the SPIFFE certificates proxies and
//! gateways present to each other. `sluice dev up` and the tests use it; real clusters can
//! bring certificates from any CA (cert-manager, SPIRE) as long as they carry the URI SAN.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use time::{Duration, OffsetDateTime};

use super::identity::SpiffeId;

#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("certificate generation failed: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("{0}")]
    Invalid(String),
}

/// A CA certificate and its key, in PEM.
pub struct Authority {
    cert_pem: String,
    key_pem: String,
}

/// A certificate and its key, in PEM.
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Authority {
    /// A new self-signed root named `name`, valid ten years.
    pub fn generate(name: &str) -> Result<Self, CaError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let now = OffsetDateTime::now_utc();
        params.not_before = now - Duration::hours(1);
        params.not_after = now + Duration::days(3650);
        let cert = params.self_signed(&key)?;
        Ok(Self {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    pub fn from_pem(cert_pem: String, key_pem: String) -> Self {
        Self { cert_pem, key_pem }
    }

    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// A certificate for `id`, usable both to serve (gateway) and as a client (proxy).
    pub fn issue(&self, id: &SpiffeId, days: i64) -> Result<Issued, CaError> {
        let now = OffsetDateTime::now_utc();
        self.issue_between(id, now - Duration::hours(1), now + Duration::days(days))
    }

    /// A certificate valid only between `not_before` and `not_after` (tests issue expired
    /// ones with this).
    pub fn issue_between(
        &self,
        id: &SpiffeId,
        not_before: OffsetDateTime,
        not_after: OffsetDateTime,
    ) -> Result<Issued, CaError> {
        let issuer = Issuer::from_ca_cert_pem(&self.cert_pem, KeyPair::from_pem(&self.key_pem)?)?;
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, id.cluster());
        let uri = id
            .to_string()
            .try_into()
            .map_err(|e: rcgen::Error| CaError::Invalid(e.to_string()))?;
        params.subject_alt_names = vec![SanType::URI(uri)];
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.not_before = not_before;
        params.not_after = not_after;
        let cert = params.signed_by(&key, &issuer)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_certificates_carry_the_spiffe_id() {
        let ca = Authority::generate("test-ca").unwrap();
        let id = SpiffeId::new("prod", "east", "proxy").unwrap();
        let issued = ca.issue(&id, 1).unwrap();
        let ident = super::super::identity::Identity::from_pem(
            issued.cert_pem.as_bytes(),
            issued.key_pem.as_bytes(),
            "t",
        )
        .unwrap();
        assert_eq!(ident.id, id);
    }
}
