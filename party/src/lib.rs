//! A party node: the data holder's side of the federation.
//!
//! - `config`: `party.toml`.
//! - `store`: loading and validating the private rows (SQLite or CSV).
//! - `ledger`: the durable record of every reservation and release.
//! - `budget`: admission of a run's plan against the party's (ε, δ).
//! - `node`: the run lifecycle; `release`: the one path by which anything leaves.
//! - `service`: the gRPC mapping and authentication.
use std::sync::Arc;

pub mod budget;
pub mod config;
pub mod error;
pub mod ledger;
pub mod node;
pub mod release;
pub mod service;
pub mod store;

pub use node::PartyNode;

/// Everything a configured party needs to serve: the node and its bearer token.
pub struct Opened {
    pub node: Arc<PartyNode>,
    pub token: String,
}

/// Loads rows, model, budget and ledger from a validated config.
pub fn open(config: &config::PartyConfig) -> anyhow::Result<Opened> {
    let model = config.model.build()?;
    let token = config.read_token()?;
    let data = store::load(&config.data, model.row_dim())?;
    let budget = budget::Budget::new(config.budget)?;
    let ledger = ledger::Ledger::open(&config.ledger)?;
    let node = PartyNode::new(
        config.name.clone(),
        model,
        data,
        config.neighbours,
        budget,
        ledger,
    )?;
    Ok(Opened {
        node: Arc::new(node),
        token,
    })
}
