//! The facade's modules depend on each other in one direction: the graph of `crate::<module>`
//! references between the files of `src/` (comments left out) has no cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// Module name → the modules its code (not its comments) names as `crate::<module>`.
fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph = BTreeMap::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        let mut deps = BTreeSet::new();
        for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for (i, _) in line.match_indices("crate::") {
                let rest = &line[i + "crate::".len()..];
                let module: String =
                    rest.chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect();
                if !module.is_empty() && module != name {
                    deps.insert(module);
                }
            }
        }
        graph.insert(name, deps);
    }
    graph
}

/// A cycle of `graph` as a path of module names, if there is one (depth-first search).
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(node.to_string(), 1);
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            match state.get(next.as_str()).copied().unwrap_or(0) {
                1 => {
                    let start = path.iter().position(|p| p == next).unwrap();
                    let mut cycle = path[start..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(next, graph, state, path) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        path.pop();
        state.insert(node.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if state.get(node.as_str()).copied().unwrap_or(0) == 0
            && let Some(c) = visit(node, graph, &mut state, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

#[test]
fn the_facade_has_no_import_cycle() {
    let graph = module_graph();
    assert!(graph.len() > 10, "read the modules of src/: {graph:?}");
    // The references the test reads are real: the CLI's layer names the problem files'.
    assert!(graph["app"].contains("problem"), "{graph:?}");
    if let Some(cycle) = find_cycle(&graph) {
        panic!("import cycle: {}", cycle.join(" → "));
    }
}

#[test]
fn a_cycle_is_found() {
    let mut graph = BTreeMap::new();
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    graph.insert("a".to_string(), set(&["b"]));
    graph.insert("b".to_string(), set(&["c"]));
    graph.insert("c".to_string(), set(&["a"]));
    graph.insert("d".to_string(), set(&["a"]));
    let cycle = find_cycle(&graph).expect("a → b → c → a");
    assert_eq!(cycle.first(), cycle.last());
    assert_eq!(cycle.len(), 4);
    graph.insert("c".to_string(), set(&[]));
    assert_eq!(find_cycle(&graph), None);
}
