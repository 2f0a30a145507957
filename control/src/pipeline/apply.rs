//! Server-side apply: a create when there is no object, a merge into it otherwise.

use serde_json::{Value, json};

use super::create::create;
use super::decode::check_decoded;
use super::modify::{Change, apply_conflict, modify};
use super::params::Write;
use super::steps::*;

use crate::errors::{ApiError, ApiResult};
use crate::object;
use crate::state::ApiState;

/// Server-side apply of `applied` by `manager`: creates the object when there is none,
/// merges into it otherwise. Returns whether it created.
pub async fn apply(
    state: &ApiState,
    target: &Target,
    name: &str,
    mut applied: Value,
    manager: String,
    force: bool,
    w: &mut Write,
) -> ApiResult<(Written, bool)> {
    let t = &*target.t;
    check_decoded(state, t, &mut applied, w)?;
    crate::apply::strip_managed(&mut applied);
    if object::name(&applied).is_some_and(|n| n != name) {
        return Err(ApiError::BadRequest(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            object::name(&applied).unwrap_or("")
        )));
    }
    if state.store.get(&target.key(name)).is_none() {
        let mut created = crate::apply::apply(
            &ownership_schema(state, t),
            None,
            &applied,
            &manager,
            &t.api_version(),
            force,
        )
        .map_err(|c| apply_conflict(t, name, &c))?;
        object::meta_mut(&mut created).insert("name".into(), json!(name));
        match create(state, target, created, Ownership::Applied, w).await {
            // Created by someone else meanwhile: apply onto it below.
            Err(ApiError::AlreadyExists { .. }) => {}
            other => return other.map(|written| (written, true)),
        }
    }
    let change = Change::Apply {
        applied,
        manager,
        force,
    };
    Ok((modify(state, target, name, change, w).await?, false))
}
