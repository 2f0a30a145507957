#![allow(clippy::unwrap_used)]
//! The API suites again, with every control plane on etcd: the kubectl (1.32 and current),
//! Python client, durability and audit modules of this test binary, and the kube-rs,
//! controller, observability and bad-input test binaries of the control plane's crate,
//! run a second time with `SLUICE_TEST_STORE=etcd`, which makes their control planes keep
//! objects in a real etcd (Debian's `etcd-server`) on loopback instead of the embedded
//! store. Passing on both is the contract of `storage::Backend`.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

/// Where a suite's tests are: modules of this binary, or another crate's test binary.
enum Suite {
    /// Tests of this binary whose names start with `<module>::`.
    Module(&'static str),
    /// A test binary `<name>-<hash>` beside this one, and one test it holds (names repeat
    /// across crates).
    Binary(&'static str, &'static str),
}

const SUITES: &[Suite] = &[
    Suite::Module("kubectl"),
    Suite::Module("kubectl_compat"),
    Suite::Module("kubectl_semantics"),
    Suite::Module("python_client"),
    Suite::Module("durability"),
    Suite::Module("audit"),
    Suite::Binary("kube_rs", ""),
    Suite::Binary("controller", ""),
    Suite::Binary("observability", ""),
    Suite::Binary(
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
    for suite in SUITES {
        let mut run = match suite {
            Suite::Module(module) => {
                let mut run = Command::new(std::env::current_exe().unwrap());
                run.arg(format!("{module}::"));
                run
            }
            Suite::Binary(name, holding) => {
                Command::new(suite_binary(name, holding).unwrap_or_else(|| {
                    panic!("no test binary for suite {name}: build with cargo test")
                }))
            }
        };
        let name = match suite {
            Suite::Module(name) | Suite::Binary(name, _) => name,
        };
        let started = Instant::now();
        let out = run
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
