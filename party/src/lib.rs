//! A party node: the data holder's side of the federation.
//!
//! - `config`: `party.toml`.
//! - `store`: loading and validating the private rows (SQLite or CSV).
//! - `ledger`: the durable record of every reservation and release.
//! - `budget`: the accountant's view of the party's (ε, δ): admission of a run's plan;
//!   `fold`: closed runs' releases folded into a bounded number of groups for it.
//! - `node`: the run lifecycle (`plan`: a run plan's public checks; `runs`: the runs it
//!   holds; `noise`: its generator);
//!   `variants`: the variants it serves and the mechanism each release is; `release`: the
//!   one path by which anything leaves; `statistics`: what each kind of query computes from
//!   the rows.
//! - `service`: the gRPC mapping and authentication.
//! - `secure`: secure aggregation's cryptography (signed session keys, pairwise masks);
//!   `aggregation`: a secure run's session on the node, and each release's share of noise.
//! - `cli`: the `party` command line, for the built-in models or a model written in Rust.
use std::sync::Arc;

use fedmcmc_common::models::Model;

pub mod aggregation;
pub mod auth;
pub mod budget;
pub mod cli;
pub mod config;
pub mod error;
mod fold;
pub mod ledger;
pub mod metrics;
pub mod node;
mod noise;
pub mod release;
mod runs;
pub mod secure;
pub mod service;
pub mod statistics;
pub mod store;
mod throttle;
pub mod tls;
pub mod variants;

pub use node::PartyNode;

/// Runs `work` that blocks (an fsync) so that, on a
/// multi-threaded runtime, this worker's other tasks move to another thread meanwhile. The
/// hand-off costs a thread wake-up, so callers use it only around work that is slow.
pub(crate) fn blocking<T>(work: impl FnOnce() -> T) -> T {
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi_thread {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}

/// Runs accountant work (a PLD composition or calibration may take seconds) on tokio's
/// blocking pool and waits for it, so that the async workers go on answering steps
/// meanwhile. The work runs to its end even if the waiting caller goes away.
pub(crate) async fn accounting<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(work).await {
        Ok(value) => value,
        // A blocking task not yet started is cancelled only when the runtime shuts down,
        // which drops this task too: wait for that rather than panic on the way out.
        Err(e) if e.is_cancelled() => std::future::pending().await,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// Everything a configured party needs to serve: the node and its bearer token.
pub struct Opened {
    pub node: Arc<PartyNode>,
    pub token: String,
}

/// The built-in model a config's `[model]` table names: what the `party` binary serves.
pub fn configured_model(config: &config::PartyConfig) -> anyhow::Result<Arc<dyn Model>> {
    match &config.model {
        Some(spec) => Ok(spec.build()?),
        None => anyhow::bail!(
            "party {}: the config has no [model] table (a model written in Rust is served by its own program, see `fedmcmc_party::cli`)",
            config.name
        ),
    }
}

/// [`open_with`] the model of the config's `[model]` table.
pub fn open(config: &config::PartyConfig) -> anyhow::Result<Opened> {
    open_with(config, configured_model(config)?)
}

/// Loads rows, budget and ledger from a validated config, to serve `model` over them. The
/// ledger is taken first, so that a second party on it stops at once, before loading any
/// rows.
pub fn open_with(config: &config::PartyConfig, model: Arc<dyn Model>) -> anyhow::Result<Opened> {
    let token = config.read_token()?;
    let ledger = ledger::Ledger::open(&config.ledger)?;
    let budget = budget::Budget::new(config.budget)?;
    let data = store::load(&config.data, &model.columns())?;
    let mut node = PartyNode::new(
        config.name.clone(),
        model,
        data,
        config.neighbours,
        budget,
        ledger,
    )?
    .with_limits(config.limits);
    // Its TLS identity signs its secure-aggregation keys; a plaintext party cannot join.
    if let Some(tls) = &config.tls {
        node = node.with_identity(aggregation::Identity::load(tls)?);
    }
    Ok(Opened {
        node: Arc::new(node),
        token,
    })
}

/// What `party status` prints: the budget, the ε committed to closed runs alone and with the
/// open runs' reservations, and each open run's terms and progress. Read from a snapshot of
/// the ledger (see [`ledger::Ledger::snapshot`]) through the same accounting a serving node
/// uses, so the figures are those `Describe` would give; the rows are not read.
pub fn status(config: &config::PartyConfig, model: Arc<dyn Model>) -> anyhow::Result<String> {
    let budget = budget::Budget::new(config.budget)?;
    let (ledger, open) = ledger::Ledger::snapshot(&config.ledger)?;
    let closed = ledger.closed_runs()?.runs.len();
    let node = PartyNode::new(
        config.name.clone(),
        Arc::clone(&model),
        fedmcmc_common::data::Columns::from_column_major(0, model.row_dim(), Vec::new())?,
        config.neighbours,
        budget,
        (ledger, open.clone()),
    )?;
    let all = node.describe();
    let spent = node.epsilon_closed();
    let mut out = format!(
        "party {} (ledger {})\nbudget: ε = {}, δ = {:.3e}\ncommitted: ε = {:.4} with the open runs' reservations; ε = {:.4} by closed runs alone\nruns: {closed} closed, {} open\n",
        config.name,
        config.ledger.display(),
        all.epsilon,
        all.delta,
        all.epsilon_committed,
        spent,
        open.len()
    );
    for r in &open {
        let t = &r.terms;
        out += &format!(
            "open run {}: {}, {} chains × {} steps, τ = {}, clip {}, released {} of {}\n",
            r.run_id,
            t.variant,
            t.chains,
            t.steps_per_chain,
            t.tau,
            t.clip,
            r.released,
            t.planned_releases
        );
    }
    Ok(out)
}
