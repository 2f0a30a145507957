//! Placement's modules import only downward: the pure rules (schedule, status, demand,
//! imports, shift, rollback, tenancy) never reach the controller's IO above them, and the
//! controller's parts (one namespace's reconcile, reports, the ledger, the cached views)
//! form no circle.

use sluice_test_support::layers::ModuleGraph;

#[test]
fn the_rules_do_not_import_the_controller_and_nothing_is_circular() {
    let graph = ModuleGraph::of_crate(concat!(env!("CARGO_MANIFEST_DIR"), "/src").as_ref());
    assert!(graph.modules().count() > 12, "the sources were read");
    assert!(
        !graph.edges_between("controller", "schedule").is_empty(),
        "imports were found at all"
    );
    for rule in [
        "schedule", "status", "demand", "imports", "shift", "rollback", "tenancy",
    ] {
        assert_eq!(graph.edges_between(rule, "controller"), vec![], "{rule}");
    }
    assert_eq!(graph.cycles(), Vec::<Vec<String>>::new());
}
