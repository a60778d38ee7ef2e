//! The docs' "Extending servesim" chapter is tried end to end: every example in it is code that a test
//! (or a doc test) compiles and runs — this test checks that each line of each example
//! appears in those sources, so the chapter cannot drift from what is tested.

use std::collections::HashSet;
use std::path::Path;

/// A line trimmed, with doc-comment and hidden-line markers taken off (a doc test's doc
/// comment carries two).
fn normalize(line: &str) -> &str {
    let mut l = line.trim();
    while let Some(rest) = ["//! ", "/// ", "# ", "//!", "///"]
        .iter()
        .find_map(|m| l.strip_prefix(m))
    {
        l = rest.trim();
    }
    l
}

/// Every line of the crate's sources and tests, normalized.
fn source_lines(root: &Path) -> HashSet<String> {
    let files = crate::common::rust_files(&[
        &root.join("src"),
        &root.join("tests"),
        &root.join("examples"),
    ]);
    files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            text.lines()
                .map(|l| normalize(l).to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn every_line_of_the_extending_examples_is_tested_code() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let section = &crate::common::doc("extending");
    let known = source_lines(root);
    let mut blocks = 0;
    let mut missing = Vec::new();
    for block in section.split("```rust\n").skip(1) {
        blocks += 1;
        let code = block.split("```").next().unwrap();
        for line in code.lines().map(normalize).filter(|l| !l.is_empty()) {
            if !known.contains(line) {
                missing.push(line.to_string());
            }
        }
    }
    assert!(blocks >= 7, "found {blocks} examples");
    assert!(
        missing.is_empty(),
        "docs/extending.md example lines found in no test or source file:\n{}",
        missing.join("\n")
    );
}
