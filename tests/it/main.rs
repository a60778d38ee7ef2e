//! Integration tests: real scenarios end to end, with every invariant checked every tick.

mod cli;
mod control;
mod common;
mod golden;
mod hand;
mod latency;
mod scenarios;
mod workload;
