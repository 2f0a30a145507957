#![allow(clippy::unwrap_used)]
//! The Kubernetes Python client (PyPI `kubernetes`), a second client we did not write,
//! does CRUD, list and watch (issue: control semantics, done-when 3). `./test.sh` installs it into `.venv/`.

use crate::support;

use std::process::Command;

use support::Control;

#[test]
fn python_kubernetes_client_crud_list_watch() {
    let dir = tempfile::tempdir().unwrap();
    let control = Control::start(dir.path(), &[]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/client_crud.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(&control.kubeconfig)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "python client failed (is the `kubernetes` package installed? `./test.sh` installs it into `.venv/`):\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("python client: ok"));
}
