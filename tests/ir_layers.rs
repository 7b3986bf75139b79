//! The IR crates have no import circle wider than one module folder: inside each of
//! `tessera-ir-core`, `tessera-interp` and `tessera-transform`, the top-level modules (a file or
//! a folder under `src/`) that name one another through `crate::` paths form no cycle. A cycle
//! inside one folder is allowed (the program's data model: equations, primitives and parameters
//! refer to one another).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use tessera_tests::repo_root;

/// Each top-level module's files: `src/a.rs` and `src/a/**.rs` are module `a`.
fn modules(src: &Path) -> BTreeMap<String, Vec<std::path::PathBuf>> {
    let mut out: BTreeMap<String, Vec<_>> = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap();
            let first = rel
                .components()
                .next()
                .unwrap()
                .as_os_str()
                .to_string_lossy();
            let name = first.trim_end_matches(".rs").to_owned();
            if name != "lib" {
                out.entry(name).or_default().push(path);
            }
        }
    }
    out
}

/// The top-level modules `text` names as `crate::NAME` (also inside `use crate::{...}` groups,
/// over several lines), comments left out.
fn named(text: &str, known: &BTreeSet<String>) -> BTreeSet<String> {
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let mut names = vec![ident(rest)];
        if let Some(group) = rest.strip_prefix('{') {
            // The group's top-level items, up to its closing brace.
            let (mut depth, mut item) = (0usize, String::new());
            names.clear();
            for c in group.chars() {
                match c {
                    '}' if depth == 0 => break,
                    ',' if depth == 0 => {
                        names.push(ident(&std::mem::take(&mut item)));
                        continue;
                    }
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                item.push(c);
            }
            names.push(ident(&item));
        }
        out.extend(names.into_iter().filter(|n| known.contains(n)));
    }
    out
}

/// The cycles of `graph` (strongly connected components of more than one module).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    let reaches = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_owned()];
        while let Some(m) = stack.pop() {
            for n in graph.get(&m).into_iter().flatten() {
                if seen.insert(n.clone()) {
                    stack.push(n.clone());
                }
            }
        }
        seen
    };
    let all: BTreeMap<&String, BTreeSet<String>> = graph.keys().map(|m| (m, reaches(m))).collect();
    let mut out: Vec<BTreeSet<String>> = Vec::new();
    for (m, r) in &all {
        let component: BTreeSet<String> = r
            .iter()
            .filter(|n| all.get(n).is_some_and(|back| back.contains(*m)))
            .cloned()
            .collect();
        if component.len() > 1 && !out.contains(&component) {
            out.push(component);
        }
    }
    out
}

fn graph_of(krate: &str) -> BTreeMap<String, BTreeSet<String>> {
    let src = repo_root().join("crates").join(krate).join("src");
    let mods = modules(&src);
    let known: BTreeSet<String> = mods.keys().cloned().collect();
    mods.iter()
        .map(|(m, files)| {
            let mut uses = BTreeSet::new();
            for f in files {
                uses.extend(named(&std::fs::read_to_string(f).unwrap(), &known));
            }
            uses.remove(m);
            (m.clone(), uses)
        })
        .collect()
}

#[test]
fn the_ir_crates_have_no_import_circle_between_module_folders() {
    for krate in ["tessera-ir-core", "tessera-interp", "tessera-transform"] {
        let graph = graph_of(krate);
        assert!(!graph.is_empty(), "{krate}: no modules found");
        assert_eq!(
            cycles(&graph),
            Vec::<BTreeSet<String>>::new(),
            "{krate}: {graph:?}"
        );
    }
}

#[test]
fn a_circle_is_found() {
    let edge = |a: &str, b: &[&str]| (a.to_owned(), b.iter().map(|s| s.to_string()).collect());
    let graph: BTreeMap<String, BTreeSet<String>> = [
        edge("a", &["b"]),
        edge("b", &["c"]),
        edge("c", &["a"]),
        edge("d", &["a"]),
    ]
    .into();
    let found = cycles(&graph);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].len(), 3);
    let known: BTreeSet<String> = ["jaxpr", "prim"].map(String::from).into();
    let text = "use crate::{\n    jaxpr::Var,\n    prim::{Prim, X},\n};\n// crate::text\nlet x = crate::prim::X;";
    assert_eq!(named(text, &known), known);
}
