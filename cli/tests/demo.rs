#![allow(clippy::unwrap_used)]
//! `sluice demo` end to end: the whole scenario (a move by one label and a drain, under
//! HTTP/1.1, HTTP/2, gRPC, TCP-stream and gRPC-stream load through clusterset DNS and VIPs) finishes with
//! exit status 0, every request and stream counted, and writes its report and plot.

use crate::support;

use std::process::Command;

use support::{OneClusterset, sluice_bin};

#[test]
fn the_demo_moves_and_drains_without_a_failed_request_and_writes_its_plot() {
    // The demo brings up its own clusterset, on the fixed addresses `dev up` uses.
    let _one = OneClusterset::take();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("demo");
    let out = Command::new(sluice_bin())
        .args(["demo", "--steady", "6", "--rate", "100", "--state"])
        .arg(&state)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state.join("demo.json")).unwrap()).unwrap();
    assert_eq!(report["failed"], 0, "{report}");
    assert_eq!(report["brokenStreams"], 0, "{report}");
    // The Pod in west that asks for `echo.shop` by its ordinary name lost nothing either.
    let pod = &report["facts"]["podConsumer"];
    assert_eq!(pod["failed"], 0, "{report}");
    assert!(pod["ok"].as_u64().unwrap() > 1_000, "{report}");
    // 4 consumers at 100/s through 5 phases, 3 of them 6 s long: over 10,000 requests.
    assert!(report["requests"].as_u64().unwrap() >= 10_000, "{report}");
    // The long-lived TCP and gRPC streams carried messages through the move and the drain.
    for kind in ["tcp", "grpc"] {
        assert!(
            report["streams"][kind]["roundTrips"].as_u64().unwrap() > 50,
            "{report}"
        );
    }
    let phases: Vec<&str> = report["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        phases,
        [
            "steady on east",
            "move shop to west",
            "steady on west",
            "drain east",
            "after the drain"
        ]
    );
    // The traffic crossed: after each phase, all of the app's answers came from west.
    assert!(
        report["facts"]["shopAllOnWestAfterSeconds"].is_number(),
        "{report}"
    );
    assert!(
        report["facts"]["cartAllOnWestAfterSeconds"].is_number(),
        "{report}"
    );
    for plot in ["demo.svg", "demo.png"] {
        let len = std::fs::metadata(state.join(plot)).unwrap().len();
        assert!(len > 10_000, "{plot}: {len} bytes");
    }
    assert!(
        stdout.contains("result: 0 failed requests, 0 broken streams"),
        "{stdout}"
    );
}
