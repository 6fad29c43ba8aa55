//! Every crate of the workspace keeps its modules free of import circles: the arrows of
//! DESIGN.md's data flow (the gRPC edge knows the actors, the actors know the store core, the
//! store core knows neither) hold inside each crate too, module by module.

// A failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use actcd_test_support::module_graph::ModuleGraph;

const ROOTS: [&str; 10] = [
    "src/lib.rs",
    "edge/src/lib.rs",
    "store/src/lib.rs",
    "actors/src/lib.rs",
    "raft/src/lib.rs",
    "proto/src/lib.rs",
    "benches/src/lib.rs",
    "benches/tables/src/lib.rs",
    "tests/support/src/lib.rs",
    "fuzz/src/lib.rs",
];

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().and_then(Path::parent).unwrap()
}

#[test]
fn no_crate_has_an_import_circle() {
    let mut found = Vec::new();
    for root in ROOTS {
        let graph = ModuleGraph::load(&workspace().join(root)).unwrap();
        for cycle in graph.cycles() {
            found.push(format!("{root}:\n  {}", cycle.join("\n  ")));
        }
    }
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

/// The checker finds a circle where there is one, through a re-export and a nested `use`, and
/// takes a parent's re-export of its child for no edge.
#[test]
fn the_checker_sees_circles() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
    write("lib.rs", "mod a;\nmod b;\nmod c;\npub use self::c::Thing;\n");
    write("a.rs", "pub struct A;\npub fn f() -> crate::Thing { crate::c::Thing }\n");
    write("b.rs", "pub struct B;\n");
    write("c.rs", "pub struct Thing;\nfn g() { use super::a::A; let _ = A; }\n");
    let graph = ModuleGraph::load(&dir.join("lib.rs")).unwrap();
    let cycles = graph.cycles();
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert!(cycles[0].iter().any(|e| e.starts_with("a -> c via")), "{cycles:?}");
    assert!(cycles[0].iter().any(|e| e == "c -> a via a::A"), "{cycles:?}");

    write("c.rs", "pub struct Thing;\n");
    assert!(ModuleGraph::load(&dir.join("lib.rs")).unwrap().cycles().is_empty());
}
