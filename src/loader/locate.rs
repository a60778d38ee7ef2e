//! Maps field paths (`cluster.groups[0].kv_blocks`) to places in RON source text.
//!
//! A lenient scanner: it never fails and never panics on malformed text (the RON parser
//! reports syntax errors); it only records where each field and list element it can
//! recognise starts and ends. Used to give validation errors a line:column, to name the
//! field an error position falls in, and to apply `--set path=value` overrides as text
//! splices (so enums and options keep their RON spelling).

/// One located value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located {
    pub path: String,
    /// Byte offset of the field name (or list element) start.
    pub key_start: usize,
    /// Byte range of the value text.
    pub value: (usize, usize),
}

/// A struct-like group `( ... )` or a map `{ ... }` that can receive inserted fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    pub path: String,
    /// Byte offset just after the opening parenthesis or brace.
    pub open: usize,
    pub has_fields: bool,
    /// A map `{ "key": value }` rather than a struct.
    pub map: bool,
}

/// Scenario fields that are maps from names to numbers (`--set` reaches their keys:
/// `policies.admission_params.capacity=10`).
const MAP_FIELDS: [&str; 6] = [
    "scheduler_params",
    "admission_params",
    "priority_params",
    "routing_params",
    "autoscale_params",
    "fitness",
];

#[derive(Debug, Default)]
pub struct SourceMap {
    pub values: Vec<Located>,
    pub groups: Vec<Group>,
    line_starts: Vec<usize>,
}

const MAX_DEPTH: usize = 64;

impl SourceMap {
    pub fn new(src: &str) -> Self {
        let mut map = SourceMap {
            line_starts: std::iter::once(0)
                .chain(src.match_indices('\n').map(|(i, _)| i + 1))
                .collect(),
            ..Default::default()
        };
        let mut s = Scanner {
            src: src.as_bytes(),
            pos: 0,
            map: &mut map,
        };
        s.attributes();
        s.value("", 0);
        map
    }

    /// 1-based (line, column) of a byte offset; columns count characters.
    pub fn line_col(&self, src: &str, offset: usize) -> (usize, usize) {
        let offset = offset.min(src.len());
        let line = self.line_starts.partition_point(|&s| s <= offset).max(1);
        let start = self.line_starts[line - 1];
        let col = src
            .get(start..offset)
            .map_or(offset - start, |t| t.chars().count())
            + 1;
        (line, col)
    }

    /// Byte offset of a 1-based (line, column), clamped to the text.
    pub fn offset_of(&self, src: &str, line: usize, col: usize) -> usize {
        let Some(&start) = self.line_starts.get(line.saturating_sub(1)) else {
            return src.len();
        };
        src[start..]
            .char_indices()
            .nth(col.saturating_sub(1))
            .map_or(src.len(), |(i, _)| start + i)
    }

    /// Where the field `path` is written, if it is.
    pub fn find(&self, path: &str) -> Option<&Located> {
        self.values.iter().rev().find(|v| v.path == path)
    }

    /// The nearest written ancestor of `path` (or `path` itself).
    pub fn nearest(&self, path: &str) -> Option<&Located> {
        let mut p = path;
        loop {
            if let Some(v) = self.find(p) {
                return Some(v);
            }
            let cut = p.rfind(['.', '['])?;
            p = &p[..cut];
        }
    }

    /// The innermost field whose value contains byte `offset`.
    pub fn path_at(&self, offset: usize) -> Option<&str> {
        self.values
            .iter()
            .filter(|v| v.key_start <= offset && offset < v.value.1.max(v.key_start + 1))
            .max_by_key(|v| v.key_start)
            .map(|v| v.path.as_str())
    }
}

struct Scanner<'a> {
    src: &'a [u8],
    pos: usize,
    map: &'a mut SourceMap,
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.src.get(self.pos).copied()
    }

    fn skip_trivia(&mut self) {
        while let Some(c) = self.peek() {
            if c.is_ascii_whitespace() {
                self.pos += 1;
            } else if self.src[self.pos..].starts_with(b"//") {
                while self.peek().is_some_and(|c| c != b'\n') {
                    self.pos += 1;
                }
            } else if self.src[self.pos..].starts_with(b"/*") {
                self.pos += 2;
                while self.pos < self.src.len() && !self.src[self.pos..].starts_with(b"*/") {
                    self.pos += 1;
                }
                self.pos = (self.pos + 2).min(self.src.len());
            } else {
                break;
            }
        }
    }

    /// Skips the `#![enable(…)]` attributes RON allows before the value (else the value
    /// scanned was the attribute, and no field of the scenario could be found or set).
    fn attributes(&mut self) {
        loop {
            self.skip_trivia();
            if !self.src[self.pos..].starts_with(b"#![") {
                return;
            }
            self.pos += 3;
            let mut depth = 1;
            while let Some(c) = self.peek() {
                self.pos += 1;
                depth += usize::from(c == b'[');
                depth -= usize::from(c == b']');
                if depth == 0 {
                    break;
                }
            }
        }
    }

    fn ident(&mut self) -> Option<(usize, usize)> {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'#')
        {
            self.pos += 1;
        }
        (self.pos > start).then_some((start, self.pos))
    }

    fn string(&mut self, quote: u8) {
        self.pos += 1;
        while let Some(c) = self.peek() {
            self.pos += 1;
            if c == b'\\' {
                self.pos += 1;
            } else if c == quote {
                break;
            }
        }
        self.pos = self.pos.min(self.src.len());
    }

    /// Scans one value; returns its byte range.
    fn value(&mut self, path: &str, depth: usize) -> (usize, usize) {
        self.skip_trivia();
        let start = self.pos;
        if depth > MAX_DEPTH {
            self.skip_deep();
            return (start, self.pos);
        }
        match self.peek() {
            None => {}
            Some(b'[') => self.list(path, depth),
            Some(b'{') => self.map_(path, depth),
            Some(b'(') => self.group(path, depth),
            Some(b'"') => self.string(b'"'),
            Some(b'\'') => self.string(b'\''),
            Some(c) if c.is_ascii_alphabetic() || c == b'_' => {
                self.ident();
                let after = self.pos;
                self.skip_trivia();
                if self.peek() == Some(b'(') {
                    self.group(path, depth);
                } else {
                    self.pos = after;
                }
            }
            Some(_) => {
                // Number or other scalar: up to the next delimiter.
                while self.peek().is_some_and(|c| {
                    !matches!(c, b',' | b')' | b']' | b'}') && !c.is_ascii_whitespace()
                }) {
                    self.pos += 1;
                }
                if self.pos == start {
                    self.pos += 1;
                }
            }
        }
        (start, self.pos)
    }

    /// Skips a value nested deeper than any scenario field, counting its brackets instead
    /// of recursing into them, so that its span is still right for a `--set` beside it (it
    /// ended the map: `--set horizon_s=5` over a value 100 lists deep cut the file there).
    fn skip_deep(&mut self) {
        let mut open = 0usize;
        loop {
            self.skip_trivia();
            let Some(c) = self.peek() else { return };
            match c {
                b'"' | b'\'' => self.string(c),
                b'[' | b'(' | b'{' => {
                    open += 1;
                    self.pos += 1;
                }
                b']' | b')' | b'}' | b',' if open == 0 => return,
                b']' | b')' | b'}' => {
                    open -= 1;
                    self.pos += 1;
                }
                _ => self.pos += 1,
            }
            if open == 0 && matches!(c, b']' | b')' | b'}' | b'"' | b'\'') {
                return;
            }
        }
    }

    fn list(&mut self, path: &str, depth: usize) {
        self.pos += 1;
        let mut i = 0;
        loop {
            self.skip_trivia();
            match self.peek() {
                None => return,
                Some(b']') => {
                    self.pos += 1;
                    return;
                }
                Some(b',') => {
                    self.pos += 1;
                    continue;
                }
                _ => {}
            }
            let p = format!("{path}[{i}]");
            let before = self.pos;
            let value = self.value(&p, depth + 1);
            self.map.values.push(Located {
                path: p,
                key_start: value.0,
                value,
            });
            i += 1;
            if self.pos == before {
                self.pos += 1;
            }
        }
    }

    fn map_(&mut self, path: &str, depth: usize) {
        self.pos += 1;
        self.map.groups.push(Group {
            path: path.to_string(),
            open: self.pos,
            has_fields: false,
            map: true,
        });
        loop {
            self.skip_trivia();
            match self.peek() {
                None => return,
                Some(b'}') => {
                    self.pos += 1;
                    return;
                }
                Some(b',') => {
                    self.pos += 1;
                    continue;
                }
                _ => {}
            }
            let before = self.pos;
            let key = self.value("", depth + 1);
            let key_text = String::from_utf8_lossy(&self.src[key.0..key.1])
                .trim_matches('"')
                .to_string();
            self.skip_trivia();
            if self.peek() == Some(b':') {
                self.pos += 1;
                let p = join(path, &key_text);
                let value = self.value(&p, depth + 1);
                self.map.values.push(Located {
                    path: p,
                    key_start: key.0,
                    value,
                });
            }
            if self.pos == before {
                self.pos += 1;
            }
        }
    }

    fn group(&mut self, path: &str, depth: usize) {
        self.pos += 1;
        let group_index = self.map.groups.len();
        self.map.groups.push(Group {
            path: path.to_string(),
            open: self.pos,
            has_fields: false,
            map: false,
        });
        loop {
            self.skip_trivia();
            match self.peek() {
                None => return,
                Some(b')') => {
                    self.pos += 1;
                    return;
                }
                Some(b',') => {
                    self.pos += 1;
                    continue;
                }
                _ => {}
            }
            let before = self.pos;
            // `name:` starts a field; anything else is a positional element.
            if let Some((ks, ke)) = self.ident() {
                let after_ident = self.pos;
                self.skip_trivia();
                if self.peek() == Some(b':') && self.src.get(self.pos + 1) != Some(&b':') {
                    self.pos += 1;
                    let name = String::from_utf8_lossy(&self.src[ks..ke]).into_owned();
                    let p = join(path, &name);
                    let value = self.value(&p, depth + 1);
                    self.map.groups[group_index].has_fields = true;
                    self.map.values.push(Located {
                        path: p,
                        key_start: ks,
                        value,
                    });
                } else {
                    self.pos = ks;
                    let _ = after_ident;
                    self.value(path, depth + 1);
                }
            } else {
                self.value(path, depth + 1);
            }
            if self.pos == before {
                self.pos += 1;
            }
        }
    }
}

/// Checks that a `--set` value is one RON value and nothing else: no field after it, no
/// comment or unbalanced bracket that would swallow the scenario text after it.
pub fn check_single_value(value: &str) -> Result<(), String> {
    let one = "a --set value is one RON value; set each field with its own --set";
    let bytes = value.as_bytes();
    if value.trim().is_empty() {
        return Err("the value is empty (write PATH=VALUE)".into());
    }
    let mut open: Vec<u8> = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            q @ (b'"' | b'\'') => {
                i += 1;
                while i < bytes.len() && bytes[i] != q {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                if i >= bytes.len() {
                    return Err("the value has an unterminated string".into());
                }
            }
            b'/' if matches!(bytes.get(i + 1), Some(b'/' | b'*')) => {
                return Err("comments are not allowed in a --set value".into());
            }
            b'(' => open.push(b')'),
            b'[' => open.push(b']'),
            b'{' => open.push(b'}'),
            c @ (b')' | b']' | b'}') if open.pop() != Some(c) => {
                return Err(format!("unbalanced `{}` in the value; {one}", c as char));
            }
            b',' | b':' if open.is_empty() => {
                return Err(format!(
                    "`{}` outside brackets: {one}",
                    String::from_utf8_lossy(&bytes[i..]).trim()
                ));
            }
            _ => {}
        }
        i += 1;
    }
    if let Some(c) = open.pop() {
        return Err(format!("the value lacks a closing `{}`", c as char));
    }
    let mut map = SourceMap::default();
    let mut s = Scanner {
        src: bytes,
        pos: 0,
        map: &mut map,
    };
    s.value("", 0);
    s.skip_trivia();
    if s.pos < bytes.len() {
        return Err(format!(
            "`{}` follows the value: {one}",
            String::from_utf8_lossy(&bytes[s.pos..]).trim()
        ));
    }
    Ok(())
}

/// Applies `path=value` to RON source text: replaces the value if the field is written,
/// else inserts it (creating missing parent structs) into the nearest written struct.
/// Keys of map fields (`policies.admission_params.capacity`) are set or inserted as keys.
pub fn apply_override(src: &str, path: &str, value: &str) -> Result<String, String> {
    check_path(path)?;
    check_single_value(value)?;
    let map = SourceMap::new(src);
    let parts: Vec<&str> = path.split('.').collect();
    let map_at = parts
        .iter()
        .position(|p| MAP_FIELDS.contains(p))
        .filter(|&i| i + 1 < parts.len());
    let splice = |at: usize, text: &str| {
        let mut out = String::with_capacity(src.len() + text.len());
        out.push_str(&src[..at]);
        out.push_str(text);
        out.push_str(&src[at..]);
        out
    };
    if let Some(i) = map_at.filter(|_| map.find(path).is_none()) {
        let key = parts[i + 1..].join(".");
        if key.contains(['"', '\\']) {
            return Err(format!(
                "a map key cannot contain quotes or backslashes: `{key}`"
            ));
        }
        let map_path = parts[..=i].join(".");
        if let Some(g) = map.groups.iter().rev().find(|g| g.path == map_path) {
            if !g.map {
                return Err(format!("`{map_path}` is written but is not a map {{...}}"));
            }
            return Ok(splice(g.open, &format!("\"{key}\": {value}, ")));
        }
        return apply_override(src, &map_path, &format!("{{\"{key}\": {value}}}"));
    }
    if let Some(v) = map.find(path) {
        let mut out = String::with_capacity(src.len() + value.len());
        out.push_str(&src[..v.value.0]);
        out.push_str(value);
        out.push_str(&src[v.value.1..]);
        return Ok(out);
    }
    // Walk up to the nearest struct group that exists.
    for cut in (0..parts.len()).rev() {
        let parent = parts[..cut].join(".");
        let missing = &parts[cut..];
        if missing.iter().any(|p| p.contains('[')) {
            continue;
        }
        let Some(group) = map.groups.iter().rev().find(|g| g.path == parent && !g.map) else {
            continue;
        };
        let mut text = value.to_string();
        for field in missing[1..].iter().rev() {
            text = format!("({field}: {text})");
        }
        let insert = format!("{}: {text}, ", missing[0]);
        let mut out = String::with_capacity(src.len() + insert.len());
        out.push_str(&src[..group.open]);
        out.push_str(&insert);
        out.push_str(&src[group.open..]);
        return Ok(out);
    }
    Err(unset_reason(&map, path))
}

/// `path` is field names joined by `.`, each perhaps followed by list indices (`groups[0]`);
/// after a map field (`routing_params`) the rest is the key. (`.seed` or `seed.` was applied
/// as something else and reported as a duplicate `seed` or a number expected.)
fn check_path(path: &str) -> Result<(), String> {
    if path.trim().is_empty() {
        return Err("the field path is empty".into());
    }
    let mut parts = path.split('.').peekable();
    while let Some(part) = parts.next() {
        let name_end = part.find('[').unwrap_or(part.len());
        let (name, indices) = part.split_at(name_end);
        if name.is_empty() {
            return Err("has an empty field name (before or after a `.`)".into());
        }
        if !name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(format!(
                "`{name}` is not a field name (letters, digits and `_`)"
            ));
        }
        // `[…]` groups only; what is inside is checked where the list is found.
        let mut rest = indices;
        while let Some(inner) = rest.strip_prefix('[') {
            match inner.find(']') {
                Some(close) => rest = &inner[close + 1..],
                None => break,
            }
        }
        if !rest.is_empty() {
            return Err(format!(
                "`{part}` is neither a field name nor a list entry such as `groups[0]`"
            ));
        }
        if MAP_FIELDS.contains(&name) && indices.is_empty() && parts.peek().is_some() {
            let key: Vec<&str> = parts.collect();
            if key.concat().is_empty() {
                return Err(format!("the key of `{name}` is empty"));
            }
            return Ok(());
        }
    }
    Ok(())
}

/// Why `path` can be neither replaced nor inserted: an entry of a list that is not written
/// (an index past the end, or not an index), else no written struct to insert it into.
fn unset_reason(map: &SourceMap, path: &str) -> String {
    let written = |p: &str| map.find(p).is_some() || map.groups.iter().any(|g| g.path == p);
    let mut at = 0;
    while let Some(open) = path[at..].find('[').map(|o| at + o) {
        let Some(close) = path[open..].find(']').map(|c| open + c) else {
            break;
        };
        let (list, index) = (&path[..open], &path[open + 1..close]);
        if !written(&path[..=close]) {
            let n = (0..)
                .take_while(|k| written(&format!("{list}[{k}]")))
                .count();
            return match index.trim().parse::<usize>() {
                Err(_) => {
                    format!("cannot set `{path}`: `[{index}]` is not a list index (0, 1, 2, …)")
                }
                Ok(_) if n == 0 && !written(list) => format!(
                    "cannot set `{path}`: `{list}` is not written in the scenario (is the path right?)"
                ),
                Ok(_) if n == 0 => format!(
                    "cannot set `{path}`: `{list}` has no entry written in the scenario; write the entry there (--set changes an entry, it does not add one)"
                ),
                Ok(_) => format!(
                    "cannot set `{path}`: `{list}` has {n} entr{} ([0]{}); --set changes an entry, it does not add one",
                    if n == 1 { "y" } else { "ies" },
                    if n == 1 {
                        String::new()
                    } else {
                        format!(" to [{}]", n - 1)
                    }
                ),
            };
        }
        at = close + 1;
    }
    format!("cannot set `{path}`: no such field is written and its parent cannot be found")
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = "// comment (not: a field)\n(\n  seed: 7,\n  cluster: (groups: [\n    (count: 2, latency: Blackbox(alpha: [1.0, 2.0, 3.0], beta: [4, 5, 6])),\n    (count: 3, name: \"b, (c)\"),\n  ]),\n  workload: (clients: [(input_tokens: Normal(mean: 5.0, stdev: 1.0, min: 1, max: 9))]),\n)\n";

    #[test]
    fn fields_and_list_elements_are_located_with_line_and_column() {
        let m = SourceMap::new(SRC);
        let count = m.find("cluster.groups[1].count").unwrap();
        assert_eq!(m.line_col(SRC, count.key_start), (6, 6));
        assert_eq!(&SRC[count.value.0..count.value.1], "3");
        let name = m.find("cluster.groups[1].name").unwrap();
        assert_eq!(&SRC[name.value.0..name.value.1], "\"b, (c)\"");
        let mean = m.find("workload.clients[0].input_tokens.mean").unwrap();
        assert_eq!(&SRC[mean.value.0..mean.value.1], "5.0");
        assert!(m.find("not").is_none(), "comments are skipped");
        let beta = m.find("cluster.groups[0].latency.beta").unwrap();
        assert_eq!(
            m.path_at(beta.value.0 + 3),
            Some("cluster.groups[0].latency.beta")
        );
    }

    #[test]
    fn a_value_nested_deeper_than_the_scan_keeps_its_span_and_the_fields_after_it() {
        // Beyond 64 levels the scan skips the value's brackets instead of recursing: it
        // ended the map there, and `--set horizon_s=5` cut the file at the value.
        let deep = format!("{}\"]\", (1){}", "[".repeat(100), "]".repeat(100));
        let src = format!("(horizon_s: {deep}, seed: Some(7), name: \"x\")");
        let m = SourceMap::new(&src);
        let h = m.find("horizon_s").unwrap();
        assert_eq!(&src[h.value.0..h.value.1], deep);
        let seed = m.find("seed").unwrap();
        assert_eq!(&src[seed.value.0..seed.value.1], "Some(7)");
        assert_eq!(
            apply_override(&src, "horizon_s", "5").unwrap(),
            "(horizon_s: 5, seed: Some(7), name: \"x\")"
        );
    }

    #[test]
    fn ron_attributes_before_the_value_are_skipped() {
        // With `#![enable(…)]` first, the attribute was scanned as the value: nothing was
        // found, and no --set could apply.
        let src = format!(
            "#![enable(implicit_some)]\n/* c */ #![enable(unwrap_newtypes)] Scenario{}",
            &SRC[26..]
        );
        let m = SourceMap::new(&src);
        let count = m.find("cluster.groups[1].count").unwrap();
        assert_eq!(m.line_col(&src, count.key_start), (6, 6));
        let out = apply_override(&src, "seed", "99").unwrap();
        assert!(out.contains("seed: 99,"));
    }

    #[test]
    fn overrides_replace_written_values_and_insert_missing_ones() {
        let out = apply_override(SRC, "seed", "99").unwrap();
        assert!(out.contains("seed: 99,"));
        let out = apply_override(SRC, "cluster.groups[0].count", "5").unwrap();
        assert!(out.contains("(count: 5, latency"));
        let out = apply_override(SRC, "horizon_s", "10.0").unwrap();
        assert_eq!(
            SourceMap::new(&out)
                .find("horizon_s")
                .map(|v| &out[v.value.0..v.value.1]),
            Some("10.0")
        );
        let out = apply_override(SRC, "policies.routing", "\"least_loaded\"").unwrap();
        assert!(out.contains("policies: (routing: \"least_loaded\")"));
        // An entry that is not written cannot be set, and the error says what there is.
        let err = |path: &str| apply_override(SRC, path, "1").unwrap_err();
        assert_eq!(
            err("cluster.groups[5].count"),
            "cannot set `cluster.groups[5].count`: `cluster.groups` has 2 entries ([0] to [1]); --set changes an entry, it does not add one"
        );
        assert_eq!(
            err("workload.clients[1].rate_per_s"),
            "cannot set `workload.clients[1].rate_per_s`: `workload.clients` has 1 entry ([0]); --set changes an entry, it does not add one"
        );
        assert_eq!(
            err("cluster.groups[-1].count"),
            "cannot set `cluster.groups[-1].count`: `[-1]` is not a list index (0, 1, 2, …)"
        );
        assert_eq!(
            err("policies.tenants[0].name"),
            "cannot set `policies.tenants[0].name`: `policies.tenants` is not written in the scenario (is the path right?)"
        );
    }

    #[test]
    fn overrides_reach_map_keys_written_or_not() {
        let parsed = |src: &str| {
            let m = SourceMap::new(src);
            let v = m.find("policies.admission_params.capacity").unwrap();
            src[v.value.0..v.value.1].to_string()
        };
        // No policies at all: the struct and the map are created.
        let out = apply_override(SRC, "policies.admission_params.capacity", "5.0").unwrap();
        assert!(
            out.contains("policies: (admission_params: {\"capacity\": 5.0})"),
            "{out}"
        );
        assert_eq!(parsed(&out), "5.0");
        // The map is written: the key is added, then replaced.
        let src = "(policies: (admission_params: {\"refill_per_s\": 2.0}))";
        let out = apply_override(src, "policies.admission_params.capacity", "7.0").unwrap();
        assert_eq!(
            out,
            "(policies: (admission_params: {\"capacity\": 7.0, \"refill_per_s\": 2.0}))"
        );
        let out = apply_override(&out, "policies.admission_params.capacity", "9").unwrap();
        assert_eq!(parsed(&out), "9");
        // Keys may hold dots (tenant_quota's `tenant.<name>`).
        let out = apply_override(src, "policies.admission_params.tenant.a.b", "3.0").unwrap();
        assert!(out.contains("{\"tenant.a.b\": 3.0, "), "{out}");
        // The policies struct is written without the map.
        let src = "(policies: (routing: \"x\"))";
        let out = apply_override(src, "policies.routing_params.w", "1.0").unwrap();
        assert_eq!(
            out,
            "(policies: (routing_params: {\"w\": 1.0}, routing: \"x\"))"
        );
    }

    #[test]
    fn a_value_that_smuggles_in_other_fields_or_text_is_refused() {
        for bad in [
            "1, horizon_s: 0.001",
            "1) , (x: 2",
            "5 // the rest of the line",
            "5 /* */",
            "(a: 1",
            "[1, 2]]",
            "\"unterminated",
            "1 2",
            "",
            "Poisson(rate: 1.0), extra: 3",
        ] {
            assert!(
                apply_override(SRC, "seed", bad).is_err(),
                "accepted {bad:?}"
            );
        }
        for good in [
            "1",
            "-2.5e3",
            "\"a, b: // c\"",
            "Poisson(rate: 1.0)",
            "Some(3)",
            "[1, 2]",
            "{\"k\": 1.0}",
            "Normal(mean: 5.0, stdev: 1.0, min: 1, max: 9)",
        ] {
            assert!(
                apply_override(SRC, "seed", good).is_ok(),
                "refused {good:?}"
            );
        }
    }

    #[test]
    fn a_path_that_is_not_field_names_joined_by_dots_is_refused() {
        for (bad, why) in [
            ("", "the field path is empty"),
            (" ", "the field path is empty"),
            (".seed", "has an empty field name (before or after a `.`)"),
            ("seed.", "has an empty field name"),
            ("cluster..groups", "has an empty field name"),
            (
                "cluster.groups[0]x.count",
                "`groups[0]x` is neither a field name nor",
            ),
            ("cluster.groups[0.count", "`groups[0` is neither"),
            ("cluster.gro ups", "`gro ups` is not a field name"),
            ("cluster.0groups", "`0groups` is not a field name"),
            ("[0].seed", "has an empty field name"),
            (
                "policies.routing_params.",
                "the key of `routing_params` is empty",
            ),
        ] {
            let err = apply_override(SRC, bad, "1").unwrap_err();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
        // Indices, map keys with dots and a whole map are paths.
        for good in [
            "cluster.groups[1].count",
            "cluster.groups[0].latency.alpha[1]",
            "policies.routing_params.weight.kv",
            "policies.routing_params",
            "_x",
        ] {
            let r = apply_override(SRC, good, "1");
            assert!(
                r.as_ref().is_ok() || !r.as_ref().unwrap_err().contains("field name"),
                "{good:?}: {r:?}"
            );
        }
    }

    #[test]
    fn malformed_text_never_panics() {
        for src in [
            "(",
            "[[[",
            "(a: ",
            "(a: \"unterminated",
            "/*",
            "{\"k\": (x: [1,",
            ")))",
            "(a::b)",
        ] {
            let m = SourceMap::new(src);
            let _ = m.path_at(1);
            let _ = apply_override(src, "a.b", "1");
        }
        let deep = "(".repeat(10_000);
        let _ = SourceMap::new(&deep);
    }
}
