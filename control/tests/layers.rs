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
fn no_module_circles_but_the_generated_table() {
    let graph = ModuleGraph::of_crate(concat!(env!("CARGO_MANIFEST_DIR"), "/src").as_ref());
    assert!(graph.modules().count() > 80, "the sources were read");
    // The protobuf table is generated from kube's .proto files and its encoder reads it.
    assert_eq!(
        graph.cycles(),
        vec![vec![
            "codec::proto_table".to_string(),
            "codec::protobuf".to_string()
        ]]
    );
}

/// Every write reaches storage through `pipeline::commit`: requests after admission, the
/// server's own writers (garbage collector, termination, bootstrap, leader lease, Events,
/// restamps) directly. Nothing else calls the store's `write`.
#[test]
fn only_the_pipeline_writes_storage() {
    let graph = ModuleGraph::of_crate(concat!(env!("CARGO_MANIFEST_DIR"), "/src").as_ref());
    let mut writers = Vec::new();
    for needle in ["store.write(", ".write(Op::", ".write(op)"] {
        writers.extend(graph.modules_naming(needle));
    }
    writers.sort();
    writers.dedup();
    assert_eq!(writers, vec!["pipeline::commit".to_string()]);
    // The server's own writers reach storage through it.
    for writer in [
        "pipeline::create",
        "pipeline::modify",
        "pipeline::scale",
        "pipeline::delete",
        "controllers::gc",
        "controllers::termination",
        "bootstrap",
        "leader",
        "events",
        "admission::restamp",
    ] {
        assert!(
            graph.imports(writer).contains("pipeline::commit"),
            "{writer} imports {:?}",
            graph.imports(writer)
        );
    }
}
