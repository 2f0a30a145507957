//! The dataplane's modules import only downward: no two modules reach each other,
//! directly or around a circle (docs/architecture.md shows the layers).

use sluice_test_support::layers::ModuleGraph;

#[test]
fn no_module_circles() {
    let graph = ModuleGraph::of_crate(concat!(env!("CARGO_MANIFEST_DIR"), "/src").as_ref());
    assert!(graph.modules().count() > 30, "the sources were read");
    assert!(
        !graph.imports("http").is_empty(),
        "imports were found at all"
    );
    assert_eq!(graph.cycles(), Vec::<Vec<String>>::new());
}

#[test]
fn endpoint_state_knows_no_protocol_and_tunnels_no_listener() {
    let graph = ModuleGraph::of_crate(concat!(env!("CARGO_MANIFEST_DIR"), "/src").as_ref());
    for (from, to) in [
        ("balance", "http"),
        ("balance", "tcp"),
        ("service", "http"),
        ("tunnel", "listener"),
        ("tunnel", "http"),
        ("http", "listener"),
    ] {
        assert_eq!(graph.edges_between(from, to), vec![], "{from} -> {to}");
    }
}
