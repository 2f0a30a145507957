//! The shared runtime's modules import only downward: the informers and their stores know
//! nothing of the controllers above them, and nothing is circular.

use sluice_test_support::layers::ModuleGraph;

#[test]
fn the_informers_do_not_import_the_controllers_and_nothing_is_circular() {
    let graph = ModuleGraph::of_crate(concat!(env!("CARGO_MANIFEST_DIR"), "/src").as_ref());
    assert!(graph.modules().count() > 12, "the sources were read");
    assert!(
        !graph
            .edges_between("controller::batch", "changes")
            .is_empty(),
        "imports were found at all"
    );
    for lower in [
        "informer", "changes", "scope", "index", "lease", "client", "roots",
    ] {
        assert_eq!(graph.edges_between(lower, "controller"), vec![], "{lower}");
    }
    assert_eq!(graph.cycles(), Vec::<Vec<String>>::new());
}
