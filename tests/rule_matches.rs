//! The guarantee that a new primitive, comparison or reduction kind without its rule does not
//! compile: the rule code (`tessera-ir-core`'s `program/prim/`, `tessera-interp`'s evaluation rules,
//! `tessera-transform`'s `autodiff/` and `batching/`, and `tessera-stablehlo`'s `lower/`) has no
//! wildcard match arm (`_ =>` or `_ if ...`). Rules match
//! on `Prim` or on the typed kind of its family (`prim::ElementwiseOp`, `ReductionOp`,
//! `CollectiveOp`, ...) exhaustively; parameter parsing uses `if let` / `let ... else`, naming
//! what it found in its errors.

use tessera_tests::repo_root;

fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn rule_code_has_no_wildcard_match_arms() {
    let root = repo_root().join("crates");
    let dirs = [
        "tessera-ir-core/src/program/prim",
        "tessera-interp/src/interp/rules",
        "tessera-transform/src/autodiff",
        "tessera-transform/src/batching",
        "tessera-stablehlo/src/lower",
    ];
    let mut files = Vec::new();
    for dir in dirs {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 20, "found only {} rule files", files.len());
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("").trim();
            if code.starts_with("_ =>") || code.starts_with("_ if ") || code.contains("| _ =>") {
                found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "wildcard arms:\n{}", found.join("\n"));
}
