//! The HTTP handlers are adapters at the top: no controller and no storage module
//! imports them (they go through the object pipeline).

use sluice_test_support::layers::ModuleGraph;

#[test]
fn controllers_and_storage_do_not_import_handlers() {
    let graph = ModuleGraph::of_crate(concat!(env!("CARGO_MANIFEST_DIR"), "/src").as_ref());
    assert!(
        !graph.edges_between("handlers", "pipeline").is_empty(),
        "imports were found at all"
    );
    for from in ["controllers", "storage", "pipeline", "admission"] {
        assert_eq!(graph.edges_between(from, "handlers"), vec![], "{from}");
    }
}

#[test]
fn no_module_circles_probe() {
    let graph = ModuleGraph::of_crate(concat!(env!("CARGO_MANIFEST_DIR"), "/src").as_ref());
    assert_eq!(graph.cycles(), Vec::<Vec<String>>::new());
}
