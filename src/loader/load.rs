//! Loading a scenario: reading the file, applying `--set` overrides, parsing RON and
//! validating against the policy catalog. Kept apart from the scenario types so that
//! runtime modules read plain data and only loading depends on the policy catalog.

use std::path::Path;

use super::ScenarioError;
use super::explain;
use super::locate::{self, SourceMap, apply_override};
use super::validate;
use crate::catalog::Catalog;
use crate::scenario::{Problem, Scenario};

/// Reads, overrides, parses and validates a scenario file.
pub fn load(
    path: &Path,
    overrides: &[(String, String)],
    catalog: &Catalog,
) -> Result<Scenario, ScenarioError> {
    let file = path.display().to_string();
    let src = crate::input::read_text_as_written(path).map_err(|e| ScenarioError {
        file: file.clone(),
        problems: vec![Problem::new("", e).hint(
            "check the path; scenarios are UTF-8 RON files such as scenarios/quickstart.ron",
        )],
    })?;
    let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut scenario = parse_in(&src, &file, overrides, catalog, &base_dir)?;
    scenario.source = Some(path.to_path_buf());
    if scenario.name.is_empty() {
        scenario.name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
    }
    Ok(scenario)
}

/// Parses and validates scenario text (`file` names it in errors; relative paths are
/// resolved against the current directory).
pub fn parse(
    src: &str,
    file: &str,
    overrides: &[(String, String)],
    catalog: &Catalog,
) -> Result<Scenario, ScenarioError> {
    parse_in(src, file, overrides, catalog, Path::new(""))
}

/// How scenarios are read: RON with `implicit_some` on (an optional field is written bare).
fn ron_options() -> ron::Options {
    ron::Options::default().with_default_extension(ron::extensions::Extensions::IMPLICIT_SOME)
}

fn parse_in(
    src: &str,
    file: &str,
    overrides: &[(String, String)],
    catalog: &Catalog,
    base_dir: &Path,
) -> Result<Scenario, ScenarioError> {
    if src.starts_with('\u{feff}') {
        return Err(ScenarioError {
            file: file.to_string(),
            problems: vec![Problem {
                location: Some((1, 1)),
                path: String::new(),
                message: "the file starts with a byte-order mark (U+FEFF), which RON does not \
                          accept"
                    .into(),
                hint: Some(
                    "save the file as UTF-8 without BOM (most editors: \"UTF-8\", not \
                     \"UTF-8 with BOM\")"
                        .into(),
                ),
            }],
        });
    }
    let mut text = src.to_string();
    let mut file = file.to_string();
    for (path, value) in overrides {
        locate::check_single_value(value).map_err(|e| ScenarioError {
            file: file.clone(),
            problems: vec![Problem::new(path.as_str(), e).hint(
                "a value is written as in the scenario file: --set 'policies.routing=\"least_loaded\"', \
                 --set 'workload.clients[0].input_tokens=Constant(64)'",
            )],
        })?;
        text = apply_override(&text, path, value).map_err(|e| {
            // In a file RON cannot read, the field is not found because of the syntax error
            // (an unclosed `#![enable(…)`): that error is the one to fix first.
            if ron_options().from_str::<ron::Value>(src).is_err()
                && let Err(syntax) = parse_in(src, &file, &[], catalog, base_dir)
            {
                return syntax;
            }
            ScenarioError {
                file: file.clone(),
                problems: vec![
                    Problem::new(path.as_str(), e)
                        .hint("use a field path such as cluster.groups[0].count"),
                ],
            }
        })?;
    }
    if !overrides.is_empty() {
        file.push_str(" (after --set)");
    }
    let map = SourceMap::new(&text);
    let mut scenario: Scenario = ron_options().from_str(&text).map_err(|e| {
        // RON may point at the whitespace before the offending token; point at the token.
        let mut offset = map.offset_of(&text, e.span.start.line, e.span.start.col);
        offset += text[offset..].len() - text[offset..].trim_start().len();
        // `max_num_seqs: 12.5`: RON reads the integer 12 and then stops at the `.`.
        let decimal = decimal_for_integer(&text, offset, &e.code);
        if let Some((start, _)) = decimal {
            offset = start;
        }
        let (line, col) = map.line_col(&text, offset);
        let path = map.path_at(offset).unwrap_or("").to_string();
        let (mut message, mut hint) = explain::explain_ron_error(&e.code, &path);
        // `output_tokens: …` after the `)` that closed its client: RON reads the field's name
        // as the name of a struct.
        if let ron::Error::ExpectedDifferentStructName { found, .. } = &e.code
            && let Some(after) = text[offset..].strip_prefix(found.as_str())
            && after.trim_start().starts_with(':')
        {
            message = format!("expected `(` and the fields of a value, found the field `{found}:`");
            hint = Some(format!(
                "is `{found}` outside the brackets of the value it belongs to? Check the `)` or \
                 `]` before it"
            ));
        }
        if decimal.is_none()
            && let Some(found) = syntax_found(&e.code, &text, offset)
        {
            message = format!("{message}, found {found}");
            let before = text[..offset].trim_end();
            let name = &before[before
                .trim_end_matches(|c: char| c.is_alphanumeric() || c == '_')
                .len()..];
            if matches!(e.code, ron::Error::ExpectedMapColon) && !name.is_empty() {
                message = format!("expected `:` after the field's name `{name}`, found {found}");
            }
            if matches!(e.code, ron::Error::ExpectedComma) {
                hint = Some(comma_hint(&text, offset, line, &found, &map));
            }
        }
        if let Some((_, number)) = decimal {
            message = format!("expected a whole number, found {number}");
            let v: f64 = number.parse().unwrap_or(0.0);
            // Beyond u64 (or an overflow to infinity) there is no integer to suggest.
            hint = Some(if !v.is_finite() || v.abs() >= u64::MAX as f64 {
                "this field takes an integer, and this one is beyond any it can hold (counts \
                 and lengths are at most 4,294,967,295; num_requests and seeds at most \
                 18,446,744,073,709,551,615)"
                    .into()
            } else if v.fract() == 0.0 {
                format!("this field takes an integer: write {v:.0}")
            } else {
                format!(
                    "this field takes an integer, such as {:.0} or {:.0}",
                    v.floor(),
                    v.ceil()
                )
            });
        }
        // `--set a.b.c=…` where the scenario has no `a.b`: the override made the block with
        // that one field, and it misses the others.
        if let ron::Error::MissingStructField { field, .. } = &e.code
            && let Some((given, _)) = overrides.iter().find(|(p, _)| {
                p.strip_prefix(path.as_str())
                    .is_some_and(|r| r.starts_with('.'))
            })
            && SourceMap::new(src).find(&path).is_none()
        {
            hint = Some(format!(
                "the scenario has no `{path}`, so setting `{given}` made one with that field \
                 alone; give the block whole: `{path}=(…)` with `{field}` and the others it \
                 needs (docs/scenarios.md)"
            ));
        }
        // A string, list, `(…)` or number where a variant's name belongs (`arrival: "x"`,
        // `input_tokens: 1.5`): RON says "Expected identifier". Which variants the field
        // takes shows when a name stands there instead.
        let variant_error = match &e.code {
            ron::Error::ExpectedIdentifier => true,
            ron::Error::InvalidIdentifier(f) | ron::Error::SuggestRawIdentifier(f) => {
                f.parse::<f64>().is_ok()
            }
            _ => false,
        };
        if variant_error && let Some((found, variants)) = variants_at(&text, offset) {
            (message, hint) = match length_hint(&path, &text[offset..]) {
                Some(h) => (
                    format!("expected a length distribution, found {found}"),
                    Some(h),
                ),
                None => (
                    format!("expected one of this field's variants, found {found}"),
                    Some(format!("expected one of: {}", variants.join(", "))),
                ),
            };
        }
        // A value given by --set (or --vary) without its quotes.
        if let Some((_, value)) = overrides.iter().find(|(p, _)| *p == path)
            && matches!(
                e.code,
                ron::Error::ExpectedString | ron::Error::ExpectedStringEnd
            )
        {
            hint = Some(format!(
                "a string is quoted, also on the command line: --set '{path}=\"{value}\"', \
                 --vary '{path}=[\"{value}\"]'"
            ));
        }
        ScenarioError {
            file: file.clone(),
            problems: vec![Problem {
                location: Some((line, col)),
                path,
                message,
                hint,
            }],
        }
    })?;
    scenario.base_dir = base_dir.to_path_buf();
    // The labels a trace's rows name are part of the scenario's (validation checks them).
    for t in &mut scenario.workload.traces {
        t.row_labels = crate::workload::trace::row_labels(t, base_dir);
    }
    let mut problems = validate::validate(&scenario, catalog);
    if problems.is_empty() {
        return Ok(scenario);
    }
    for p in &mut problems {
        if let Some(v) = map.nearest(&p.path) {
            p.location = Some(map.line_col(&text, v.key_start));
        }
    }
    problems.sort_by_key(|p| p.location.unwrap_or((usize::MAX, 0)));
    Err(ScenarioError { file, problems })
}

/// The number with a fraction or exponent RON stopped in when it wanted an integer (`50.0`
/// reads as the integer 50 and fails at the `.`; `1e3` fails at the `e`): its start and text.
/// The value starting at `offset` (a string, list, `(…)` or number that stands where a
/// variant's name belongs), described, and the variants RON names when a name unknown to the
/// field stands there instead; `None` when the value is not one of those or the field is not
/// an enum (a struct's field name, as in `Gamma(2.0)`).
fn variants_at(text: &str, offset: usize) -> Option<(String, Vec<String>)> {
    let rest = &text[offset..];
    let (what, len) = match rest.chars().next()? {
        '"' => ("a string".to_string(), rest[1..].find('"')? + 2),
        open @ ('[' | '(') => {
            let close = if open == '[' { ']' } else { ')' };
            let mut depth = 0usize;
            let end = rest.char_indices().find_map(|(i, c)| {
                if c == open {
                    depth += 1;
                } else if c == close {
                    depth -= 1;
                    if depth == 0 {
                        return Some(i + 1);
                    }
                }
                None
            })?;
            let what = if open == '[' {
                "a list"
            } else {
                "`(…)` without a name"
            };
            (what.to_string(), end)
        }
        c if c.is_ascii_digit() || matches!(c, '-' | '+' | '.') => {
            let number = number_at(rest);
            (format!("the number {number}"), number.len())
        }
        _ => return None,
    };
    const PROBE: &str = "servesim_probe";
    let probed = format!("{}{PROBE}{}", &text[..offset], &text[offset + len..]);
    match ron_options().from_str::<Scenario>(&probed) {
        Err(ron::error::SpannedError {
            code: ron::Error::NoSuchEnumVariant {
                expected, found, ..
            },
            ..
        }) if found == PROBE => Some((what, expected.iter().map(|v| v.to_string()).collect())),
        _ => None,
    }
}

/// What a syntax error found where it stopped (a word, a short string, a character or the end
/// of the file), for the errors that expect a particular character, a name or a kind of value.
fn syntax_found(code: &ron::Error, text: &str, offset: usize) -> Option<String> {
    use ron::Error as E;
    if !matches!(
        code,
        E::ExpectedComma
            | E::ExpectedMapColon
            | E::ExpectedIdentifier
            | E::ExpectedStructLikeEnd
            | E::ExpectedArrayEnd
            | E::ExpectedMapEnd
            | E::TrailingCharacters
            | E::ExpectedInteger
            | E::ExpectedFloat
            | E::ExpectedBoolean
    ) {
        return None;
    }
    let rest = &text[offset..];
    let Some(c) = rest.chars().next() else {
        return Some("the end of the file".into());
    };
    let word = if c == '"' {
        // A string, whole when short.
        match rest[1..].find(['"', '\n']) {
            Some(end) if end <= 40 => &rest[..end + 2],
            _ => return Some("a string".into()),
        }
    } else if c.is_alphanumeric() || c == '_' {
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '.')))
            .unwrap_or(rest.len());
        &rest[..end]
    } else {
        &rest[..c.len_utf8()]
    };
    Some(format!("`{word}`"))
}

/// Where RON expected a comma and found `found` (at `offset`, on `line`): a closing bracket
/// that does not match, or a comma missing before it, at the end of the line before when the
/// value before ends there (`a: 1` then `b: 2` on the next line: RON stops at `b`).
fn comma_hint(text: &str, offset: usize, line: usize, found: &str, map: &SourceMap) -> String {
    const COMMAS: &str = "Fields and list items are separated by commas";
    if text[offset..].starts_with([')', ']', '}']) {
        return format!(
            "this {found} does not close the bracket open here: one may be missing or extra \
             (every `(`, `[` and `{{` is closed by its own `)`, `]`, `}}`)"
        );
    }
    let before = text[..offset].trim_end();
    let (at, _) = map.line_col(text, before.len());
    if at < line && !before.is_empty() {
        format!("is a `,` missing at the end of line {at}? {COMMAS}")
    } else {
        format!("is a `,` missing before {found}? {COMMAS}")
    }
}

/// The number-like word `text` starts with (`1.5`, `-3`, `1e309`, `inf`): up to the first
/// character no number is written with.
fn number_at(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+')))
        .unwrap_or(text.len());
    &text[..end]
}

/// For a length distribution given as a bare number, what to write instead.
fn length_hint(path: &str, rest: &str) -> Option<String> {
    if !["input_tokens", "output_tokens", "turns"]
        .iter()
        .any(|f| path.ends_with(f))
    {
        return None;
    }
    let v: f64 = number_at(rest).parse().ok()?;
    // Lengths are at most 2²⁴ tokens (the workload's check).
    Some(
        if v >= 0.0 && v.fract() == 0.0 && v <= f64::from(1u32 << 24) {
            format!(
                "write Constant({v:.0}) for a fixed length, or a distribution such as \
             Uniform(min: 1, max: {v:.0})"
            )
        } else {
            "a length is a whole number of tokens up to 16,777,216: write Constant(128) for a \
         fixed length, or a distribution such as Uniform(min: 1, max: 512)"
                .into()
        },
    )
}

fn decimal_for_integer<'t>(
    text: &'t str,
    offset: usize,
    code: &ron::Error,
) -> Option<(usize, &'t str)> {
    if !matches!(
        code,
        ron::Error::ExpectedComma
            | ron::Error::ExpectedStructLikeEnd
            | ron::Error::ExpectedArrayEnd
            | ron::Error::ExpectedMapEnd
            | ron::Error::TrailingCharacters
            | ron::Error::InvalidIntegerDigit { .. }
    ) {
        return None;
    }
    let (before, after) = text.split_at(offset);
    let start = before.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let start = start - usize::from(before[..start].ends_with(['-', '+']));
    let end = offset + number_at(after).len();
    let number = &text[start..end];
    (number.contains(['.', 'e', 'E']) && number.parse::<f64>().is_ok()).then_some((start, number))
}
