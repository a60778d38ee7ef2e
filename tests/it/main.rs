//! Integration tests: real scenarios end to end, with every invariant checked every tick.

mod architecture;
mod autoscale;
mod calibrate;
mod cli;
mod common;
mod conformance;
mod control;
mod disagg;
mod energy;
mod extending;
mod families;
mod fidelity;
mod golden;
mod hand;
mod kv_events;
mod latency;
mod lockstep;
mod observe;
mod outputs;
mod properties;
mod reliability;
mod scenarios;
mod schedulers;
mod setup;
mod ticks;
mod workload;
