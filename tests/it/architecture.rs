//! The house: import circles between modules (source files) may only shrink. Issue 10 and 18 aim
//! to break the remaining circle; this test fails when new code joins it or starts another.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Modules (files; `instance` is `src/instance/mod.rs`) that still import one another in a
/// circle: none since issue 10 (keep it that way).
const KNOWN_CIRCLES: [&[&str]; 0] = [];

/// What loading a scenario brings in (the policy catalog, file resolution): only the
/// simulation driver, the CLI and the scenario loader itself may use it; runtime modules
/// read scenario *types*.
const LOADING: [&str; 9] = [
    "scenario::load",
    "scenario::parse",
    "scenario::validate",
    "scenario::locate",
    "scenario::resolve",
    "scenario::resolve_group",
    "scenario::apply_override",
    "scenario::SourceMap",
    "scenario::estimate",
];

/// Module path of a source file: `src/instance/step.rs` → `instance::step`,
/// `src/instance/mod.rs` → `instance`.
fn module_of(rel: &Path) -> String {
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts.join("::")
}

/// `crate::…` references of every module (file), resolved to the longest module path they
/// name; comments and the `#[cfg(test)]` tail of each file left out.
fn imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files: Vec<(String, std::path::PathBuf)> = crate::common::rust_files(&[src])
        .into_iter()
        .map(|path| (module_of(path.strip_prefix(src).unwrap()), path))
        .filter(|(module, _)| module != "lib" && module != "main")
        .collect();
    let modules: BTreeSet<String> = files.iter().map(|f| f.0.clone()).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, path) in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
        let from = edges.entry(module.clone()).or_default();
        for line in code.lines() {
            let line = line.split("//").next().unwrap();
            let mut rest = line;
            while let Some(at) = rest.find("crate::") {
                rest = &rest[at + "crate::".len()..];
                let path: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                let segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
                let target = (1..=segments.len())
                    .rev()
                    .map(|k| segments[..k].join("::"))
                    .find(|m| modules.contains(m));
                if let Some(t) = target
                    && t != *module
                    && !t.starts_with(&format!("{module}::"))
                    && !module.starts_with(&format!("{t}::"))
                {
                    from.insert(t);
                }
            }
        }
    }
    edges
}

/// Strongly connected components with more than one module.
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(m) = todo.pop() {
            for n in edges.get(&m).into_iter().flatten() {
                if seen.insert(n.clone()) {
                    todo.push(n.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        edges.keys().map(|m| (m, reach(m))).collect();
    let mut out: Vec<BTreeSet<String>> = Vec::new();
    for m in edges.keys() {
        let scc: BTreeSet<String> = edges
            .keys()
            .filter(|n| *n == m || (reaches[m].contains(*n) && reaches[*n].contains(m)))
            .cloned()
            .collect();
        if scc.len() > 1 && !out.contains(&scc) {
            out.push(scc);
        }
    }
    out
}

#[test]
fn import_circles_between_modules_do_not_grow() {
    let edges = imports(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(
        edges.len() >= 15,
        "read the source tree: {:?}",
        edges.keys()
    );
    for scc in circles(&edges) {
        assert!(
            KNOWN_CIRCLES
                .iter()
                .any(|known| scc.iter().all(|m| known.contains(&m.as_str()))),
            "a new import circle (or a module joined one): {scc:?}; keep data types at the \
             bottom, the engine above, stages and policies above it, simulation/CLI on top"
        );
    }
}

#[test]
fn runtime_modules_read_scenario_types_not_the_loader() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut offenders = Vec::new();
    for path in crate::common::rust_files(&[&src]) {
        let module = module_of(path.strip_prefix(&src).unwrap());
        if module == "main"
            || module == "simulation"
            || module == "app"
            || module.starts_with("cli")
            || module.starts_with("scenario")
        {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
        for line in code.lines().map(|l| l.split("//").next().unwrap()) {
            for item in LOADING {
                if line.contains(&format!("crate::{item}")) {
                    offenders.push(format!("{module}: {}", line.trim()));
                }
            }
        }
    }
    assert!(offenders.is_empty(), "{offenders:#?}");
}

#[test]
fn the_circle_check_finds_a_circle() {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    edges.entry("a".into()).or_default().insert("b".into());
    edges.entry("b".into()).or_default().insert("c".into());
    edges.entry("c".into()).or_default().insert("a".into());
    edges.entry("d".into()).or_default().insert("a".into());
    let found = circles(&edges);
    assert_eq!(found.len(), 1);
    assert_eq!(
        found[0],
        ["a", "b", "c"].iter().map(|s| s.to_string()).collect()
    );
}
