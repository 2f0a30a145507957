//! The DNS server's modules import only downward: the bytes on the wire (`wire`) and the
//! memo (`memo`) know nothing of the model or hickory's server; the responder sits on the
//! handler, the UDP loop on the responder.

use sluice_test_support::layers::ModuleGraph;

#[test]
fn no_module_circles() {
    let graph = ModuleGraph::of_crate(concat!(env!("CARGO_MANIFEST_DIR"), "/src").as_ref());
    assert!(graph.modules().count() > 10, "the sources were read");
    assert!(
        !graph.imports("responder").is_empty(),
        "imports were found at all"
    );
    assert_eq!(graph.cycles(), Vec::<Vec<String>>::new());
}

#[test]
fn the_remembered_path_is_below_the_loop_and_above_the_handler() {
    let graph = ModuleGraph::of_crate(concat!(env!("CARGO_MANIFEST_DIR"), "/src").as_ref());
    for (from, to) in [
        ("wire", "memo"),
        ("wire", "model"),
        ("wire", "handler"),
        ("memo", "model"),
        ("memo", "wire"),
        ("handler", "responder"),
        ("handler", "udp"),
        ("responder", "udp"),
        ("answer", "handler"),
    ] {
        assert_eq!(graph.edges_between(from, to), vec![], "{from} -> {to}");
    }
    for (from, to) in [
        ("responder", "memo"),
        ("responder", "wire"),
        ("udp", "responder"),
    ] {
        assert!(!graph.edges_between(from, to).is_empty(), "{from} -> {to}");
    }
}
