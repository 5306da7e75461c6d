//! `party serve --config party.toml`: run a party node beside its private rows, serving the
//! built-in model its `[model]` table names. `party status --config party.toml`: its budget
//! and runs, from the ledger, without serving. The command line is `fedmcmc_party::cli`,
//! which a program with its own model in Rust shares.
fn main() -> std::process::ExitCode {
    fedmcmc_party::cli::main(fedmcmc_party::configured_model)
}
