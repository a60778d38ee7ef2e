//! Watching a run without changing it: `timeseries.csv` (sampled state), `timeline.json`
//! (a Chrome trace-event file for Perfetto) and progress for the command line. Nothing here
//! feeds back into the simulation; results are byte-identical with every observer on or off.

mod plugin;
pub mod timeline;
pub mod timeseries;

pub use plugin::{ObservePlugin, ObserveSystems};
