//! Ending with the parent: a part that `sluice dev up` starts is told its parent's pid
//! (`SLUICE_PARENT_PID`) and sends itself SIGTERM, its ordinary graceful stop, once that
//! parent is gone. So a `dev up` that is killed outright (SIGKILL, a crash) leaves no
//! control plane, API server or DNS server behind holding the clusterset's fixed
//! addresses.

use std::time::Duration;

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
        });
    if let Err(e) = spawned {
        eprintln!("not watching the parent process: {e}");
    }
}
