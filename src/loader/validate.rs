//! Whole-scenario validation: every problem with its field path, at once. Each concern
//! checks its own part (`workload::check`, `instance::check_group`, `policy::check`,
//! `autoscale::check`, `disagg::check`, `network::check`, `metrics::check_outputs`); this adds what is the whole scenario's (and `plan.rs`, the `plan`
//! block):
//! the whole scenario's: the horizon, the size of the cluster and the memory it needs.

use crate::catalog::Catalog;
use crate::scenario::{Problem, Scenario, did_you_mean, finite_positive};

/// Turns a RON/serde error into a message and a hint. RON's own wording names our Rust types
/// (`InstanceGroup`, `ClusterSpec`) and its raw-identifier syntax, which a scenario's author
/// never sees; these say what the field expects instead.
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

/// Checks everything serde could not: ranges, finiteness, names, cross-field rules.
pub(super) fn validate(s: &Scenario, catalog: &Catalog) -> Vec<Problem> {
    let mut p = Vec::new();
    if let Some(h) = s.horizon_s {
        finite_positive(
            &mut p,
            "horizon_s",
            h,
            "simulated seconds; omit it to run until all requests finish",
        );
    }
    if s.cluster.groups.is_empty() {
        p.push(
            Problem::new("cluster.groups", "the cluster has no instance groups").hint(
                "add at least one group, e.g. (count: 1, kv_blocks: 8192, latency: Blackbox(...))",
            ),
        );
    }
    // Autoscaled groups are spawned at their max.
    let spawned =
        |g: &crate::scenario::InstanceGroup| g.scaling.as_ref().map_or(g.count, |x| x.max);
    let instances: u64 = s.cluster.groups.iter().map(|g| u64::from(spawned(g))).sum();
    if instances > crate::scenario::MAX_INSTANCES {
        p.push(
            Problem::new(
                "cluster.groups",
                format!(
                    "{instances} instances in all; at most {}",
                    crate::scenario::grouped(crate::scenario::MAX_INSTANCES)
                ),
            )
            .hint("simulate a representative slice of the cluster"),
        );
    }
    // A group's name labels its instances' results (summary.json's groups, timeseries.csv,
    // scale_events.csv) and names it to `capacity --group`: two groups of one name would
    // read as one.
    let labels = s.labels().groups;
    for (i, name) in labels.iter().enumerate() {
        let at = format!("cluster.groups[{i}].name");
        if let Some(j) = labels[..i].iter().position(|n| n == name) {
            let unnamed = if s.cluster.groups[j].name.is_empty() {
                " (its default name)"
            } else {
                ""
            };
            p.push(
                Problem::new(
                    at,
                    format!("\"{name}\" is also the name of cluster.groups[{j}]{unnamed}"),
                )
                .hint("give each group a name of its own: it labels the group's results and names it to capacity --group"),
            );
        } else {
            one_line(&mut p, at, name);
        }
    }
    // The other names that label results: one line each.
    for (i, c) in s.workload.clients.iter().enumerate() {
        one_line(&mut p, format!("workload.clients[{i}].name"), &c.name);
        if let Some(t) = &c.tenant {
            one_line(&mut p, format!("workload.clients[{i}].tenant"), t);
        }
    }
    for (i, t) in s.workload.traces.iter().enumerate() {
        if let Some(name) = &t.tenant {
            one_line(&mut p, format!("workload.traces[{i}].tenant"), name);
        }
    }
    for (k, c) in s.policies.slo_classes.iter().enumerate() {
        one_line(&mut p, format!("policies.slo_classes[{k}].name"), &c.name);
    }
    if let Some(a) = &s.workload.adapters {
        for (k, name) in a.names.iter().enumerate() {
            one_line(&mut p, format!("workload.adapters.names[{k}]"), name);
        }
    }
    let mut table_bytes = 0.0;
    let mut nodes = Vec::new();
    for (i, g) in s.cluster.groups.iter().enumerate() {
        crate::instance::check_group(&mut p, s, i, catalog);
        let resolved = super::resolve_group(s, i, catalog);
        // A group that does not resolve has its own errors; its node is not asked for.
        nodes.push(
            resolved
                .as_ref()
                .ok()
                .map(|r| r.gpu.as_ref().and_then(|g| g.node)),
        );
        match resolved {
            Ok(r) => {
                crate::energy::check_group(&mut p, s, i, &r);
                super::hybrid::check(&mut p, s, i, &r);
                table_bytes += f64::from(spawned(g))
                    * (f64::from(r.kv_blocks) * GPU_BLOCK_BYTES
                        + f64::from(g.cpu_kv_blocks + g.nvme_kv_blocks) * CPU_BLOCK_BYTES);
            }
            Err(problems) => p.extend(problems),
        }
    }
    if let Some(st) = &s.cluster.kv_store {
        table_bytes += f64::from(st.blocks) * CPU_BLOCK_BYTES;
    }
    crate::instance::check_kv_store(&mut p, s);
    crate::network::check(&mut p, s, &nodes);
    check_limits(&mut p, s, table_bytes);
    crate::policy::check(&mut p, s, catalog);
    crate::metrics::check_outputs(&mut p, s);
    crate::disagg::check(&mut p, s, catalog);
    crate::autoscale::check(&mut p, s);
    crate::energy::check(&mut p, s);
    crate::gateway::check(&mut p, s);
    crate::faults::check(&mut p, s);
    super::plan::check(&mut p, s, catalog);
    p.extend(crate::workload::check(s));
    p
}

/// Memory one GPU KV block costs the simulator once used (block row, prefix-index entry and
/// its share of the index's slack), bytes; measured ~120.
pub const GPU_BLOCK_BYTES: f64 = 128.0;
/// Memory one CPU-tier block costs (LRU slot and index entry), bytes.
pub const CPU_BLOCK_BYTES: f64 = 64.0;

fn check_limits(p: &mut Vec<Problem>, s: &crate::scenario::Scenario, table_bytes: f64) {
    let l = &s.limits;
    if !l.max_memory_gib.is_finite() || l.max_memory_gib <= 0.0 {
        p.push(Problem::new(
            "limits.max_memory_gib",
            format!("must be a finite number > 0, got {}", l.max_memory_gib),
        ));
    } else {
        let gib = table_bytes / f64::from(1u32 << 30);
        if gib > l.max_memory_gib {
            p.push(
                Problem::new(
                    "cluster.groups",
                    format!(
                        "the KV block tables need about {gib:.1} GiB ({GPU_BLOCK_BYTES} bytes per GPU block, {CPU_BLOCK_BYTES} per CPU-tier block, every instance), above limits.max_memory_gib = {}",
                        l.max_memory_gib
                    ),
                )
                .hint("simulate fewer instances or blocks, or raise limits.max_memory_gib if the machine has the memory"),
            );
        }
    }
    if l.max_in_flight == 0 {
        p.push(Problem::new("limits.max_in_flight", "must be ≥ 1"));
    }
    if l.max_waiting_per_instance == Some(0) {
        p.push(
            Problem::new("limits.max_waiting_per_instance", "must be ≥ 1")
                .hint("omit it for an unbounded queue"),
        );
    }
    if l.offline_batch_window == 0 {
        p.push(Problem::new("limits.offline_batch_window", "must be ≥ 1"));
    }
}

/// A name that labels results (a CSV cell, a table's column on stdout) is one line: a control
/// character (a line break, a tab) in it is refused.
fn one_line(p: &mut Vec<Problem>, at: String, name: &str) {
    if name.chars().any(char::is_control) {
        p.push(Problem::new(
            at,
            format!("{name:?} holds a control character (a line break, a tab…): a name is one line of text"),
        ));
    }
}
