//! ServiceAccount tokens: JWTs (ES256) signed with the installation's key
//! (`service-account.key` in the data dir, shared by copying the directory as the rest of
//! the PKI is), carrying kube-apiserver's claims plus the logical cluster they belong to.
//! A token authenticates only in its own logical cluster, only for the API audience, only
//! until it expires, and only while its ServiceAccount (and the Pod it is bound to) exists.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair, UnparsedPublicKey};
use serde::{Deserialize, Serialize};
use sluice_api::LogicalClusterPath;

use crate::storage::{ResourcePrefix, Store};

/// The issuer and the audience the API server accepts.
pub const ISSUER: &str = "https://sluice.dev/control";
pub const API_AUDIENCE: &str = "sluice";

/// An object a token names by name and uid.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRef {
    pub name: String,
    pub uid: String,
}

/// The `kubernetes.io` claim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubeClaim {
    pub namespace: String,
    pub serviceaccount: ObjectRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<ObjectRef>,
}

/// A token's claims.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    pub iss: String,
    pub sub: String,
    pub aud: Vec<String>,
    pub exp: i64,
    pub iat: i64,
    pub nbf: i64,
    pub jti: String,
    #[serde(rename = "kubernetes.io")]
    pub kube: KubeClaim,
    /// The logical cluster of the ServiceAccount.
    #[serde(rename = "sluice.dev/cluster")]
    pub cluster: String,
}

/// Why a token was not accepted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    #[error("malformed token")]
    Malformed,
    #[error("invalid signature")]
    Signature,
    #[error("token has expired")]
    Expired,
    #[error("token is not valid yet")]
    NotYetValid,
    #[error("token audiences do not include the API server's")]
    Audience,
    #[error("service account key: {0}")]
    Key(String),
}

/// Signs and verifies ServiceAccount tokens.
pub struct TokenSigner {
    key: EcdsaKeyPair,
    public: UnparsedPublicKey<Vec<u8>>,
    rng: SystemRandom,
}

impl std::fmt::Debug for TokenSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenSigner")
    }
}

const HEADER: &str = r#"{"alg":"ES256","typ":"JWT","kid":"sluice"}"#;

impl TokenSigner {
    /// From a PKCS#8 P-256 key.
    pub fn from_pkcs8(der: &[u8]) -> Result<Self, TokenError> {
        let rng = SystemRandom::new();
        let key = EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, der, &rng)
            .map_err(|e| TokenError::Key(e.to_string()))?;
        let public = UnparsedPublicKey::new(
            &signature::ECDSA_P256_SHA256_FIXED,
            key.public_key().as_ref().to_vec(),
        );
        Ok(Self { key, public, rng })
    }

    /// A signed token with `claims`.
    pub fn issue(&self, claims: &Claims) -> Result<String, TokenError> {
        let payload = serde_json::to_vec(claims).map_err(|_| TokenError::Malformed)?;
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(HEADER),
            URL_SAFE_NO_PAD.encode(payload)
        );
        let sig = self
            .key
            .sign(&self.rng, signing_input.as_bytes())
            .map_err(|e| TokenError::Key(e.to_string()))?;
        Ok(format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(sig)))
    }

    /// The claims of a token this key signed, checked for time (`now`, Unix seconds) and
    /// audience.
    pub fn verify(&self, token: &str, now: i64) -> Result<Claims, TokenError> {
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(sig), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenError::Malformed);
        };
        let sig = URL_SAFE_NO_PAD
            .decode(sig)
            .map_err(|_| TokenError::Malformed)?;
        let signing_input = &token[..header.len() + 1 + payload.len()];
        self.public
            .verify(signing_input.as_bytes(), &sig)
            .map_err(|_| TokenError::Signature)?;
        let payload = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| TokenError::Malformed)?;
        let claims: Claims = serde_json::from_slice(&payload).map_err(|_| TokenError::Malformed)?;
        if now >= claims.exp {
            return Err(TokenError::Expired);
        }
        if now < claims.nbf {
            return Err(TokenError::NotYetValid);
        }
        if !claims.aud.iter().any(|a| a == API_AUDIENCE) {
            return Err(TokenError::Audience);
        }
        Ok(claims)
    }
}

/// Whether a token looks like a JWT rather than a static token.
pub fn looks_like_jwt(token: &str) -> bool {
    token.starts_with("eyJ") && token.matches('.').count() == 2
}

/// What a verified token still depends on: its ServiceAccount (and Pod) existing with the
/// uid the token names, in the logical cluster it was issued in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    pub cluster: LogicalClusterPath,
    pub namespace: String,
    pub service_account: ObjectRef,
    pub pod: Option<ObjectRef>,
}

impl Binding {
    pub fn from_claims(claims: &Claims) -> Option<Self> {
        Some(Self {
            cluster: claims.cluster.parse().ok()?,
            namespace: claims.kube.namespace.clone(),
            service_account: claims.kube.serviceaccount.clone(),
            pod: claims.kube.pod.clone(),
        })
    }

    /// Whether the objects the token is bound to still exist, with the same uids.
    pub fn holds(&self, store: &Store) -> bool {
        let exists = |resource: &str, r: &ObjectRef| {
            store
                .get(&ResourcePrefix::new("", resource).key(
                    &self.cluster,
                    Some(&self.namespace),
                    &r.name,
                ))
                .and_then(|e| serde_json::from_slice::<serde_json::Value>(&e.value).ok())
                .is_some_and(|v| v["metadata"]["uid"] == r.uid.as_str())
        };
        exists("serviceaccounts", &self.service_account)
            && self.pod.as_ref().is_none_or(|p| exists("pods", p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer() -> TokenSigner {
        let rng = SystemRandom::new();
        let der = EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .unwrap();
        TokenSigner::from_pkcs8(der.as_ref()).unwrap()
    }

    fn claims(exp: i64, aud: &str) -> Claims {
        Claims {
            iss: ISSUER.into(),
            sub: "system:serviceaccount:default:bot".into(),
            aud: vec![aud.into()],
            exp,
            iat: 100,
            nbf: 100,
            jti: "j".into(),
            kube: KubeClaim {
                namespace: "default".into(),
                serviceaccount: ObjectRef {
                    name: "bot".into(),
                    uid: "u".into(),
                },
                pod: None,
            },
            cluster: "root:a".into(),
        }
    }

    #[test]
    fn tokens_verify_until_they_expire_and_only_with_their_key() {
        let s = signer();
        let t = s.issue(&claims(200, API_AUDIENCE)).unwrap();
        assert!(looks_like_jwt(&t));
        assert_eq!(
            s.verify(&t, 150).unwrap().sub,
            "system:serviceaccount:default:bot"
        );
        assert_eq!(s.verify(&t, 200), Err(TokenError::Expired));
        assert_eq!(s.verify(&t, 50), Err(TokenError::NotYetValid));
        assert_eq!(signer().verify(&t, 150), Err(TokenError::Signature));
        let vault = s.issue(&claims(200, "vault")).unwrap();
        assert_eq!(s.verify(&vault, 150), Err(TokenError::Audience));
        // Tampering with the claims breaks the signature; garbage is malformed.
        let mut parts: Vec<&str> = t.split('.').collect();
        let forged =
            URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims(9_999, API_AUDIENCE)).unwrap());
        parts[1] = &forged;
        assert_eq!(s.verify(&parts.join("."), 150), Err(TokenError::Signature));
        for junk in ["", "a.b", "a.b.c", "eyJ.eyJ.!!", "a.b.c.d", "é.é.é"] {
            assert!(s.verify(junk, 150).is_err(), "{junk}");
        }
    }
}
