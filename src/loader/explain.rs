//! RON's errors in the words of the field that failed: RON names our Rust types
//! (`InstanceGroup`, `ClusterSpec`) and its own syntax, which a scenario's author never sees.
//! Below the loader's other files: reading a scenario and a GPU profile both use it.

use crate::scenario::did_you_mean;

/// Turns a RON/serde error at `path` into a message and a hint that say what the field
/// expects.
pub(super) fn explain_ron_error(code: &ron::Error, path: &str) -> (String, Option<String>) {
    use ron::Error as E;
    const FIELDS: &str = "docs/scenarios.md lists every field and its default";
    const BRACKETS: &str = "check the brackets here: one may be missing or extra (every `(`, \
                            `[` and `{` is closed by its own `)`, `]`, `}`)";
    match code {
        // `Gamma(2.0)`, `Uniform(1, 2)`: a value where a field name belongs.
        E::InvalidIdentifier(found) | E::SuggestRawIdentifier(found)
            if found.parse::<f64>().is_ok() =>
        {
            (
                format!("expected a field name, found the number {found}"),
                Some(
                    "fields are named, e.g. Gamma(cv: 2.0) or Uniform(min: 1, max: 100); \
                     docs/scenarios.md lists them"
                        .into(),
                ),
            )
        }
        E::NoSuchStructField {
            expected, found, ..
        } => {
            let hint = match did_you_mean(found, expected.iter().copied()) {
                Some(s) => format!("did you mean `{s}`?"),
                None => format!("expected one of: {}", expected.join(", ")),
            };
            (format!("unknown field `{found}`"), Some(hint))
        }
        E::NoSuchEnumVariant {
            expected, found, ..
        } => {
            let hint = match did_you_mean(found, expected.iter().copied()) {
                Some(s) => format!("did you mean `{s}`?"),
                None => format!("expected one of: {}", expected.join(", ")),
            };
            (format!("unknown variant `{found}`"), Some(hint))
        }
        E::MissingStructField { field, .. } => (
            format!("missing field `{field}`"),
            Some(format!("add the field; {FIELDS}")),
        ),
        E::DuplicateStructField { field, .. } => (
            format!("`{field}` is given twice"),
            Some("keep one: only one value can count".into()),
        ),
        E::ExpectedDifferentStructName { found, .. } if path.is_empty() => (
            format!("expected `(` and the fields, found a name, `{found}`"),
            Some("the file is one value in parentheses, without a name".into()),
        ),
        E::ExpectedDifferentStructName { found, .. } => (
            format!("a value here is written without a name, found `{found}(…)`"),
            Some("write just the parentheses, e.g. cluster: (groups: [...])".into()),
        ),
        E::ExpectedStructLike | E::ExpectedNamedStructLike(_) => (
            "expected `(` and the fields of this value".into(),
            Some(format!(
                "e.g. outputs: (dir: \"out\") or arrival: Gamma(cv: 2.0); {FIELDS}"
            )),
        ),
        // The one signed whole number of a scenario: clients', classes' and bands' priority.
        E::IntegerOutOfBounds if path.ends_with("priority") => (
            "out of range: a priority is a whole number within \
             -2,147,483,648..=2,147,483,647"
                .into(),
            Some("higher is more important; 0 is the default".into()),
        ),
        E::IntegerOutOfBounds => (
            "out of range: expected a whole number ≥ 0 that fits this field (counts and lengths \
             are at most 4,294,967,295; num_requests and seeds at most \
             18,446,744,073,709,551,615)"
                .into(),
            Some("counts and token lengths are non-negative integers, e.g. 16".into()),
        ),
        E::ExpectedInteger => (
            "expected a whole number ≥ 0 in range for this field".into(),
            Some("counts and token lengths are non-negative integers, e.g. 16".into()),
        ),
        E::ExpectedMap => (
            "expected `{` and the entries of a map".into(),
            Some(
                "a map is written in braces with quoted keys, e.g. scheduler_params: \
                 {\"chunk_size\": 256.0}"
                    .into(),
            ),
        ),
        E::ExpectedArray => (
            "expected `[` and the items of a list".into(),
            Some("a list is written in brackets, e.g. groups: [(count: 2), (count: 1)]".into()),
        ),
        E::ExpectedFloat => (
            "expected a number".into(),
            Some("write numbers like 12.0 or 0.5 (not in quotes)".into()),
        ),
        E::ExpectedString => (
            "expected a string in double quotes".into(),
            Some("e.g. name: \"chat\"".into()),
        ),
        E::ExpectedBoolean => (
            "expected true or false".into(),
            Some("write true or false, without quotes".into()),
        ),
        // Syntax: the load names what it found instead (and, for a comma, the line to end
        // with one).
        E::ExpectedComma => (
            "expected `,` or a closing bracket".into(),
            Some("fields and list items are separated by commas".into()),
        ),
        E::ExpectedMapColon => (
            "expected `:` after the field's name".into(),
            Some(
                "a field is written `name: value`, e.g. cluster: (groups: [...]), and a map's \
                 entry `\"key\": value`"
                    .into(),
            ),
        ),
        E::ExpectedIdentifier => (
            "expected a field name or a closing `)`".into(),
            Some(BRACKETS.into()),
        ),
        E::ExpectedStructLikeEnd => (
            "expected `)` closing this value, or a `,` before the next field".into(),
            Some(BRACKETS.into()),
        ),
        E::ExpectedArrayEnd => (
            "expected `]` closing this list, or a `,` before the next item".into(),
            Some(BRACKETS.into()),
        ),
        E::ExpectedMapEnd => (
            "expected `}` closing this map, or a `,` before the next entry".into(),
            Some(BRACKETS.into()),
        ),
        E::TrailingCharacters => (
            "text after the scenario's closing `)`".into(),
            Some(
                "a scenario is one value, `( … )`: a `)` too many may have closed it early".into(),
            ),
        ),
        E::Eof => (
            "the file ends inside a value".into(),
            Some("a bracket is not closed: `(`, `[` or `{`".into()),
        ),
        E::ExpectedStringEnd => (
            "a string is not closed".into(),
            Some("end it with `\"`: from here it runs to the end of the file".into()),
        ),
        other => (
            other.to_string(),
            Some("see docs/scenarios.md for the expected syntax".into()),
        ),
    }
}
