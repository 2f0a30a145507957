//! The MCS controller's modules import only downward: the pure reconcile at the top of
//! the decision layers (export, merge, conditions, slices below it), the controller's IO
//! above them all.

use sluice_test_support::layers::ModuleGraph;

#[test]
fn no_module_circles() {
    let graph = ModuleGraph::of_crate(concat!(env!("CARGO_MANIFEST_DIR"), "/src").as_ref());
    assert!(graph.modules().count() > 12, "the sources were read");
    assert!(
        !graph.imports("reconcile").is_empty(),
        "imports were found at all"
    );
    assert_eq!(graph.cycles(), Vec::<Vec<String>>::new());
}
