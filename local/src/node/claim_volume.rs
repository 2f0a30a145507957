//! Where the volume a node provisions for a claim lives: its directory under the node's
//! volumes and the name of its PersistentVolume, both derived from the claim's uid (never
//! read from what a tenant wrote). Shared by the provisioner ([`super::claims`]), clones
//! ([`super::clone`]) and reclaim ([`super::reclaim`]).

use std::path::{Path, PathBuf};

/// The directory of the claim's volume under `volumes`.
pub fn claim_dir(volumes: &Path, claim_uid: &str) -> Option<PathBuf> {
    let plain =
        !claim_uid.is_empty() && claim_uid != "." && claim_uid != ".." && !claim_uid.contains('/');
    plain.then(|| volumes.join("claims").join(claim_uid))
}

/// The PersistentVolume provisioned for the claim of `uid`.
pub fn volume_name(claim_uid: &str) -> String {
    format!("pvc-{claim_uid}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_dir_is_one_plain_component() {
        let root = Path::new("/v");
        assert_eq!(claim_dir(root, "abc"), Some(PathBuf::from("/v/claims/abc")));
        for bad in ["", ".", "..", "a/b", "../x"] {
            assert_eq!(claim_dir(root, bad), None, "{bad}");
        }
    }
}
