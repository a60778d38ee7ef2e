//! The house: no import circle between source files, and the loader beneath nothing.
//!
//! A file imports another when it names it in a path: `crate::…`, `super::…` or `self::…`
//! (in `use` or in code), and, in a folder's `mod.rs`, a child module's name (`step::…`).
//! The one thing not counted is a `mod.rs` handing on its children's names (`pub use
//! child::Name;`, and `mod child;` itself): that is the folder's face, not a dependency of
//! its types on its files. So a `mod.rs` holds the folder's types and its files build on
//! them (Avian's layout: `mod.rs` for types, `plugin.rs` for the plugin).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

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

/// The code of a file: its `#[cfg(test)] mod tests` tail, comments and string literals
/// left out.
fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests {").next().unwrap();
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let mut in_str = false;
        let mut prev = ' ';
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            if !in_str && c == '/' && chars.peek() == Some(&'/') {
                break;
            }
            if c == '"' && prev != '\\' {
                in_str = !in_str;
            } else if !in_str {
                out.push(c);
            }
            prev = if prev == '\\' && c == '\\' { ' ' } else { c };
        }
        out.push('\n');
    }
    out
}

/// `mod.rs` lines that only hand on a child's names: `pub use child::…;` (possibly over
/// several lines) and `mod child;`.
fn without_face(code: &str, children: &BTreeSet<String>) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("pub use ") {
        out.push_str(&rest[..at]);
        let end = rest[at..].find(';').map_or(rest.len(), |e| at + e + 1);
        let stmt = &rest[at..end];
        let first: String = stmt["pub use ".len()..]
            .trim_start_matches("self::")
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !children.contains(&first) {
            out.push_str(stmt);
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out.lines()
        .filter(|l| {
            let l = l.trim();
            !(l.starts_with("mod ")
                || l.starts_with("pub mod ")
                || l.starts_with("pub(crate) mod "))
                || !l.ends_with(';')
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Paths named in `code` (each a list of segments after `crate::`, `super::` or `self::`,
/// or, with `children`, after a child's name), resolved against `module`. `use a::{b, c::d}`
/// gives `a::b` and `a::c::d`.
fn named_paths(code: &str, module: &[String], children: &BTreeSet<String>) -> Vec<Vec<String>> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let bytes: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        if !ident(bytes[i]) || (i > 0 && (ident(bytes[i - 1]) || bytes[i - 1] == ':')) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && ident(bytes[i]) {
            i += 1;
        }
        let word: String = bytes[start..i].iter().collect();
        if i + 1 >= bytes.len() || bytes[i] != ':' || bytes[i + 1] != ':' {
            continue;
        }
        let base: Vec<String> = match word.as_str() {
            "crate" => Vec::new(),
            "self" => module.to_vec(),
            "super" => module[..module.len().saturating_sub(1)].to_vec(),
            w if children.contains(w) => {
                let mut b = module.to_vec();
                b.push(w.to_string());
                b
            }
            _ => continue,
        };
        // The rest of the path: segments, `super::` chains, or one `{…}` group.
        let mut prefixes = vec![base];
        let mut j = i;
        loop {
            if j + 1 < bytes.len() && bytes[j] == ':' && bytes[j + 1] == ':' {
                j += 2;
            } else {
                break;
            }
            if j < bytes.len() && bytes[j] == '{' {
                let mut depth = 0;
                let close = (j..bytes.len())
                    .find(|&k| {
                        depth += match bytes[k] {
                            '{' => 1,
                            '}' => -1,
                            _ => 0,
                        };
                        depth == 0
                    })
                    .unwrap_or(bytes.len());
                let group: String = bytes[j + 1..close].iter().collect();
                let p = prefixes.pop().unwrap();
                prefixes.extend(expand(&p, &group));
                j = close;
                break;
            }
            let s = j;
            while j < bytes.len() && ident(bytes[j]) {
                j += 1;
            }
            let seg: String = bytes[s..j].iter().collect();
            let p = prefixes.last_mut().unwrap();
            if seg == "super" {
                p.pop();
            } else if !seg.is_empty() {
                p.push(seg);
            }
        }
        out.extend(prefixes);
        i = j.max(i);
    }
    out
}

/// The paths of a `use` group's items (`S, c::{T, U}` under `p`: `p::S`, `p::c::T`,
/// `p::c::U`).
fn expand(prefix: &[String], group: &str) -> Vec<Vec<String>> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (k, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    items.push(&group[start..]);
    let mut out = Vec::new();
    for item in items {
        let item = item.trim();
        let (head, inner) = match item.find('{') {
            Some(b) => (
                &item[..b],
                Some(&item[b + 1..item.rfind('}').unwrap_or(item.len())]),
            ),
            None => (item.split(" as ").next().unwrap(), None),
        };
        let mut p = prefix.to_vec();
        p.extend(
            head.split("::")
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty() && s != "self" && s != "*"),
        );
        match inner {
            Some(inner) => out.extend(expand(&p, inner)),
            None => out.push(p),
        }
    }
    out
}

/// Every source file's imports of other files, by module path.
fn imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files: Vec<(String, std::path::PathBuf)> = crate::common::rust_files(&[src])
        .into_iter()
        .map(|path| (module_of(path.strip_prefix(src).unwrap()), path))
        .filter(|(module, _)| module != "lib" && module != "main")
        .collect();
    let modules: BTreeSet<String> = files.iter().map(|f| f.0.clone()).collect();
    let children_of = |module: &str| -> BTreeSet<String> {
        modules
            .iter()
            .filter_map(|m| m.strip_prefix(&format!("{module}::")))
            .map(|rest| rest.split("::").next().unwrap().to_string())
            .collect()
    };
    let longest = |named: &[String]| -> Option<(String, usize)> {
        (1..=named.len())
            .rev()
            .map(|k| (named[..k].join("::"), k))
            .find(|(m, _)| modules.contains(m))
    };
    // A name a folder's face hands on is imported from the file that defines it.
    let mut handed_on: BTreeMap<(String, String), String> = BTreeMap::new();
    for (module, path) in &files {
        if path.file_name().is_none_or(|n| n != "mod.rs") {
            continue;
        }
        let segments: Vec<String> = module.split("::").map(String::from).collect();
        let children = children_of(module);
        let code = code_of(&std::fs::read_to_string(path).unwrap());
        for stmt in code.split(';') {
            let Some(used) = stmt.trim().strip_prefix("pub use ") else {
                continue;
            };
            let first: String = used
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !children.contains(&first) {
                continue;
            }
            for named in named_paths(&format!("self::{used}"), &segments, &BTreeSet::new()) {
                if let Some((target, _)) = longest(&named) {
                    let name = named.last().unwrap().clone();
                    handed_on.insert((module.clone(), name), target);
                }
            }
        }
    }
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, path) in &files {
        let segments: Vec<String> = module.split("::").map(String::from).collect();
        let is_face = path.file_name().is_some_and(|n| n == "mod.rs");
        let children = if is_face {
            children_of(module)
        } else {
            BTreeSet::new()
        };
        let mut code = code_of(&std::fs::read_to_string(path).unwrap());
        if is_face {
            code = without_face(&code, &children);
        }
        let from = edges.entry(module.clone()).or_default();
        for named in named_paths(&code, &segments, &children) {
            let Some((mut target, k)) = longest(&named) else {
                continue;
            };
            if let Some(name) = named.get(k)
                && let Some(defined) = handed_on.get(&(target.clone(), name.clone()))
            {
                target = defined.clone();
            }
            if target != *module {
                from.insert(target);
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
fn no_import_circle_between_source_files() {
    let edges = imports(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(
        edges.len() >= 60,
        "read the source tree: {:?}",
        edges.keys()
    );
    // The measure sees the imports that matter (each of these once tied a circle).
    for (from, to) in [
        ("instance::batch", "instance::schedulers"),
        ("workload::inference_perf", "workload"),
        ("instance::pipeline", "instance"),
        ("loader::validate", "scenario"),
        ("cli::run", "cli::args"),
    ] {
        assert!(
            edges[from].contains(to),
            "{from} → {to} not seen: {:?}",
            edges[from]
        );
    }
    let found = circles(&edges);
    let described: Vec<String> = found
        .iter()
        .map(|scc| {
            let ties: Vec<String> = scc
                .iter()
                .flat_map(|a| {
                    edges[a]
                        .iter()
                        .filter(|b| scc.contains(*b))
                        .map(move |b| format!("{a} → {b}"))
                })
                .collect();
            ties.join(", ")
        })
        .collect();
    assert!(
        found.is_empty(),
        "import circles: {described:#?}\nkeep data types at the bottom (a folder's types in its mod.rs, \
         its systems and plugin in files that build on them), the engine above, stages and \
         policies above it, the loader, simulation and CLI on top"
    );
}

/// What loading a scenario brings in (RON, `--set`, validation, resolving files): only the
/// driver, the app builder, the command line and the loader itself may use it; runtime
/// modules read the plain schema of `scenario`.
#[test]
fn only_the_driver_and_the_cli_call_the_loader() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = imports(&src);
    let mut offenders = Vec::new();
    for (module, targets) in &edges {
        let allowed = ["simulation", "app", "sweep", "fidelity", "plan"]
            .iter()
            .any(|a| module == a || module.starts_with(&format!("{a}::")))
            || module.starts_with("cli")
            || module.starts_with("loader");
        if !allowed && targets.iter().any(|t| t.starts_with("loader")) {
            offenders.push(module.clone());
        }
    }
    assert!(offenders.is_empty(), "{offenders:#?}");
    // And the schema imports nothing of the concerns above it.
    let schema: Vec<&String> = edges["scenario"]
        .iter()
        .filter(|t| !["labels", "scenario::problem", "time"].contains(&t.as_str()))
        .collect();
    assert!(schema.is_empty(), "scenario imports {schema:?}");
}

#[test]
fn the_measure_counts_super_child_and_grouped_imports_but_not_a_folders_face() {
    let module = vec!["a".to_string()];
    let children: BTreeSet<String> = ["b".to_string(), "c".to_string()].into();
    let code = code_of(
        "use super::x::Y;\nuse crate::{p::Q, r::{S, T}};\nfn f() { b::g(); let s = \"crate::z\"; } // crate::w\n",
    );
    let named = named_paths(&code, &module, &children);
    let joined: Vec<String> = named.iter().map(|p| p.join("::")).collect();
    for want in ["x::Y", "p::Q", "r::S", "r::T", "a::b::g"] {
        assert!(joined.contains(&want.to_string()), "{want} in {joined:?}");
    }
    assert!(
        !joined.iter().any(|p| p.contains('z') || p.contains('w')),
        "{joined:?}"
    );
    let face = without_face(
        "mod b;\npub use b::Thing;\npub use crate::d::E;\n",
        &children,
    );
    assert!(
        !face.contains("b::Thing") && !face.contains("mod b"),
        "{face}"
    );
    assert!(face.contains("crate::d::E"), "{face}");
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
