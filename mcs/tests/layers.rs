use sluice_test_support::layers::ModuleGraph;

#[test]
fn no_module_circles_probe() {
    let graph = ModuleGraph::of_crate(concat!(env!("CARGO_MANIFEST_DIR"), "/src").as_ref());
    assert_eq!(graph.cycles(), Vec::<Vec<String>>::new());
}
