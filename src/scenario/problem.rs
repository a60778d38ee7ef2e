//! What is wrong with a scenario: a field path, a message and a hint. Every concern's
//! checks report in this form, and the loader adds where in the file each problem is.

/// One thing wrong with a scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// 1-based line and column in the scenario text, when known.
    pub location: Option<(usize, usize)>,
    /// Field path, e.g. `cluster.groups[0].kv_blocks`; empty for the whole file.
    pub path: String,
    /// What is wrong, including what was expected.
    pub message: String,
    /// How to fix it.
    pub hint: Option<String>,
}

impl Problem {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Problem {
            location: None,
            path: path.into(),
            message: message.into(),
            hint: None,
        }
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

/// The closest candidate to `name` by edit distance, if reasonably close.
pub fn did_you_mean<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, c)| *d <= 3.max(c.len() / 3))
        .min()
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// A problem at `path` unless `v` is a finite number > 0 (`hint` says what it is).
pub fn finite_positive(problems: &mut Vec<Problem>, path: &str, v: f64, hint: &str) {
    if !v.is_finite() || v <= 0.0 {
        problems
            .push(Problem::new(path, format!("must be a finite number > 0, got {v}")).hint(hint));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn did_you_mean_finds_near_misses_only() {
        let names = ["round_robin", "least_loaded"];
        assert_eq!(did_you_mean("round_robbin", names), Some("round_robin"));
        assert_eq!(did_you_mean("leastloaded", names), Some("least_loaded"));
        assert_eq!(did_you_mean("zzzzzzzzzzzzzzzz", names), None);
    }
}
