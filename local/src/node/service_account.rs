//! A Pod's ServiceAccount credentials, as kubelet projects them: a token from TokenRequest
//! bound to the Pod (renewed before it expires), the cluster's CA and the namespace, in a
//! directory mounted at `/var/run/secrets/kubernetes.io/serviceaccount` in the Pod's own
//! mount namespace, plus the `KUBERNETES_SERVICE_*` environment; so a process in the Pod
//! reaches its API server the standard way (kube-rs `Config::incluster`, client-go
//! `rest.InClusterConfig`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use serde_json::Value;

/// Where Pods find their credentials.
pub const MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// How long a projected token lives (kubelet's default is an hour too).
const TOKEN_SECONDS: i64 = 3600;

/// The API server Pods talk to: its address and the CA that signed its certificate.
#[derive(Clone, Debug)]
pub struct ApiEndpoint {
    pub host: String,
    pub port: u16,
    pub ca_pem: String,
}

impl ApiEndpoint {
    /// From the node agent's own kubeconfig (its current context's cluster).
    pub fn from_kubeconfig(path: &Path) -> Result<Self, String> {
        let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| e.to_string())?;
        let current = kc.current_context.clone().unwrap_or_default();
        let cluster_name = kc
            .contexts
            .iter()
            .find(|c| c.name == current)
            .and_then(|c| c.context.as_ref())
            .map(|c| c.cluster.clone());
        let cluster = kc
            .clusters
            .iter()
            .find(|c| Some(&c.name) == cluster_name.as_ref())
            .or(kc.clusters.first())
            .and_then(|c| c.cluster.as_ref())
            .ok_or("the kubeconfig names no cluster")?;
        let url: http::Uri = cluster
            .server
            .as_deref()
            .ok_or("the kubeconfig's cluster has no server")?
            .parse()
            .map_err(|e| format!("server URL: {e}"))?;
        let host = url
            .host()
            .ok_or("server URL without host")?
            .trim_matches(['[', ']'])
            .to_string();
        let port = url.port_u16().unwrap_or(443);
        let ca_pem = match (
            &cluster.certificate_authority_data,
            &cluster.certificate_authority,
        ) {
            (Some(data), _) => {
                use base64::Engine;
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(data)
                    .map_err(|e| format!("certificate-authority-data: {e}"))?;
                String::from_utf8(bytes).map_err(|e| e.to_string())?
            }
            (None, Some(file)) => {
                std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?
            }
            (None, None) => return Err("the kubeconfig's cluster has no CA".into()),
        };
        Ok(Self { host, port, ca_pem })
    }

    /// The environment kubelet gives every container for the `kubernetes` Service.
    pub fn env(&self) -> Vec<(String, String)> {
        let (h, p) = (&self.host, self.port);
        vec![
            ("KUBERNETES_SERVICE_HOST".into(), h.clone()),
            ("KUBERNETES_SERVICE_PORT".into(), p.to_string()),
            ("KUBERNETES_SERVICE_PORT_HTTPS".into(), p.to_string()),
            ("KUBERNETES_PORT".into(), format!("tcp://{h}:{p}")),
            (format!("KUBERNETES_PORT_{p}_TCP"), format!("tcp://{h}:{p}")),
            (format!("KUBERNETES_PORT_{p}_TCP_PROTO"), "tcp".into()),
            (format!("KUBERNETES_PORT_{p}_TCP_ADDR"), h.clone()),
            (format!("KUBERNETES_PORT_{p}_TCP_PORT"), p.to_string()),
        ]
    }
}

/// The ServiceAccount a Pod runs as, or `None` when it asks for no token.
fn account_of(pod: &Value) -> (String, Option<bool>) {
    let spec = &pod["spec"];
    let name = spec["serviceAccountName"]
        .as_str()
        .or(spec["serviceAccount"].as_str())
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
        .to_string();
    (name, spec["automountServiceAccountToken"].as_bool())
}

/// Projected credentials of one Pod; the renewal stops when this is dropped.
pub struct Projected {
    pub dir: PathBuf,
    renew: tokio::task::JoinHandle<()>,
}

impl Drop for Projected {
    fn drop(&mut self) {
        self.renew.abort();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Write `pod`'s credentials for `container` under `root/<pod uid>/<container>` and keep
/// its token fresh; `None` when the Pod or its ServiceAccount opts out of automounting.
pub async fn project(
    client: &kube::Client,
    api: &ApiEndpoint,
    root: &Path,
    pod: &Value,
    container: &str,
) -> Result<Option<Projected>, String> {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or("default");
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
    if uid.is_empty() || uid.contains(['/', '.']) {
        return Err(format!("pod uid {uid:?} cannot name a directory"));
    }
    let (account, pod_says) = account_of(pod);
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let sa = accounts
        .get(&account)
        .await
        .map_err(|e| format!("serviceaccount {ns}/{account}: {e}"))?;
    if !pod_says
        .or(sa.automount_service_account_token)
        .unwrap_or(true)
    {
        return Ok(None);
    }
    let request = serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "expirationSeconds": TOKEN_SECONDS,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": uid},
        },
    });
    let token = issue(&accounts, &account, &request).await?;
    let dir = root.join(uid).join(container);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    write(&dir.join("ca.crt"), &api.ca_pem)?;
    write(&dir.join("namespace"), ns)?;
    write(&dir.join("token"), &token)?;
    let renew = tokio::spawn({
        let dir = dir.clone();
        async move {
            // kubelet renews at 80% of the lifetime; a failed renewal is tried again soon.
            let mut wait = Duration::from_secs((TOKEN_SECONDS as u64) * 4 / 5);
            loop {
                tokio::time::sleep(wait).await;
                match issue(&accounts, &account, &request).await {
                    Ok(t) => {
                        let _ = write(&dir.join("token"), &t);
                        wait = Duration::from_secs((TOKEN_SECONDS as u64) * 4 / 5);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "renewing a pod's token");
                        wait = Duration::from_secs(10);
                    }
                }
            }
        }
    });
    Ok(Some(Projected { dir, renew }))
}

async fn issue(
    accounts: &Api<ServiceAccount>,
    account: &str,
    request: &Value,
) -> Result<String, String> {
    let answered: TokenRequest = accounts
        .create_subresource("token", account, &PostParams::default(), request)
        .await
        .map_err(|e| format!("token for serviceaccount {account}: {e}"))?;
    answered
        .status
        .and_then(|s| s.token)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| "TokenRequest answered without a token".to_string())
}

/// Replace a file at once (a reader sees the old token or the new one, never half),
/// readable by its owner only.
fn write(path: &Path, contents: &str) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(contents.as_bytes()))
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| format!("{}: {e}", path.display()))
}
