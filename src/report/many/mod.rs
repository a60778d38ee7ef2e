//! `report` of a directory of many runs: a sweep (`sweep.csv`), a plan (`plan.csv`,
//! `pareto.csv`), a capacity search (`capacity.json`) or a policy search (`search.csv`). A sweep's page charts any metric
//! against any swept axis (one line per value of the other axes; bars when the axis is not
//! numeric), lists each run's configuration beside its results, and tabulates each run's
//! per-instance load; a plan's page draws its Pareto front and lists every configuration with
//! its verdict; a capacity page lists each limit with its interval over seeds; a policy
//! search's page draws its trials and their Pareto front.

mod plan;
mod search;
mod sweep;
mod table;

use std::path::Path;

use super::page::ReportError;

/// What kind of directory of many runs `dir` is, if it is one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Sweep,
    Plan,
    Capacity,
    Search,
}

impl Kind {
    pub fn of(dir: &Path) -> Option<Kind> {
        if dir.join("sweep.csv").is_file() {
            Some(Kind::Sweep)
        } else if dir.join("plan.csv").is_file() {
            Some(Kind::Plan)
        } else if dir.join("capacity.json").is_file() {
            Some(Kind::Capacity)
        } else if dir.join("search.csv").is_file() {
            Some(Kind::Search)
        } else {
            None
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Sweep => "sweep",
            Kind::Plan => "plan",
            Kind::Capacity => "capacity",
            Kind::Search => "search",
        }
    }
}

/// The page of the directory `dir` of kind `kind`.
pub fn report(dir: &Path, kind: Kind) -> Result<String, ReportError> {
    match kind {
        Kind::Sweep => sweep::page(dir),
        Kind::Plan => plan::plan_page(dir),
        Kind::Capacity => plan::capacity_page(dir),
        Kind::Search => search::page_of(dir),
    }
}
