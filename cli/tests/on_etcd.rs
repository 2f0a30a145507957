#![allow(clippy::unwrap_used)]
//! The API suites again, with every control plane on etcd: the test binaries that
//! `cargo test` built for kubectl (1.32 and current), kube-rs, the Python client,
//! durability and bad input run a second time with `SLUICE_TEST_STORE=etcd`, which makes
//! their control planes keep objects in a real etcd (Debian's `etcd-server`) on loopback
//! instead of the embedded store. Passing on both is the contract of `storage::Backend`.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

/// A suite: its test binary's name and one test it holds (names repeat across crates).
const SUITES: &[(&str, &str)] = &[
    ("kubectl", "kubectl_drives_the_api_server"),
    ("kubectl_compat", ""),
    ("kubectl_semantics", ""),
    ("python_client", ""),
    ("durability", ""),
    ("audit", ""),
    ("kube_rs", ""),
    ("controller", ""),
    ("observability", ""),
    (
        "bad_input",
        "bad_requests_get_precise_status_and_change_nothing",
    ),
];

/// The newest test binary `<name>-<hash>` beside this one that lists `holding`.
fn suite_binary(name: &str, holding: &str) -> Option<PathBuf> {
    let deps = std::env::current_exe().ok()?.parent()?.to_path_buf();
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(&deps)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let path = e.path();
            let file = path.file_name()?.to_str()?.to_string();
            let hash = file.strip_prefix(name)?.strip_prefix('-')?;
            let is_bin = hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit());
            let meta = e.metadata().ok()?;
            use std::os::unix::fs::PermissionsExt;
            (is_bin && meta.permissions().mode() & 0o111 != 0)
                .then(|| Some((meta.modified().ok()?, path)))?
        })
        .collect();
    found.sort();
    found.into_iter().rev().map(|(_, p)| p).find(|p| {
        holding.is_empty()
            || Command::new(p)
                .args(["--list", "--format", "terse"])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(holding))
    })
}

#[test]
fn the_api_suites_pass_with_the_control_plane_on_etcd() {
    let mut failed = Vec::new();
    for (name, holding) in SUITES {
        let bin = suite_binary(name, holding)
            .unwrap_or_else(|| panic!("no test binary for suite {name}: build with cargo test"));
        let started = Instant::now();
        let out = Command::new(&bin)
            .env("SLUICE_TEST_STORE", "etcd")
            .args(["--test-threads", "2"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let summary = stdout
            .lines()
            .rev()
            .find(|l| l.starts_with("test result:"))
            .unwrap_or("no result line");
        eprintln!(
            "{name} on etcd: {summary} ({:.0} s)",
            started.elapsed().as_secs_f64()
        );
        if !out.status.success() {
            failed.push(format!(
                "{name}:\n{stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    assert!(
        failed.is_empty(),
        "suites failed on etcd:\n{}",
        failed.join("\n")
    );
}
