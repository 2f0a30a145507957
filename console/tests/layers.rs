//! The console's modules import only downward: the pure views, timelines and traffic
//! history know nothing of HTTP or of the API server.

use sluice_test_support::layers::ModuleGraph;

#[test]
fn no_module_circles_and_the_pure_part_stays_pure() {
    let graph = ModuleGraph::of_crate(concat!(env!("CARGO_MANIFEST_DIR"), "/src").as_ref());
    assert!(graph.modules().count() >= 8, "the sources were read");
    assert_eq!(graph.cycles(), Vec::<Vec<String>>::new());
    for pure in ["view", "timeline", "traffic", "snapshot"] {
        for io in ["server", "source", "actions"] {
            assert_eq!(graph.edges_between(pure, io), vec![], "{pure} -> {io}");
        }
    }
    assert_eq!(graph.edges_between("source", "server"), vec![]);
    assert_eq!(graph.edges_between("actions", "server"), vec![]);
}
