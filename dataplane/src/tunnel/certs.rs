//! The tunnel files of a clusterset as `sluice tunnel certs` writes them: `ca.crt` and
//! `ca.key` (made once, then reused, so clusters added later share the trust root) and
//! `<cluster>.crt`/`<cluster>.key` per cluster, the SPIFFE identity
//! `spiffe://<clusterset>/cluster/<cluster>/proxy`. Keys are readable by their owner only.

use std::path::{Path, PathBuf};

use super::ca::{Authority, CaError};
use super::identity::{IdentityError, SpiffeId};

#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    #[error("writing {0}: {1}")]
    Write(PathBuf, std::io::Error),
    #[error(transparent)]
    Ca(#[from] CaError),
    #[error(transparent)]
    Identity(#[from] IdentityError),
}

/// Issue a certificate valid `days` for each of `clusters` into `dir`, with the CA found
/// there or a new one; returns the identities issued.
pub fn issue(
    dir: &Path,
    clusterset: &str,
    clusters: &[String],
    days: i64,
) -> Result<Vec<SpiffeId>, CertsError> {
    std::fs::create_dir_all(dir).map_err(|e| CertsError::Write(dir.to_path_buf(), e))?;
    let (crt, key) = (dir.join("ca.crt"), dir.join("ca.key"));
    let ca = match (std::fs::read_to_string(&crt), std::fs::read_to_string(&key)) {
        (Ok(c), Ok(k)) => Authority::from_pem(c, k),
        _ => {
            let ca = Authority::generate(&format!("{clusterset} clusterset CA"))?;
            write_private(&key, ca.key_pem())?;
            write(&crt, ca.cert_pem())?;
            ca
        }
    };
    let mut issued = Vec::with_capacity(clusters.len());
    for c in clusters {
        let id = SpiffeId::new(clusterset, c, "proxy")?;
        let pair = ca.issue(&id, days)?;
        write(&dir.join(format!("{c}.crt")), &pair.cert_pem)?;
        write_private(&dir.join(format!("{c}.key")), &pair.key_pem)?;
        issued.push(id);
    }
    Ok(issued)
}

fn write(path: &Path, contents: &str) -> Result<(), CertsError> {
    std::fs::write(path, contents).map_err(|e| CertsError::Write(path.to_path_buf(), e))
}

/// Write through a temporary file created owner-only, then rename: the key is never
/// readable by others, not even while being written.
fn write_private(path: &Path, contents: &str) -> Result<(), CertsError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let err = |e| CertsError::Write(path.to_path_buf(), e);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(err)?;
    f.write_all(contents.as_bytes()).map_err(err)?;
    f.sync_all().map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::issue;

    #[test]
    fn keys_are_private_and_the_ca_is_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ids = issue(dir.path(), "prod", &["east".into()], 1).expect("issue");
        assert_eq!(ids[0].to_string(), "spiffe://prod/cluster/east/proxy");
        let mode = |f: &str| {
            std::fs::metadata(dir.path().join(f))
                .expect("file")
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode("east.key"), 0o600);
        assert_eq!(mode("ca.key"), 0o600);
        let ca = std::fs::read_to_string(dir.path().join("ca.crt")).expect("ca");
        issue(dir.path(), "prod", &["west".into()], 1).expect("issue again");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("ca.crt")).expect("ca"),
            ca,
            "a second run keeps the CA"
        );
    }
}
