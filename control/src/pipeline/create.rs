//! A create: defaults, server metadata, validation, admission, persist, after-commit.

use serde_json::{Value, json};

use super::commit::{self, Writer};
use super::hooks::{Committed, HookCx};
use super::params::Write;
use super::steps::*;

use crate::errors::{ApiError, ApiResult};
use crate::object;
use crate::state::ApiState;
use crate::storage::{Expect, Op};
use crate::webhooks::{self, matching::Operation};

/// Create `obj`: defaults, server metadata, admission, validation, persist, after-commit.
pub async fn create(
    state: &ApiState,
    target: &Target,
    obj: Value,
    ownership: Ownership,
    w: &mut Write,
) -> ApiResult<Written> {
    let converted = stored_target(state, target)?;
    let (target, mut obj) = match &converted {
        Some((stored, via)) => (stored, via.stored_form(state, &target.cluster, obj).await?),
        None => (target, obj),
    };
    let t = &*target.t;
    let cluster = target.cluster.clone();
    if let (Some(ns), Some(body_ns)) = (&target.namespace, obj["metadata"]["namespace"].as_str())
        && ns != body_ns
    {
        return Err(ApiError::BadRequest(
            "the namespace of the provided object does not match the namespace sent on the request"
                .into(),
        ));
    }
    if object::name(&obj).is_none_or(str::is_empty)
        && let Some(g) = obj["metadata"]["generateName"]
            .as_str()
            .filter(|g| !g.is_empty())
    {
        let name = format!("{g}{}", object::random_suffix());
        object::meta_mut(&mut obj).insert("name".into(), json!(name));
    }
    crate::defaults::apply(&t.kind, &mut obj);
    let name = object::name(&obj).unwrap_or("").to_string();
    let manager = w.manager.clone();
    let user = w.user.clone();
    let admission = webhooks::Admission {
        cluster: &cluster,
        t,
        sub: None,
        operation: Operation::Create,
        name: &name,
        namespace: target.namespace.as_deref(),
        user: user.as_ref(),
        manager: Some(&manager),
        dry_run: w.dry_run,
    };
    if webhooks::mutate(state, &admission, &mut obj, None, &mut reports(w)).await? {
        // What the webhooks set is defaulted as a decoded object would be.
        crate::defaults::apply(&t.kind, &mut obj);
        unchanged_identity(t, &name, target.namespace.as_deref(), &obj)?;
    }
    object::prepare_create(
        &mut obj,
        t,
        state.annotation_for(&cluster),
        target.namespace.as_deref(),
    );
    crate::defaults::on_create(&t.kind, &mut obj);
    let cx = HookCx {
        state,
        t,
        cluster: &cluster,
        manager: Some(&manager),
        user: user.as_ref(),
        warnings: Default::default(),
    };
    if ownership == Ownership::Update {
        crate::apply::record_update(
            &ownership_schema(state, t),
            None,
            &mut obj,
            &w.manager,
            &t.api_version(),
            None,
        );
    }
    validate(state, t, &obj, None)?;
    check_namespace(state, target)?;
    check_reserved(state, t, &cluster, w.user.as_ref(), None, &obj)?;
    if let Some(synced) = w.user.as_ref().and_then(crate::rbac::syncer::cluster_of) {
        crate::rbac::syncer::may_create(&synced, &t.group, &t.resource, &obj).map_err(
            |message| ApiError::RbacForbidden {
                gr: t.gr.clone(),
                name: object::name(&obj).unwrap_or_default().to_string(),
                message,
            },
        )?;
    }
    let hooks = state.hooks.of(t);
    for (i, hook) in hooks.iter().enumerate() {
        if let Err(e) = hook.admit_create(&cx, &mut obj) {
            hooks[..i].iter().for_each(|h| h.release(&obj));
            return Err(e);
        }
    }
    add_warnings(w, &cx);
    let release = |obj: &Value| hooks.iter().for_each(|h| h.release(obj));
    if let Err(e) = validating_admission(state, &admission, Some(&obj), None, w).await {
        release(&obj);
        return Err(e);
    }
    let bytes = encode(state, &obj).inspect_err(|_| release(&obj))?;
    if w.dry_run {
        release(&obj);
        return Ok(Written::Object {
            object: obj,
            revision: state.store.revision(),
        });
    }
    let committed = commit::commit(
        &state.store,
        Writer::Request,
        Op::Put {
            key: target.key(&name),
            value: bytes,
            expect: Expect::Absent,
        },
    )
    .await
    .map_err(|e| {
        release(&obj);
        ApiError::from_storage(e, &t.gr, &name)
    })?;
    crate::controllers::gc_queue::verify_owners(&state.gc, &target.key(&name), &obj);
    for hook in hooks {
        hook.committed(
            &cx,
            Committed::Written {
                new: &obj,
                old: None,
            },
        )
        .await?;
    }
    Ok(Written::Object {
        object: obj,
        revision: committed.revision,
    })
}
