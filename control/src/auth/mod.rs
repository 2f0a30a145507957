//! Authentication: bearer tokens (the admin token, a tokens file, ServiceAccount tokens)
//! and client certificates signed by our CA. Anything else is 401.

pub mod impersonation;
pub mod service_account;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use service_account::{Binding, TokenSigner};

/// The group whose members may use wildcard (`/clusters/*/`) requests.
pub const ADMIN_GROUP: &str = "system:masters";

/// An authenticated user.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
    /// For a ServiceAccount token: where it is valid and what must still exist.
    pub binding: Option<Binding>,
}

/// The group of the control plane's own controllers (the placement controllers): a
/// human administrator is not in it, so what only the system may do (write a Pod mirror)
/// stays the system's even for them.
pub const CONTROLLERS_GROUP: &str = "system:sluice:controllers";

impl User {
    pub fn is_admin(&self) -> bool {
        self.groups.iter().any(|g| g == ADMIN_GROUP)
    }

    /// One of the control plane's own controllers.
    pub fn is_controller(&self) -> bool {
        self.groups.iter().any(|g| g == CONTROLLERS_GROUP)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("reading token file {0}: {1}")]
    Io(String, std::io::Error),
    #[error("token file line {0}: expected token,user,uid[,\"group1,group2\"]")]
    Line(usize),
}

/// Token → user table, and the key that checks ServiceAccount tokens. Static tokens are
/// kept and looked up by their SHA-256 digest, so no comparison ever runs over a secret: how
/// long a lookup takes says nothing of how much of a guessed token was right.
#[derive(Clone, Debug, Default)]
pub struct Authenticator {
    tokens: HashMap<[u8; 32], User>,
    signer: Option<Arc<TokenSigner>>,
}

fn digest(token: &str) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

impl Authenticator {
    pub fn new(admin_token: &str) -> Self {
        let mut tokens = HashMap::new();
        tokens.insert(
            digest(admin_token),
            User {
                name: "admin".into(),
                groups: vec![ADMIN_GROUP.into()],
                binding: None,
            },
        );
        Self {
            tokens,
            signer: None,
        }
    }

    /// Accept `token` for `user` (the in-process controllers' token).
    pub fn add_token(&mut self, token: &str, user: User) {
        self.tokens.insert(digest(token), user);
    }

    /// Accept ServiceAccount tokens signed by `signer`.
    pub fn with_signer(mut self, signer: Arc<TokenSigner>) -> Self {
        self.signer = Some(signer);
        self
    }

    /// The key ServiceAccount tokens are signed with, if configured.
    pub fn signer(&self) -> Option<&Arc<TokenSigner>> {
        self.signer.as_ref()
    }

    /// Add users from a kube-apiserver style static token file:
    /// `token,user,uid[,"group1,group2"]` per line.
    pub fn load_token_file(&mut self, path: &Path) -> Result<(), TokenFileError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| TokenFileError::Io(path.display().to_string(), e))?;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut fields = line.splitn(4, ',');
            let (Some(token), Some(user), Some(_uid)) =
                (fields.next(), fields.next(), fields.next())
            else {
                return Err(TokenFileError::Line(i + 1));
            };
            let groups = fields
                .next()
                .map(|g| {
                    g.trim_matches('"')
                        .split(',')
                        .map(|s| s.trim().to_string())
                        .filter(|s| !s.is_empty())
                        .collect()
                })
                .unwrap_or_default();
            self.tokens.insert(
                digest(token.trim()),
                User {
                    name: user.trim().to_string(),
                    groups,
                    binding: None,
                },
            );
        }
        Ok(())
    }

    /// Who sent a request: a valid bearer token wins, else the verified client certificate.
    pub fn authenticate(
        &self,
        authorization: Option<&str>,
        client_cert: Option<&User>,
    ) -> Option<User> {
        if let Some(token) = authorization.and_then(|h| h.strip_prefix("Bearer ")) {
            let token = token.trim();
            if let Some(user) = self.tokens.get(&digest(token)) {
                return Some(user.clone());
            }
            return self
                .signer
                .as_ref()
                .filter(|_| service_account::looks_like_jwt(token))
                .and_then(|s| s.verify(token, unix_now()).ok())
                .and_then(|claims| {
                    let binding = Binding::from_claims(&claims)?;
                    let ns = &binding.namespace;
                    Some(User {
                        groups: vec![
                            "system:serviceaccounts".to_string(),
                            format!("system:serviceaccounts:{ns}"),
                        ],
                        name: claims.sub,
                        binding: Some(binding),
                    })
                });
        }
        client_cert.cloned()
    }
}

/// The user named by a verified client certificate: CN is the user, each O a group.
pub fn user_from_cert(der: &[u8]) -> Option<User> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    Some(User {
        name,
        groups,
        binding: None,
    })
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_files() {
        let mut a = Authenticator::new("secret");
        assert!(
            a.authenticate(Some("Bearer secret"), None)
                .unwrap()
                .is_admin()
        );
        assert!(a.authenticate(Some("Bearer nope"), None).is_none());
        assert!(a.authenticate(None, None).is_none());
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tokens.csv");
        std::fs::write(&f, "t1,alice,1,\"dev,ops\"\nt2,bob,2\n").unwrap();
        a.load_token_file(&f).unwrap();
        let alice = a.authenticate(Some("Bearer t1"), None).unwrap();
        assert_eq!(alice.groups, vec!["dev", "ops"]);
        assert!(!alice.is_admin());
        std::fs::write(&f, "broken\n").unwrap();
        assert!(a.load_token_file(&f).is_err());
    }
}
