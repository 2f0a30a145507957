//! The Pod a `pods/log`, `pods/exec` or `pods/attach` request names, and which of its containers
//! (`?container=`), as kube-apiserver decides it: the one named, or the only one, or a 400
//! listing them.

use serde_json::Value;

use super::scope::Scope;
use crate::errors::{ApiError, ApiResult};
use crate::state::ApiState;

/// The storage key of Pod `name` of `scope`.
fn key(scope: &Scope<'_>, name: &str) -> ApiResult<crate::storage::Key> {
    Ok(scope.t.prefix.key(
        scope.cluster.as_ref().ok_or(ApiError::MethodNotAllowed)?,
        scope.namespace.as_deref(),
        name,
    ))
}

/// The Pod `name` of `scope` and its storage key, or kube's 404.
pub fn pod(
    state: &ApiState,
    scope: &Scope<'_>,
    name: &str,
) -> ApiResult<(crate::storage::Key, Value)> {
    let key = key(scope, name)?;
    let entry = state
        .store
        .get(&key)
        .ok_or_else(|| ApiError::not_found(&scope.t.gr, name))?;
    let pod =
        serde_json::from_slice(&entry.value).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok((key, pod))
}

/// The container `requested` of `pod` (named `name`) — of any kind: init, app or
/// ephemeral, as kube takes them — or its only app container.
pub fn choose(pod: &Value, name: &str, requested: Option<&str>) -> ApiResult<String> {
    let of = |list: &str| -> Vec<&str> {
        pod["spec"][list]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str())
            .collect()
    };
    let containers = of("containers");
    // kube's order: init containers, containers, ephemeral containers.
    let all: Vec<&str> = of("initContainers")
        .into_iter()
        .chain(containers.iter().copied())
        .chain(of("ephemeralContainers"))
        .collect();
    match requested {
        Some(c) if all.contains(&c) => Ok(c.to_string()),
        Some(c) => Err(ApiError::BadRequest(format!(
            "container {c} is not valid for pod {name}"
        ))),
        None if containers.len() == 1 => Ok(containers[0].to_string()),
        None if containers.is_empty() => Err(ApiError::BadRequest(format!(
            "pod {name} does not have a container"
        ))),
        None => Err(ApiError::BadRequest(format!(
            "a container name must be specified for pod {name}, choose one of: [{}]",
            all.join(" ")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_named_or_only_container_is_chosen_and_others_are_refused() {
        let one = json!({"spec": {"containers": [{"name": "main"}]}});
        let two = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        assert_eq!(choose(&one, "p", None).unwrap(), "main");
        assert_eq!(choose(&two, "p", Some("b")).unwrap(), "b");
        assert_eq!(
            choose(&one, "p", Some("x")).unwrap_err().to_string(),
            "container x is not valid for pod p"
        );
        assert_eq!(
            choose(&two, "p", None).unwrap_err().to_string(),
            "a container name must be specified for pod p, choose one of: [a b]"
        );
        let debugged = json!({"spec": {"initContainers": [{"name": "i"}],
            "containers": [{"name": "a"}, {"name": "b"}], "ephemeralContainers": [{"name": "d"}]}});
        assert_eq!(choose(&debugged, "p", Some("d")).unwrap(), "d");
        assert_eq!(
            choose(&debugged, "p", None).unwrap_err().to_string(),
            "a container name must be specified for pod p, choose one of: [i a b d]"
        );
    }
}
