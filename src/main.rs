//! The `servesim` binary: the standard command line ([`servesim::cli`]) with the built-in
//! plugins. A program of your own adds its plugins to the [`servesim::ServesimApp`] it hands
//! over (`examples/custom_cli.rs`).

fn main() -> std::process::ExitCode {
    servesim::cli::main(servesim::ServesimApp::new())
}
