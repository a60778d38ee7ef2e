//! Loading a scenario: reading the RON file, `--set` overrides, locating each problem at
//! its line:column, validation (each concern checks its own part) and resolving the
//! instance groups (model, GPU, tables, latency model). Only the driver, the command line
//! and the Python package call it; the concerns read the plain schema of
//! [`scenario`](crate::scenario).

pub mod estimate;
mod expert;
mod explain;
mod features;
mod hybrid;
mod library;
mod load;
mod locate;
mod plan;
mod resolve;
mod validate;

pub use load::{load, parse};
pub use locate::{SourceMap, apply_override};
pub use plan::unused_prices;
pub use resolve::{batch_defaults_on, resolve_group};

use std::fmt;

use crate::scenario::Problem;

/// A scenario that failed to load: every problem found, in source order.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct ScenarioError {
    /// The file as named by the user, plus "(after --set)" if overrides were applied (a
    /// sweep names the point instead, the Python package its overrides).
    pub file: String,
    pub problems: Vec<Problem>,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.problems.len();
        writeln!(
            f,
            "{}: {n} problem{}",
            self.file,
            if n == 1 { "" } else { "s" }
        )?;
        for p in &self.problems {
            write!(f, "  {}", self.file)?;
            if let Some((line, col)) = p.location {
                write!(f, ":{line}:{col}")?;
            }
            if p.path.is_empty() {
                writeln!(f, ": {}", p.message)?;
            } else {
                writeln!(f, ": {}: {}", p.path, p.message)?;
            }
            if let Some(h) = &p.hint {
                writeln!(f, "    hint: {h}")?;
            }
        }
        Ok(())
    }
}

/// Every file a run of `s` reads, by field path: the scenario's own
/// ([`Scenario::input_files`](crate::scenario::Scenario::input_files): itself, traces, tables,
/// length files) and its groups' model and GPU files. Sweeps and plans hash them (a resume or
/// a merge refuses results of edited inputs); a run refuses to write over one.
pub fn input_files(s: &crate::scenario::Scenario) -> Vec<(String, std::path::PathBuf)> {
    let mut files = s.input_files();
    for (i, g) in s.cluster.groups.iter().enumerate() {
        files.extend(library::library_files(g, i, &s.base_dir));
    }
    files
}
