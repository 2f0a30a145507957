//! The mover's modules import only downward: the manifest knows neither end, and the two
//! ends never import each other.

use sluice_test_support::layers::ModuleGraph;

#[test]
fn no_module_circles_and_the_ends_stand_apart() {
    let graph = ModuleGraph::of_crate(concat!(env!("CARGO_MANIFEST_DIR"), "/src").as_ref());
    assert!(graph.modules().count() >= 4, "the sources were read");
    assert_eq!(graph.cycles(), Vec::<Vec<String>>::new());
    for (from, to) in [
        ("manifest", "pull"),
        ("manifest", "serve"),
        ("pull", "serve"),
        ("serve", "pull"),
    ] {
        assert_eq!(graph.edges_between(from, to), vec![], "{from} -> {to}");
    }
    assert!(
        !graph.imports("pull").is_empty(),
        "imports were found at all"
    );
}
