//! The manual is tested: every RON snippet in README.md and docs/*.md is loaded and validated
//! as what it is (a whole scenario, an instance group, or a field of the workload, the
//! policies or a group), each paragraph of every Rust snippet stands, line after line, in code
//! that a test compiles and runs, and every link between chapters points at a file and heading that exist.

use std::path::{Path, PathBuf};

use crate::common::root;

/// README.md and every chapter of the book, with their text.
fn pages() -> Vec<(String, String)> {
    let mut out = vec![(
        "README.md".to_string(),
        std::fs::read_to_string(root().join("README.md")).unwrap(),
    )];
    let mut chapters: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    chapters.sort();
    for p in chapters {
        out.push((
            format!("docs/{}", p.file_name().unwrap().to_string_lossy()),
            std::fs::read_to_string(&p).unwrap(),
        ));
    }
    out
}

/// The fenced blocks of `lang` in `text`.
fn blocks<'a>(text: &'a str, lang: &str) -> Vec<&'a str> {
    let fence = format!("```{lang}\n");
    text.split(fence.as_str())
        .skip(1)
        .map(|b| b.split("\n```").next().unwrap())
        .collect()
}

/// A minimal scenario around `snippet` placed as `what` (a whole scenario, a group, a
/// top-level block such as `flow_control: (…)`, …).
fn wrapped(snippet: &str, what: &str) -> String {
    let snippet = snippet.trim().trim_end_matches(',');
    let group = "(model: \"llama-3.1-8b-instruct\", gpu: \"H100\")";
    let workload = "(num_requests: 10, clients: [(rate_per_s: 1.0, input_tokens: Constant(64), output_tokens: Constant(8))])";
    match what {
        "scenario" => snippet.to_string(),
        "group" => format!("(cluster: (groups: [{snippet}]), workload: {workload})"),
        "workload field" => format!("(cluster: (groups: [{group}]), workload: ({snippet}))"),
        "top-level field" => {
            format!("(cluster: (groups: [{group}]), workload: {workload}, {snippet})")
        }
        "policies field" => {
            format!("(cluster: (groups: [{group}]), policies: ({snippet}), workload: {workload})")
        }
        "group field" => format!(
            "(cluster: (groups: [(model: \"llama-3.1-8b-instruct\", gpu: \"H100\", {snippet})]), workload: {workload})"
        ),
        _ => unreachable!(),
    }
}

#[test]
fn every_ron_snippet_in_the_docs_is_a_valid_scenario_or_part_of_one() {
    let app = servesim::default_app();
    let catalog = app.world().resource::<servesim::policy::Catalog>();
    // Relative files in snippets are the bundled scenarios' (`data/...`): each snippet is
    // loaded from a directory where `data` is theirs.
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(root().join("scenarios/data"), dir.path().join("data")).unwrap();
    let file = dir.path().join("snippet.ron");
    let mut checked = 0;
    let mut failures = Vec::new();
    for (page, text) in pages() {
        for snippet in blocks(&text, "ron") {
            checked += 1;
            let mut errors = Vec::new();
            let ok = [
                "scenario",
                "group",
                "workload field",
                "policies field",
                "group field",
                "top-level field",
            ]
            .iter()
            .any(|what| {
                std::fs::write(&file, wrapped(snippet, what)).unwrap();
                match servesim::loader::load(&file, &[], catalog) {
                    Ok(_) => true,
                    Err(e) => {
                        errors.push(format!("as a {what}: {e}"));
                        false
                    }
                }
            });
            if !ok {
                failures.push(format!("{page}:\n{snippet}\n{}", errors.join("\n")));
            }
        }
    }
    assert!(checked >= 4, "found {checked} RON snippets");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// A line trimmed, with doc-comment and hidden-line markers taken off.
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

/// The non-empty lines of `text`, normalized.
fn code_lines(text: &str) -> Vec<&str> {
    text.lines()
        .map(normalize)
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn every_rust_snippet_in_the_docs_is_compiled_code() {
    // Each paragraph of a snippet (its lines between blank lines) must stand, line after
    // line, in one file that is compiled and run: a doc test, a test, an example or the
    // source itself. Pieces glued from several places, or code edited in the docs only,
    // fail.
    let files: Vec<Vec<String>> = crate::common::rust_files(&[
        &root().join("src"),
        &root().join("tests"),
        &root().join("examples"),
    ])
    .iter()
    .map(|f| {
        let text = std::fs::read_to_string(f).unwrap();
        code_lines(&text).into_iter().map(String::from).collect()
    })
    .collect();
    let found = |paragraph: &[&str]| {
        files.iter().any(|lines| {
            lines
                .windows(paragraph.len())
                .any(|w| w.iter().zip(paragraph).all(|(a, b)| a == b))
        })
    };
    let mut missing = Vec::new();
    let mut checked = 0;
    for (page, text) in pages() {
        for snippet in blocks(&text, "rust") {
            checked += 1;
            for paragraph in snippet.split("\n\n") {
                let lines = code_lines(paragraph);
                if !lines.is_empty() && !found(&lines) {
                    missing.push(format!("{page}:\n{}", lines.join("\n")));
                }
            }
        }
    }
    assert!(checked >= 7, "found {checked} Rust snippets");
    assert!(
        missing.is_empty(),
        "Rust code in the docs that stands in no compiled source, test or example:\n\n{}",
        missing.join("\n\n")
    );
}

/// GitHub's anchor of a heading.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        if !fenced && let Some(h) = line.strip_prefix('#') {
            out.push(slug(h.trim_start_matches('#')));
        }
    }
    out
}

#[test]
fn every_link_between_chapters_points_at_a_page_and_heading_that_exist() {
    let pages = pages();
    let mut broken = Vec::new();
    for (page, text) in &pages {
        let dir = Path::new(page).parent().unwrap_or(Path::new(""));
        let mut rest = text.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let target = &rest[..rest.find(')').unwrap_or(0)];
            if target.starts_with("http") || target.is_empty() || target.contains(' ') {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
            let path = if file.is_empty() {
                PathBuf::from(page)
            } else {
                dir.join(file)
            };
            if !root().join(&path).exists() {
                broken.push(format!("{page}: {target} (no file {})", path.display()));
                continue;
            }
            if anchor.is_empty() {
                continue;
            }
            let body = std::fs::read_to_string(root().join(&path)).unwrap();
            if !anchors(&body).contains(&anchor.to_string()) {
                broken.push(format!("{page}: {target} (no heading #{anchor})"));
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn the_readme_is_short_and_the_book_lists_every_chapter() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    assert!(
        readme.lines().count() <= 300,
        "README.md has {} lines",
        readme.lines().count()
    );
    let summary = std::fs::read_to_string(root().join("docs/SUMMARY.md")).unwrap();
    for (page, _) in pages() {
        if let Some(name) = page.strip_prefix("docs/")
            && name != "SUMMARY.md"
        {
            assert!(
                summary.contains(&format!("({name})")),
                "docs/SUMMARY.md misses {name}"
            );
        }
    }
}

#[test]
fn every_source_path_the_docs_name_exists() {
    // Paths under src/, tests/, examples/, benches/ and python/ wherever they appear (in
    // backticks, code blocks or links): a file or folder that moved makes the book lie.
    let path_char = |c: char| c.is_alphanumeric() || "_-./".contains(c);
    let mut missing = Vec::new();
    let mut checked = 0;
    for (page, text) in pages() {
        for top in ["src/", "tests/", "examples/", "benches/", "python/"] {
            for (at, _) in text.match_indices(top) {
                if text[..at].chars().next_back().is_some_and(path_char) {
                    continue; // inside a longer path
                }
                let path: String = text[at..].chars().take_while(|&c| path_char(c)).collect();
                let path = path.trim_end_matches('.');
                checked += 1;
                if !root().join(path).exists() {
                    missing.push(format!("{page}: {path}"));
                }
            }
        }
    }
    assert!(checked >= 50, "found {checked} paths");
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "paths named in the docs that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_outputs_the_readme_quotes_are_what_the_commands_print() {
    // The tour quotes the quickstart's summary and `capacity`'s verdict; a change that moves
    // them must move the README too (a stale copy of the capacity lines once outlived a
    // change of the all-reduce pricing).
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let quoted = blocks(&readme, "text")
        .into_iter()
        .find(|b| b.starts_with("scenario quickstart"))
        .expect("the README quotes the quickstart's summary");
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().to_str().unwrap();
    let out = crate::common::servesim_ok(
        &["run", "scenarios/quickstart.ron", "--out", out_dir],
        &root(),
    );
    let printed = String::from_utf8(out.stdout).unwrap();
    for line in quoted.lines() {
        assert!(
            printed.lines().any(|p| p == line),
            "README.md quotes {line:?}, but the quickstart prints:\n{printed}"
        );
    }
    // Getting started quotes `validate` whole (a wording change once left it behind).
    let chapter = std::fs::read_to_string(root().join("docs/getting-started.md")).unwrap();
    let quoted = blocks(&chapter, "text")
        .into_iter()
        .find(|b| b.starts_with("scenarios/quickstart.ron: ok"))
        .expect("getting-started quotes validate's output");
    let out = crate::common::servesim_ok(&["validate", "scenarios/quickstart.ron"], &root());
    assert_eq!(
        quoted.trim_end(),
        String::from_utf8(out.stdout).unwrap().trim_end(),
        "docs/getting-started.md quotes validate's output"
    );
    // `capacity` takes 45 runs of 20,000 requests: its chapter holds the full output, checked
    // when it is rerun; the README's lines must be the chapter's.
    let chapter = std::fs::read_to_string(root().join("docs/capacity.md")).unwrap();
    let verdict = blocks(&readme, "")
        .into_iter()
        .find(|b| b.contains("the deployment keeps up"))
        .expect("the README quotes capacity's verdict");
    for line in verdict.lines() {
        assert!(
            chapter.lines().any(|c| c == line),
            "README.md quotes {line:?}, which docs/capacity.md does not print"
        );
    }
}

#[test]
fn the_readmes_fidelity_figures_are_the_chapters() {
    // README's Fidelity section condenses docs/fidelity.md; every time or percentage it quotes
    // must stand in the chapter as a number too, so that a term re-measured there cannot
    // leave the README behind.
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let chapter = std::fs::read_to_string(root().join("docs/fidelity.md")).unwrap();
    let section = readme
        .split("\n## Fidelity\n")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("README.md has a Fidelity section");
    let number = |c: char| c.is_ascii_digit() || c == '.';
    // A number stands in `text` when neither neighbour continues it.
    let stands = |text: &str, n: &str| {
        text.match_indices(n).any(|(at, _)| {
            !text[..at].ends_with(number) && !text[at + n.len()..].starts_with(char::is_numeric)
        })
    };
    let words: Vec<&str> = section.split_whitespace().collect();
    let mut quoted = 0;
    let mut missing = Vec::new();
    for pair in words.windows(2) {
        let unit = pair[1].trim_end_matches([',', '.', ';', ':', ')']);
        if !["µs", "ms", "%"].contains(&unit) {
            continue;
        }
        let n = pair[0]
            .trim_start_matches(|c: char| !c.is_ascii_digit())
            .trim_end_matches('.');
        if n.is_empty() || !n.chars().all(number) {
            continue;
        }
        quoted += 1;
        if !stands(&chapter, n) {
            missing.push(format!("{} {}", pair[0], pair[1]));
        }
    }
    assert!(quoted >= 20, "found {quoted} figures");
    assert!(
        missing.is_empty(),
        "README.md's Fidelity quotes figures docs/fidelity.md does not: {missing:?}"
    );
}
