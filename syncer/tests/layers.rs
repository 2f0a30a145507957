//! The syncer's modules import only downward: the pure parts (what an object becomes
//! downstream, what a pod's mirror says, what travels back up) never reach the controller's
//! IO, and the controller's parts (one job per file) form no circle.

use sluice_test_support::layers::ModuleGraph;

#[test]
fn the_pure_parts_do_not_import_the_controller_and_nothing_is_circular() {
    let graph = ModuleGraph::of_crate(concat!(env!("CARGO_MANIFEST_DIR"), "/src").as_ref());
    assert!(graph.modules().count() > 15, "the sources were read");
    assert!(
        !graph
            .edges_between("controller::down", "transform")
            .is_empty(),
        "imports were found at all"
    );
    for pure in [
        "transform",
        "drift",
        "mirror",
        "events",
        "imports",
        "sources",
        "ordinals",
    ] {
        assert_eq!(graph.edges_between(pure, "controller"), vec![], "{pure}");
    }
    // Each job of the controller stands alone: none imports another job, only the shared
    // parts below them (state, watched, write, report, warnings, key).
    let jobs = [
        "down",
        "pods",
        "event_copy",
        "import_report",
        "crds",
        "copies",
        "shared",
    ];
    for from in jobs {
        for to in jobs.iter().filter(|t| **t != from) {
            assert_eq!(
                graph.edges_between(&format!("controller::{from}"), &format!("controller::{to}")),
                vec![],
                "{from} -> {to}"
            );
        }
    }
    assert_eq!(graph.cycles(), Vec::<Vec<String>>::new());
}
