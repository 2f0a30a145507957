//! The control plane's PKI: a CA and a serving certificate generated into the data
//! directory on first start and reused after, the admin token, and client certificates.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};

#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: missing (make the credentials with `sluice pki --out DIR`)")]
    Missing { path: PathBuf },
    #[error("certificate generation failed: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("TLS configuration failed: {0}")]
    Tls(String),
}

/// The PEM material the server and its clients need.
pub struct Pki {
    pub ca_cert_pem: String,
    ca_key_pem: String,
    pub serving_cert_pem: String,
    serving_key_pem: String,
    pub admin_token: String,
    /// PKCS#8 DER of the key ServiceAccount tokens are signed with.
    pub service_account_key_der: Vec<u8>,
}

fn read(path: &Path) -> Result<Option<String>, PkiError> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(PkiError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Write a file readable only by its owner (keys and tokens).
pub fn write_private(path: &Path, contents: &str) -> Result<(), PkiError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| PkiError::Io {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io)?;
    f.write_all(contents.as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

fn validity(params: &mut CertificateParams, days: i64) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(days);
}

pub(crate) fn random_token() -> String {
    use rand::Rng;
    let bytes: [u8; 24] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Files of the credentials directory a chart-installed control plane mounts read-only
/// (`sluice pki --out`): everything but the serving certificate.
pub const CREDENTIAL_FILES: [&str; 4] = ["ca.crt", "ca.key", "service-account.key", "admin.token"];

/// How missing credentials are treated.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Missing {
    Create,
    Refuse,
}

/// The CA, tokens and ServiceAccount signing key: what every replica of one control
/// plane must share.
struct Credentials {
    ca_cert_pem: String,
    ca_key_pem: String,
    admin_token: String,
    service_account_key_der: Vec<u8>,
}

impl Credentials {
    fn load(dir: &Path, missing: Missing) -> Result<Self, PkiError> {
        let absent = |name: &str| PkiError::Missing {
            path: dir.join(name),
        };
        if missing == Missing::Create {
            std::fs::create_dir_all(dir).map_err(|source| PkiError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let (ca_cert_pem, ca_key_pem) =
            match (read(&dir.join("ca.crt"))?, read(&dir.join("ca.key"))?) {
                (Some(c), Some(k)) => (c, k),
                (None, _) if missing == Missing::Refuse => return Err(absent("ca.crt")),
                (_, None) if missing == Missing::Refuse => return Err(absent("ca.key")),
                _ => {
                    let key = KeyPair::generate()?;
                    let mut params = CertificateParams::new(Vec::<String>::new())?;
                    params
                        .distinguished_name
                        .push(DnType::CommonName, "sluice-ca");
                    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
                    params.key_usages = vec![
                        KeyUsagePurpose::KeyCertSign,
                        KeyUsagePurpose::CrlSign,
                        KeyUsagePurpose::DigitalSignature,
                    ];
                    validity(&mut params, 3650);
                    let cert = params.self_signed(&key)?;
                    let (c, k) = (cert.pem(), key.serialize_pem());
                    write_private(&dir.join("ca.key"), &k)?;
                    write_private(&dir.join("ca.crt"), &c)?;
                    (c, k)
                }
            };
        let token_file = |name: &str| -> Result<String, PkiError> {
            match read(&dir.join(name))? {
                Some(t) if !t.trim().is_empty() => Ok(t.trim().to_string()),
                _ if missing == Missing::Refuse => Err(absent(name)),
                _ => {
                    let t = random_token();
                    write_private(&dir.join(name), &t)?;
                    Ok(t)
                }
            }
        };
        let admin_token = token_file("admin.token")?;
        let sa_key = match read(&dir.join("service-account.key"))? {
            Some(pem) => KeyPair::from_pem(&pem)?,
            None if missing == Missing::Refuse => return Err(absent("service-account.key")),
            None => {
                let key = KeyPair::generate()?;
                write_private(&dir.join("service-account.key"), &key.serialize_pem())?;
                key
            }
        };
        Ok(Self {
            ca_cert_pem,
            ca_key_pem,
            admin_token,
            service_account_key_der: sa_key.serialize_der(),
        })
    }

    /// A serving certificate for `names`, signed by the CA.
    fn issue_serving(&self, names: &[String]) -> Result<(String, String), PkiError> {
        let ca_key = KeyPair::from_pem(&self.ca_key_pem)?;
        let issuer = Issuer::from_ca_cert_pem(&self.ca_cert_pem, ca_key)?;
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, "sluice-control");
        params.subject_alt_names = names
            .iter()
            .map(|n| match n.parse::<std::net::IpAddr>() {
                Ok(ip) => Ok(SanType::IpAddress(ip)),
                Err(_) => n.clone().try_into().map(SanType::DnsName),
            })
            .collect::<Result<_, _>>()?;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        validity(&mut params, 365);
        let cert = params.signed_by(&key, &issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    fn into_pki(self, (serving_cert_pem, serving_key_pem): (String, String)) -> Pki {
        Pki {
            ca_cert_pem: self.ca_cert_pem,
            ca_key_pem: self.ca_key_pem,
            serving_cert_pem,
            serving_key_pem,
            admin_token: self.admin_token,
            service_account_key_der: self.service_account_key_der,
        }
    }
}

/// The names a serving certificate carries: loopback, then `hosts` (no repeats).
fn serving_names(hosts: &[String]) -> Vec<String> {
    let mut names: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    for h in hosts {
        if !names.contains(h) {
            names.push(h.clone());
        }
    }
    names
}

impl Pki {
    /// Load the CA, serving certificate and admin token from `dir`, creating what is
    /// missing. The serving certificate is re-issued (by the same CA) when `hosts` are not
    /// all among its names.
    pub fn load_or_create(dir: &Path, hosts: &[String]) -> Result<Self, PkiError> {
        let creds = Credentials::load(dir, Missing::Create)?;
        let names = serving_names(hosts);
        let recorded = read(&dir.join("serving.hosts"))?.unwrap_or_default();
        let covered = names.iter().all(|n| recorded.lines().any(|l| l == n));
        let serving = match (
            covered,
            read(&dir.join("serving.crt"))?,
            read(&dir.join("serving.key"))?,
        ) {
            (true, Some(c), Some(k)) => (c, k),
            _ => {
                let (c, k) = creds.issue_serving(&names)?;
                write_private(&dir.join("serving.key"), &k)?;
                write_private(&dir.join("serving.crt"), &c)?;
                write_private(&dir.join("serving.hosts"), &names.join("\n"))?;
                (c, k)
            }
        };
        Ok(creds.into_pki(serving))
    }

    /// Credentials made elsewhere (`sluice pki`), read from `dir` without writing to it
    /// (a mounted Secret); every file of [`CREDENTIAL_FILES`] must be there. The serving
    /// certificate for `hosts` is issued anew, in memory.
    pub fn load(dir: &Path, hosts: &[String]) -> Result<Self, PkiError> {
        let creds = Credentials::load(dir, Missing::Refuse)?;
        let serving = creds.issue_serving(&serving_names(hosts))?;
        Ok(creds.into_pki(serving))
    }

    /// Make the shared credentials in `dir` (what is there already is kept): for control
    /// plane replicas that mount them, and for kubeconfigs made away from the server.
    pub fn create_credentials(dir: &Path) -> Result<(), PkiError> {
        Credentials::load(dir, Missing::Create).map(|_| ())
    }

    /// A client certificate for `user` in `groups`, signed by the CA.
    pub fn issue_client_cert(
        &self,
        user: &str,
        groups: &[&str],
    ) -> Result<(String, String), PkiError> {
        self.issue(user, groups, None)
    }

    /// A certificate for an agent of a physical cluster: client identity `user` in
    /// `groups`, which also serves TLS as `server_name` (the per-cluster name the control
    /// plane checks before it sends a request, [`sluice_api::liveness::syncer_server_name`]).
    pub fn issue_agent_cert(
        &self,
        user: &str,
        groups: &[&str],
        server_name: &str,
    ) -> Result<(String, String), PkiError> {
        self.issue(user, groups, Some(server_name))
    }

    fn issue(
        &self,
        user: &str,
        groups: &[&str],
        server_name: Option<&str>,
    ) -> Result<(String, String), PkiError> {
        let ca_key = KeyPair::from_pem(&self.ca_key_pem)?;
        let issuer = Issuer::from_ca_cert_pem(&self.ca_cert_pem, ca_key)?;
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, user);
        for g in groups {
            params.distinguished_name.push(DnType::OrganizationName, *g);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        if let Some(name) = server_name {
            params.subject_alt_names = vec![SanType::DnsName(name.to_string().try_into()?)];
            params
                .extended_key_usages
                .push(ExtendedKeyUsagePurpose::ServerAuth);
        }
        validity(&mut params, 365);
        let cert = params.signed_by(&key, &issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// The TLS client configuration the control plane reaches clusters' agents with: the
    /// CA as the only root, and a certificate for
    /// [`sluice_api::liveness::CONTROL_PLANE_USER`], issued at each start.
    pub fn agent_client_config(&self) -> Result<rustls::ClientConfig, PkiError> {
        let tls = |e: &dyn std::fmt::Display| PkiError::Tls(e.to_string());
        let (cert, key) = self.issue_client_cert(sluice_api::liveness::CONTROL_PLANE_USER, &[])?;
        let roots = self.ca_roots()?;
        let (certs, key) = chain_and_key(&cert, &key)?;
        let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| tls(&e))?
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)
        .map_err(|e| tls(&e))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }

    /// The CA as the only trusted root.
    fn ca_roots(&self) -> Result<rustls::RootCertStore, PkiError> {
        let tls = |e: &dyn std::fmt::Display| PkiError::Tls(e.to_string());
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(self.ca_cert_pem.as_bytes()) {
            roots.add(c.map_err(|e| tls(&e))?).map_err(|e| tls(&e))?;
        }
        Ok(roots)
    }

    /// rustls server configuration: our serving certificate; client certificates are
    /// optional and, when sent, must chain to our CA.
    pub fn server_config(&self) -> Result<rustls::ServerConfig, PkiError> {
        let tls = |e: &dyn std::fmt::Display| PkiError::Tls(e.to_string());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(self.ca_roots()?),
            provider.clone(),
        )
        .allow_unauthenticated()
        .build()
        .map_err(|e| tls(&e))?;
        let (certs, key) = chain_and_key(&self.serving_cert_pem, &self.serving_key_pem)?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| tls(&e))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs, key)
            .map_err(|e| tls(&e))?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(config)
    }
}

/// A certificate chain and its key, from PEM, as rustls takes them.
fn chain_and_key(
    cert_pem: &str,
    key_pem: &str,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), PkiError> {
    let tls = |e: &dyn std::fmt::Display| PkiError::Tls(e.to_string());
    let certs = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| tls(&e))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| tls(&e))?;
    Ok((certs, key))
}

/// A kubeconfig for `server` (a URL that may include `/clusters/<path>`).
/// A kubeconfig that authenticates with a client certificate.
pub fn kubeconfig_with_cert(
    server: &str,
    ca_pem: &str,
    context: &str,
    cert_pem: &str,
    key_pem: &str,
) -> String {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {context}\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\ncontexts:\n- name: {context}\n  context:\n    cluster: {context}\n    user: {context}\ncurrent-context: {context}\nusers:\n- name: {context}\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\npreferences: {{}}\n",
        b64(ca_pem),
        b64(cert_pem),
        b64(key_pem),
    )
}

pub fn kubeconfig(server: &str, ca_pem: &str, context: &str, user: &str, token: &str) -> String {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {context}\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\ncontexts:\n- name: {context}\n  context:\n    cluster: {context}\n    user: {user}\ncurrent-context: {context}\nusers:\n- name: {user}\n  user:\n    token: {token}\npreferences: {{}}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_then_reuses() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().unwrap();
        let a = Pki::load_or_create(dir.path(), &["127.0.0.9".into()]).unwrap();
        let b = Pki::load_or_create(dir.path(), &["127.0.0.9".into()]).unwrap();
        assert_eq!(a.ca_cert_pem, b.ca_cert_pem);
        assert_eq!(a.serving_cert_pem, b.serving_cert_pem);
        assert_eq!(a.admin_token, b.admin_token);
        let c = Pki::load_or_create(dir.path(), &["example.test".into()]).unwrap();
        assert_eq!(a.ca_cert_pem, c.ca_cert_pem);
        assert_ne!(a.serving_cert_pem, c.serving_cert_pem);
        assert!(c.server_config().is_ok());
        assert!(c.issue_client_cert("alice", &["dev"]).is_ok());
    }

    #[test]
    fn credentials_made_elsewhere_are_read_without_writing() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            Pki::load(dir.path(), &[]),
            Err(PkiError::Missing { .. })
        ));
        Pki::create_credentials(dir.path()).unwrap();
        let files = |d: &Path| {
            let mut v: Vec<String> = std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        let mut expected: Vec<String> = CREDENTIAL_FILES.iter().map(|f| f.to_string()).collect();
        expected.sort();
        assert_eq!(files(dir.path()), expected);
        let a = Pki::load(dir.path(), &["sluice.example".into()]).unwrap();
        assert_eq!(files(dir.path()), expected, "load wrote into the directory");
        // Replicas loading the same credentials share the CA and tokens.
        let b = Pki::load(dir.path(), &[]).unwrap();
        assert_eq!(a.ca_cert_pem, b.ca_cert_pem);
        assert_eq!(a.admin_token, b.admin_token);
        assert_eq!(a.service_account_key_der, b.service_account_key_der);
        assert!(a.server_config().is_ok());
        // One file gone: refused, naming it.
        std::fs::remove_file(dir.path().join("admin.token")).unwrap();
        match Pki::load(dir.path(), &[]) {
            Err(e @ PkiError::Missing { .. }) => {
                assert!(e.to_string().contains("admin.token"), "{e}")
            }
            other => panic!("{:?}", other.err()),
        }
    }
}
