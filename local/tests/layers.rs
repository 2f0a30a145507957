//! The local clusterset's parts stand apart: the built-in controllers (the
//! kube-controller-manager's part) and the node agent (the kubelet's) never import each
//! other, each controller imports only the shared helpers, and nothing is circular.

use sluice_test_support::layers::ModuleGraph;

#[test]
fn controllers_and_the_node_agent_stand_apart_and_nothing_is_circular() {
    let graph = ModuleGraph::of_crate(concat!(env!("CARGO_MANIFEST_DIR"), "/src").as_ref());
    assert!(graph.modules().count() > 15, "the sources were read");
    assert!(
        !graph
            .edges_between("controllers", "controllers::deployment")
            .is_empty(),
        "imports were found at all"
    );
    assert_eq!(graph.edges_between("controllers", "node"), vec![]);
    assert_eq!(graph.edges_between("node", "controllers"), vec![]);
    let each = [
        "cronjob",
        "deployment",
        "endpointslice",
        "job",
        "replicaset",
        "statefulset",
    ];
    for from in each {
        for to in each.iter().filter(|t| **t != from) {
            assert_eq!(
                graph.edges_between(
                    &format!("controllers::{from}"),
                    &format!("controllers::{to}")
                ),
                vec![],
                "{from} -> {to}"
            );
        }
    }
    assert_eq!(graph.cycles(), Vec::<Vec<String>>::new());
}
