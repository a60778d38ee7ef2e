//! `servesim evaluate`.

use std::path::PathBuf;
use std::process::ExitCode;

use super::args::{Format, parse_overrides};
use crate::ServesimApp;
use crate::evaluate::Settings;

#[derive(clap::Args)]
pub(crate) struct EvaluateArgs {
    /// Scenario file (RON): the candidate's policies and the workload to score them on.
    scenario: PathBuf,
    /// Override a field (as for `run`), e.g. a policy or its parameters.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    set: Vec<String>,
    /// Seeds run (the scenario's seed, +1, …); objectives are their mean.
    #[arg(long, allow_negative_numbers = true, default_value_t = 1)]
    seeds: u32,
    /// Weight of an objective in the combined score (default 1 each; 0 leaves it out).
    #[arg(long = "weight", value_name = "OBJECTIVE=W")]
    weights: Vec<String>,
    /// Worst routing decisions listed in the trace summary.
    #[arg(long, allow_negative_numbers = true, default_value_t = 5)]
    worst: u32,
    /// Parallel runs (default: every core).
    #[arg(long, allow_negative_numbers = true, value_parser = super::args::parse_jobs)]
    jobs: Option<usize>,
    /// The evaluation on stdout: the trace summary in words, or every score, metric and
    /// check as JSON.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

pub(crate) fn evaluate(app: &ServesimApp, a: EvaluateArgs) -> ExitCode {
    let fail = |e: String| {
        noteln!("error: {e}");
        ExitCode::from(2)
    };
    let set = match parse_overrides(&a.set, None) {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    let mut weights = std::collections::BTreeMap::new();
    for w in &a.weights {
        let parsed = w
            .split_once('=')
            .and_then(|(k, v)| v.trim().parse::<f64>().ok().map(|v| (k.trim(), v)));
        let Some((k, v)) = parsed else {
            return fail(format!(
                "--weight {w}: expected OBJECTIVE=NUMBER, e.g. --weight ttft_p99=2"
            ));
        };
        if weights.insert(k.to_string(), v).is_some() {
            return fail(format!(
                "--weight {k} is given twice: give each objective one weight"
            ));
        }
    }
    if a.worst > 1000 {
        return fail(format!("--worst {}: at most 1000", a.worst));
    }
    let built = app.build();
    let catalog = built.world().resource::<crate::catalog::Catalog>();
    let scenario = match super::args::load(&a.scenario, &set, catalog) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let settings = Settings {
        seeds: a.seeds,
        jobs: super::args::jobs(a.jobs),
        worst: a.worst,
        weights,
        interrupt: None,
    };
    // What `validate` would warn of, on stderr (the evaluation on stdout is unchanged).
    super::args::announce(&scenario, catalog);
    match crate::evaluate::evaluate(app, &scenario, &settings) {
        Ok(e) => {
            match a.format {
                Format::Json => {
                    outln!("{}", serde_json::to_string_pretty(&e).unwrap_or_default())
                }
                Format::Text => outln!("{}", e.trace.text),
            }
            ExitCode::SUCCESS
        }
        Err(e) if e.starts_with("seed ") => {
            noteln!("error: {e}");
            ExitCode::from(1)
        }
        Err(e) => fail(e),
    }
}
