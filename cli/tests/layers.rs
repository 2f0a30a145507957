//! The binary stays thin: `main.rs` parses arguments and calls a part's module; the parts'
//! modules share only `process.rs`, never each other, and nothing imports in a circle.

use sluice_test_support::layers::ModuleGraph;

fn graph() -> ModuleGraph {
    ModuleGraph::of_crate(concat!(env!("CARGO_MANIFEST_DIR"), "/src").as_ref())
}

#[test]
fn no_module_circles() {
    let graph = graph();
    assert!(graph.modules().count() > 16, "the sources were read");
    assert_eq!(graph.cycles(), Vec::<Vec<String>>::new());
}

#[test]
fn parts_do_not_reach_each_other() {
    let graph = graph();
    let parts: Vec<String> = graph
        .modules()
        .filter(|m| m.starts_with("parts::"))
        .map(str::to_string)
        .collect();
    assert!(parts.len() >= 16, "{parts:?}");
    for from in &parts {
        for to in &parts {
            if from != to {
                assert_eq!(graph.edges_between(from, to), vec![], "{from} -> {to}");
            }
        }
    }
}

#[test]
fn main_only_parses_arguments_and_calls_the_parts() {
    let main = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/main.rs"))
        .expect("main.rs");
    let lines = main.lines().count();
    assert!(lines < 400, "cli/src/main.rs has {lines} lines");
    assert_eq!(
        main.matches("install_default").count(),
        1,
        "rustls' provider is installed once, in main"
    );
}
