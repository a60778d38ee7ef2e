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
    /// A problem at `path`; numbers in `message` too long to read are shown in scientific
    /// notation (a value such as `1e300` is not printed as its 301 digits).
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Problem {
            location: None,
            path: path.into(),
            message: readable_numbers(message.into()),
            hint: None,
        }
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

/// Runs of digits (and decimal points) longer than this are shown in scientific notation: a
/// `u64` (20 digits) is left whole, `1e21` and beyond or below `1e-19` are not.
const LONGEST_PLAIN_NUMBER: usize = 21;

/// `v` as a message shows it: as Rust prints it, or in scientific notation when that takes
/// more than [`LONGEST_PLAIN_NUMBER`] characters (`1e300`, not its 301 digits).
pub fn readable(v: f64) -> String {
    readable_numbers(v.to_string())
}

/// `n` with its digits in groups of three, as messages write limits: `100,000`.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `n` and its noun, plural unless `n` is 1: `1 rack`, `2 racks`.
pub fn counted(n: u64, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// `message` with every number written in more than [`LONGEST_PLAIN_NUMBER`] characters in
/// scientific notation. Rust prints an `f64` in full, so a value such as `1e300` given where a
/// few microseconds were expected would otherwise be reported as 301 digits. Text in double
/// quotes is what the user wrote (a name, a release, a path) and is left as it is: a release
/// "0.150000000000000000001" was reported as "1.5e-1".
fn readable_numbers(message: String) -> String {
    let bytes = message.as_bytes();
    // Where each byte is inside a quoted string (`{:?}` escapes a quote inside as `\"`).
    let mut quoted = vec![false; bytes.len()];
    let mut inside = false;
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'"' && !(inside && i > 0 && bytes[i - 1] == b'\\') {
            inside = !inside;
        }
        quoted[i] = inside;
    }
    let number_at = |i: usize| {
        let len = bytes[i..]
            .iter()
            .take_while(|b| b.is_ascii_digit() || **b == b'.')
            .count();
        // A run that ends on a period is a number followed by the sentence's full stop.
        len - usize::from(bytes[i + len - 1] == b'.')
    };
    let mut out = String::with_capacity(message.len());
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let follows_word = i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'.');
        if !bytes[i].is_ascii_digit() || follows_word || quoted[i] {
            i += 1;
            continue;
        }
        let len = number_at(i);
        let run = &message[i..i + len];
        if len > LONGEST_PLAIN_NUMBER
            && let Ok(v) = run.parse::<f64>()
        {
            out.push_str(&message[start..i]);
            out.push_str(&format!("{v:e}"));
            start = i + len;
        }
        i += len;
    }
    if start == 0 {
        return message;
    }
    out.push_str(&message[start..]);
    out
}

/// Most names [`some_of`] lists.
const NAMES_LISTED: usize = 8;

/// `names` joined with commas, the first [`NAMES_LISTED`] only and how many there are when
/// there are more (a hint listing 100,000 declared adapters would be a megabyte).
pub fn some_of<'a>(names: impl ExactSizeIterator<Item = &'a str>) -> String {
    let n = names.len();
    let listed: Vec<&str> = names.take(NAMES_LISTED).collect();
    if n > NAMES_LISTED {
        format!("{}, … ({} in all)", listed.join(", "), grouped(n as u64))
    } else {
        listed.join(", ")
    }
}

/// The closest candidate to `name` by edit distance, if reasonably close (see [`closest`]); of
/// equally close candidates the first listed.
pub fn did_you_mean<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    closest(name, candidates).into_iter().next()
}

/// The candidates closest to `name` by edit distance, in their order, if reasonably close: a
/// few edits for its length, and fewer than the name has characters (so that something of it
/// is kept: an empty or one-letter name is three edits from every three-letter one). Several
/// when equally close (`vllm`: `vllm_v0` and `vllm_v1`).
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let kept = name.trim().chars().count();
    let near: Vec<(usize, &str)> = candidates
        .into_iter()
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, c)| *d <= 3.max(c.len() / 3) && *d < kept)
        .collect();
    let best = near.iter().map(|(d, _)| *d).min();
    near.into_iter()
        .filter(|(d, _)| Some(*d) == best)
        .map(|(_, c)| c)
        .collect()
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

/// A link's or a read's bandwidth per direction: finite, within 10⁻³..=10⁶ GB/s (1 MB/s to
/// 1 PB/s). Slower is a slip of unit that would stop the run at its 10⁹ s clock limit, with a
/// transfer of a few MB taking longer than the run may last. Returns whether it is.
pub fn gb_per_s(problems: &mut Vec<Problem>, path: &str, v: f64) -> bool {
    let ok = v.is_finite() && (1e-3..=1e6).contains(&v);
    if !ok {
        problems.push(
            Problem::new(
                path,
                format!(
                    "must be a bandwidth within 0.001..=10⁶ GB/s, got {}",
                    readable(v)
                ),
            )
            .hint("GB/s per direction: 400 Gb/s is 50 GB/s, PCIe 5 x16 about 64"),
        );
    }
    ok
}

/// A link's or a read's fixed latency: finite, within 0..=10⁹ µs (1,000 s; more is a slip of
/// unit, and would stop the run at its 10⁹ s clock limit). Returns whether it is.
pub fn latency_us(problems: &mut Vec<Problem>, path: &str, v: f64) -> bool {
    let ok = v.is_finite() && (0.0..=1e9).contains(&v);
    if !ok {
        problems.push(Problem::new(
            path,
            format!("must be a number within 0..=10⁹ µs, got {v}"),
        ));
    }
    ok
}

/// A time a request may wait (a client's timeout, a gateway band's `max_wait_s`): finite and
/// at least 1 µs, the clock's grain (a shorter one rounds to 0 and gives up on every request
/// at once, more likely a slip of unit than an intent).
pub fn wait_seconds(problems: &mut Vec<Problem>, path: &str, v: f64, hint: &str) {
    if !v.is_finite() || v <= 0.0 {
        problems
            .push(Problem::new(path, format!("must be a finite number > 0, got {v}")).hint(hint));
    } else if v < 1e-6 {
        problems.push(
            Problem::new(
                path,
                format!("{v:e} s is shorter than 1 µs, the clock's grain: every request would give up at once"),
            )
            .hint(hint),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_list_of_names_is_cut_to_the_first_eight_and_counted() {
        let names: Vec<String> = (0..5000).map(|i| format!("{i}/5000")).collect();
        assert_eq!(
            some_of(names.iter().map(String::as_str)),
            "0/5000, 1/5000, 2/5000, 3/5000, 4/5000, 5/5000, 6/5000, 7/5000, … (5,000 in all)"
        );
        assert_eq!(
            some_of(names[..8].iter().map(String::as_str))
                .matches(", ")
                .count(),
            7
        );
        assert_eq!(some_of(["a", "b"].into_iter()), "a, b");
    }

    #[test]
    fn a_latency_is_within_zero_and_a_thousand_seconds() {
        let mut p = Vec::new();
        for ok in [0.0, 8.0, 1e9] {
            assert!(latency_us(&mut p, "x", ok));
        }
        assert!(p.is_empty());
        for bad in [-1.0, 1e9 + 1.0, f64::NAN, f64::INFINITY] {
            assert!(!latency_us(&mut p, "x", bad));
        }
        assert_eq!(p.len(), 4);
        assert_eq!(p[0].message, "must be a number within 0..=10⁹ µs, got -1");
    }

    #[test]
    fn a_bandwidth_is_within_a_megabyte_and_a_petabyte_a_second() {
        let mut p = Vec::new();
        for ok in [1e-3, 0.8, 50.0, 1e6] {
            assert!(gb_per_s(&mut p, "x", ok));
        }
        assert!(p.is_empty());
        for bad in [
            0.0,
            -5.0,
            9.99e-4,
            1e-300,
            1e6 + 1.0,
            f64::NAN,
            f64::INFINITY,
        ] {
            assert!(!gb_per_s(&mut p, "x", bad));
        }
        assert_eq!(p.len(), 7);
        assert_eq!(
            p[3].message,
            "must be a bandwidth within 0.001..=10⁶ GB/s, got 1e-300"
        );
    }

    #[test]
    fn limits_are_written_in_groups_of_three_digits() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(100_000), "100,000");
        assert_eq!(grouped(16_777_216), "16,777,216");
        assert_eq!(grouped(u64::MAX), "18,446,744,073,709,551,615");
    }

    #[test]
    fn numbers_too_long_to_read_are_shown_in_scientific_notation() {
        let got = |v: f64| Problem::new("x", format!("must be in [0, 10⁷], got {v}.")).message;
        assert_eq!(got(1e300), "must be in [0, 10⁷], got 1e300.");
        assert_eq!(got(-1.5e300), "must be in [0, 10⁷], got -1.5e300.");
        assert_eq!(got(1e-300), "must be in [0, 10⁷], got 1e-300.");
        assert_eq!(got(1e21), "must be in [0, 10⁷], got 1e21.");
        // What a reader takes in at a glance stays as Rust prints it.
        assert_eq!(got(1e20), "must be in [0, 10⁷], got 100000000000000000000.");
        assert_eq!(
            got(0.1 + 0.2),
            "must be in [0, 10⁷], got 0.30000000000000004."
        );
        let seed = format!("seed {} and 1.2.3", u64::MAX);
        assert_eq!(Problem::new("x", seed.clone()).message, seed);
        // Two long numbers in one message, and one glued to a word, which is not a number.
        assert_eq!(
            Problem::new("x", format!("{} and {}", 2e30, 3e-30)).message,
            "2e30 and 3e-30"
        );
        let name = format!("model{}", "1".repeat(30));
        assert_eq!(Problem::new("x", name.clone()).message, name);
        // Quoted text is the user's, digit for digit; a number after it is still shortened.
        let given = format!("got {:?}, {}", "0.150000000000000000001", 1e300);
        assert_eq!(
            Problem::new("x", given).message,
            "got \"0.150000000000000000001\", 1e300"
        );
        let escaped = format!("got {:?} then {}", "a\"1234567890123456789012", 2e30);
        assert_eq!(
            Problem::new("x", escaped).message,
            "got \"a\\\"1234567890123456789012\" then 2e30"
        );
    }

    #[test]
    fn did_you_mean_finds_near_misses_only() {
        let names = ["round_robin", "least_loaded"];
        assert_eq!(did_you_mean("round_robbin", names), Some("round_robin"));
        assert_eq!(did_you_mean("leastloaded", names), Some("least_loaded"));
        assert_eq!(did_you_mean("zzzzzzzzzzzzzzzz", names), None);
        // Nothing of an empty or unrelated short name would be kept.
        let gpus = ["H100", "H20", "L40S"];
        assert_eq!(did_you_mean("H10", gpus), Some("H100"));
        for far in ["", "   ", "-", "abc"] {
            assert_eq!(did_you_mean(far, gpus), None, "{far:?}");
        }
        // Ties go to the first listed, not the first in the alphabet; `closest` gives all.
        assert_eq!(
            did_you_mean("vllm", ["vllm_v1", "vllm_v0"]),
            Some("vllm_v1")
        );
        assert_eq!(
            did_you_mean("vllm", ["vllm_v0", "vllm_v1"]),
            Some("vllm_v0")
        );
        let schedulers = ["orca", "vllm_v0", "vllm_v1", "sarathi"];
        assert_eq!(closest("vllm", schedulers), ["vllm_v0", "vllm_v1"]);
        assert_eq!(closest("vllm_v2", schedulers), ["vllm_v0", "vllm_v1"]);
        assert_eq!(closest("vllm_v1x", schedulers), ["vllm_v1"]);
        assert!(closest("zzzzzzzzzzzzzzzz", schedulers).is_empty());
    }
}
