//! Container probes as kubelet runs them: `httpGet` (HTTP or HTTPS, 2xx/3xx is success),
//! `tcpSocket` (connects) and `exec` (exits 0), the command run inside the container
//! beside its process `pid` ([`super::beside`]): its files and volumes where it sees them,
//! its environment.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// One probe attempt within its `timeoutSeconds` (at least 1 s); a probe of no known kind
/// succeeds, as kubelet treats an absent probe.
pub async fn probe(probe: &Value, c: &Value, ip: Ipv4Addr, pid: u32) -> bool {
    let timeout = Duration::from_secs(probe["timeoutSeconds"].as_u64().unwrap_or(1).max(1));
    let attempt = async {
        if let Some(h) = probe["httpGet"].as_object() {
            http_get(h, c, ip).await
        } else if let Some(t) = probe["tcpSocket"].as_object() {
            let port = port_of(c, &t["port"])?;
            Some(tokio::net::TcpStream::connect((ip, port)).await.is_ok())
        } else if let Some(cmd) = probe["exec"]["command"].as_array() {
            // Inside the container, as kubelet runs it: its files, volumes and environment.
            let argv: Vec<String> = cmd
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect();
            let Ok((mut command, _)) = crate::node::beside::command(&argv, pid, false) else {
                return Some(false);
            };
            command
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .process_group(0);
            Some(command.status().await.map(|s| s.success()).unwrap_or(false))
        } else {
            Some(true)
        }
    };
    matches!(tokio::time::timeout(timeout, attempt).await, Ok(Some(true)))
}

/// `httpGet`: to `host` (the Pod's address by default), over TLS without verifying the
/// certificate when `scheme` is `HTTPS` (kubelet does not verify it either), with
/// `httpHeaders`.
async fn http_get(h: &serde_json::Map<String, Value>, c: &Value, ip: Ipv4Addr) -> Option<bool> {
    let port = port_of(c, h.get("port")?)?;
    let path = h.get("path").and_then(Value::as_str).unwrap_or("/");
    let host: IpAddr = match h.get("host").and_then(Value::as_str) {
        Some(host) if !host.is_empty() => host.parse().ok()?,
        _ => IpAddr::V4(ip),
    };
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n");
    for header in h
        .get("httpHeaders")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let (Some(name), Some(value)) = (header["name"].as_str(), header["value"].as_str()) else {
            continue;
        };
        // A header that would split the request is not sent.
        if name.contains(['\r', '\n', ':']) || value.contains(['\r', '\n']) {
            continue;
        }
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("Connection: close\r\n\r\n");
    let tcp = tokio::net::TcpStream::connect((host, port)).await.ok()?;
    match h.get("scheme").and_then(Value::as_str) {
        Some("HTTPS") => {
            let tls = tokio_rustls::TlsConnector::from(insecure_client())
                .connect(ServerName::IpAddress(host.into()), tcp)
                .await
                .ok()?;
            status_ok(tls, &request).await
        }
        _ => status_ok(tcp, &request).await,
    }
}

/// Send `request` and read the status line: 2xx and 3xx succeed.
async fn status_ok<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, request: &str) -> Option<bool> {
    s.write_all(request.as_bytes()).await.ok()?;
    let mut buf = [0u8; 12];
    s.read_exact(&mut buf).await.ok()?;
    let code: u16 = std::str::from_utf8(&buf[9..12]).ok()?.parse().ok()?;
    Some((200..400).contains(&code))
}

/// A container port by number or by name.
pub fn port_of(c: &Value, port: &Value) -> Option<u16> {
    match port {
        Value::Number(n) => n.as_u64().and_then(|p| u16::try_from(p).ok()),
        Value::String(name) => {
            c["ports"].as_array()?.iter().find(|p| p["name"] == *name)?["containerPort"]
                .as_u64()
                .and_then(|p| u16::try_from(p).ok())
        }
        _ => None,
    }
}

/// A TLS client that takes any server certificate (the handshake's signatures are still
/// checked): a probe asks whether the process answers, not who it is.
fn insecure_client() -> Arc<rustls::ClientConfig> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .map(|b| {
                    b.dangerous()
                        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
                        .with_no_client_auth()
                });
            match config {
                Ok(c) => Arc::new(c),
                // ring's provider supports the default versions; kept total regardless.
                Err(_) => Arc::new(
                    rustls::ClientConfig::builder()
                        .with_root_certificates(rustls::RootCertStore::empty())
                        .with_no_client_auth(),
                ),
            }
        })
        .clone()
}

#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A one-shot server on loopback answering every connection with `status`, over TLS
    /// when `tls` is given.
    async fn serve(status: u16, tls: Option<Arc<rustls::ServerConfig>>) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let tls = tls.clone();
                tokio::spawn(async move {
                    let reply = format!("HTTP/1.1 {status} X\r\nContent-Length: 0\r\n\r\n");
                    let mut buf = [0u8; 1024];
                    match tls {
                        Some(cfg) => {
                            let Ok(mut s) = tokio_rustls::TlsAcceptor::from(cfg).accept(tcp).await
                            else {
                                return;
                            };
                            let _ = s.read(&mut buf).await;
                            let _ = s.write_all(reply.as_bytes()).await;
                            let _ = s.shutdown().await;
                        }
                        None => {
                            let mut s = tcp;
                            let _ = s.read(&mut buf).await;
                            let _ = s.write_all(reply.as_bytes()).await;
                        }
                    }
                });
            }
        });
        port
    }

    fn self_signed() -> Arc<rustls::ServerConfig> {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["probe.test".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        Arc::new(
            rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(
                    vec![cert.der().clone()],
                    rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
                )
                .unwrap(),
        )
    }

    #[tokio::test]
    async fn https_probes_speak_tls_and_plain_ones_do_not() {
        let ip = Ipv4Addr::LOCALHOST;
        let tls_ok = serve(200, Some(self_signed())).await;
        let plain_ok = serve(204, None).await;
        let plain_bad = serve(503, None).await;
        let c = json!({"ports": [{"name": "admin", "containerPort": tls_ok}]});
        let get = |port: Value, scheme: &str| json!({"httpGet": {"path": "/readyz", "port": port, "scheme": scheme}});
        assert!(probe(&get(json!("admin"), "HTTPS"), &c, ip, 0).await);
        // Plain HTTP to a TLS port gets no status line.
        assert!(!probe(&get(json!(tls_ok), "HTTP"), &c, ip, 0).await);
        assert!(probe(&get(json!(plain_ok), "HTTP"), &c, ip, 0).await);
        assert!(!probe(&get(json!(plain_ok), "HTTPS"), &c, ip, 0).await);
        assert!(!probe(&get(json!(plain_bad), "HTTP"), &c, ip, 0).await);
        // An unknown port name fails rather than guessing.
        assert!(!probe(&get(json!("metrics"), "HTTPS"), &c, ip, 0).await);
    }

    #[tokio::test]
    async fn an_exec_probe_runs_beside_the_container_in_its_environment() {
        let ip = Ipv4Addr::LOCALHOST;
        let c = serde_json::json!({});
        let me = std::process::id();
        let exec = |script: &str| serde_json::json!({"exec": {"command": ["sh", "-c", script]}});
        // The environment the container's process started with (here: this test's).
        assert!(probe(&exec("test -n \"$PATH\""), &c, ip, me).await);
        assert!(!probe(&exec("exit 3"), &c, ip, me).await);
        // No such process: the probe fails, it does not run on the node instead.
        assert!(!probe(&exec("true"), &c, ip, 0).await);
        assert!(!probe(&serde_json::json!({"exec": {"command": []}}), &c, ip, me).await);
        // A container whose mounts are still being set up is not probed yet: its volumes
        // may not be there.
        let mut setup = std::process::Command::new("sh")
            .args(["-c", "sleep 5; true", crate::node::mounts::SETTING_UP])
            .spawn()
            .unwrap();
        for _ in 0..3 {
            assert!(!probe(&exec("true"), &c, ip, setup.id()).await);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = setup.kill();
        let _ = setup.wait();
    }
}
