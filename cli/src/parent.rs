//! Ending with the parent: a part that `sluice dev up` starts is told its parent's pid
//! (`SLUICE_PARENT_PID`) and sends itself SIGTERM, its ordinary graceful stop, once that
//! parent is gone. So a `dev up` that is killed outright (SIGKILL, a crash) leaves no
//! control plane, API server or DNS server behind holding the clusterset's fixed
//! addresses, and none that hangs in its stop outlives the parent by more than
//! [`ORPHAN_STOP_BOUND`].

use std::time::Duration;

/// How long a part whose parent is gone has for its graceful stop: longer than any part's
/// own bound (a node agent's is 5 s), so this only ends one that hangs.
const ORPHAN_STOP_BOUND: Duration = Duration::from_secs(10);

/// Watch the parent named by `SLUICE_PARENT_PID`, when this process is really its child
/// (a process that inherited the variable from further up, such as a Pod of a node
/// agent, ignores it).
pub fn watch() {
    let Some(parent) = std::env::var(sluice_local::devup::PARENT_PID_ENV)
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
    else {
        return;
    };
    if std::os::unix::process::parent_id() != parent {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("parent-watch".into())
        .spawn(move || {
            while std::os::unix::process::parent_id() == parent {
                std::thread::sleep(Duration::from_millis(500));
            }
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::Signal::SIGTERM);
            // Nobody waits for this stop: a part whose graceful stop hangs (on an API server
            // that went with the parent) goes anyway.
            std::thread::sleep(ORPHAN_STOP_BOUND);
            eprintln!(
                "the parent is gone and this part did not stop within {}s; exiting",
                ORPHAN_STOP_BOUND.as_secs()
            );
            std::process::exit(1);
        });
    if let Err(e) = spawned {
        eprintln!("not watching the parent process: {e}");
    }
}
