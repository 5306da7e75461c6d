//! A party program with its own model written in Rust, for what a `[model]` table cannot
//! express. It is the `party` command line (`serve`, `status`) with the model given in code:
//!
//! ```sh
//! cargo build --release -p fedmcmc-party --example custom_model
//! target/release/examples/custom_model serve --config party.toml   # no [model] table
//! ```
//!
//! Everything else (data source, ledger, budget, TLS, the release path) is the `party`
//! binary's own code. The coordinator samples the same model through
//! `fedmcmc_coordinator::remote::run_with` (see `tests/tests/custom_model.rs`).
use std::sync::Arc;

mod model;

fn main() -> std::process::ExitCode {
    fedmcmc_party::cli::main(|config| {
        if config.model.is_some() {
            anyhow::bail!(
                "this party serves the student-t-regression model written in Rust: remove the [model] table from its config"
            );
        }
        Ok(Arc::new(model::StudentTRegression))
    })
}
