//! Impersonation (`kubectl --as`, `--as-group`): the `Impersonate-*` headers name the user
//! a request acts as; each thing impersonated needs the `impersonate` verb on it
//! (`users`, `groups`, `serviceaccounts`), checked where the
//! request is authorized.

use http::HeaderMap;

use super::User;
use crate::errors::ApiError;

/// What a request asks to act as.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Impersonation {
    pub user: String,
    pub groups: Vec<String>,
}

/// One permission an impersonation needs: verb `impersonate` on `resource` (core group)
/// named `name` in `namespace`.
pub struct Needed {
    pub resource: String,
    pub namespace: String,
    pub name: String,
}

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA: &str = "impersonate-extra-";

impl Impersonation {
    /// The impersonation a request's headers ask for, if any.
    pub fn from_headers(headers: &HeaderMap) -> Result<Option<Self>, ApiError> {
        let text = |v: &http::HeaderValue| {
            v.to_str()
                .map(str::to_string)
                .map_err(|_| ApiError::BadRequest("impersonation headers must be text".into()))
        };
        let user = headers.get(USER).map(text).transpose()?;
        let groups = headers
            .get_all(GROUP)
            .iter()
            .map(text)
            .collect::<Result<Vec<_>, _>>()?;
        // A user here has no uid or extra fields to act as: refused rather than ignored.
        if headers.contains_key(UID) || headers.keys().any(|k| k.as_str().starts_with(EXTRA)) {
            return Err(ApiError::BadRequest(
                "impersonating a uid or extra fields (Impersonate-Uid, Impersonate-Extra-*) is not supported".into(),
            ));
        }
        match user {
            Some(user) if !user.is_empty() => Ok(Some(Self { user, groups })),
            _ if !groups.is_empty() => Err(ApiError::BadRequest(
                "requested impersonation of groups without impersonating a user".into(),
            )),
            _ => Ok(None),
        }
    }

    /// Whether it names an identity that reaches beyond one logical cluster:
    /// `system:masters`, Sluice's controllers, a syncer, or a part of the clusterset.
    pub fn is_privileged(&self) -> bool {
        use crate::rbac::{clusterset, syncer};
        self.groups.iter().any(|g| {
            g == super::ADMIN_GROUP
                || g == super::CONTROLLERS_GROUP
                || g == syncer::GROUP
                || g == clusterset::GROUP
        }) || self.user.starts_with(syncer::USER_PREFIX)
            || self.user.starts_with(clusterset::USER_PREFIX)
    }

    /// The permissions this impersonation needs.
    pub fn needed(&self) -> Vec<Needed> {
        let mut out = Vec::new();
        match self
            .user
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.split_once(':'))
        {
            Some((ns, name)) => out.push(Needed {
                resource: "serviceaccounts".into(),
                namespace: ns.to_string(),
                name: name.to_string(),
            }),
            None => out.push(Needed {
                resource: "users".into(),
                namespace: String::new(),
                name: self.user.clone(),
            }),
        }
        for g in &self.groups {
            out.push(Needed {
                resource: "groups".into(),
                namespace: String::new(),
                name: g.clone(),
            });
        }
        out
    }

    /// The user the request then acts as (a ServiceAccount gets its groups, as its token
    /// would give it).
    pub fn into_user(self) -> User {
        let mut groups = self.groups;
        if let Some((ns, _)) = self
            .user
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.split_once(':'))
        {
            for g in [
                "system:serviceaccounts".to_string(),
                format!("system:serviceaccounts:{ns}"),
            ] {
                if !groups.contains(&g) {
                    groups.push(g);
                }
            }
        }
        User {
            name: self.user,
            groups,
            binding: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_name_the_user_and_what_it_needs() {
        let mut h = HeaderMap::new();
        assert_eq!(Impersonation::from_headers(&h).unwrap(), None);
        h.append(GROUP, "devs".parse().unwrap());
        assert!(Impersonation::from_headers(&h).is_err());
        h.append(USER, "system:serviceaccount:ci:bot".parse().unwrap());
        let i = Impersonation::from_headers(&h).unwrap().unwrap();
        let needed = i.needed();
        assert_eq!(needed[0].resource, "serviceaccounts");
        assert_eq!(
            (needed[0].namespace.as_str(), needed[0].name.as_str()),
            ("ci", "bot")
        );
        assert_eq!(needed[1].resource, "groups");
        let u = i.into_user();
        assert_eq!(
            u.groups,
            [
                "devs",
                "system:serviceaccounts",
                "system:serviceaccounts:ci"
            ]
        );
    }
}
