//! What a party computes from its rows, one kind of query per file. A variant is a query (the
//! `oneof` in `proto/`), its statistic here, its accountant entry and a coordinator kernel.
//!
//! Each statistic splits into the two phases of the release path's contract (`release.rs`):
//! [`Statistic::bound`] sees public facts only and fixes the per-row bound, the sensitivity
//! and a cap on the result; [`Statistic::compute`] sees the rows and cannot fail.
use fedmcmc_common::data::Columns;
use fedmcmc_common::models::Model;
use fedmcmc_common::neighbours::Neighbours;

use crate::error::PartyError;
use crate::release::Bound;

pub mod log_lik_ratio;

pub use log_lik_ratio::LogLikRatio;

/// One step's query, as the coordinator asks it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Query<'a> {
    /// Clipped Σ_x [ℓ(x|θ′) − ℓ(x|θ)] over all rows (the full-data DP penalty).
    LogLikRatio {
        theta: &'a [f64],
        theta_proposed: &'a [f64],
    },
}

impl Query<'_> {
    /// Entries in the released vector.
    pub fn released_len(&self) -> usize {
        match self {
            Query::LogLikRatio { .. } => 1,
        }
    }

    /// The numbers the query is about, as the ledger stores them: a retry of a step must
    /// repeat them bit for bit.
    pub fn inputs(&self) -> Vec<f64> {
        match self {
            Query::LogLikRatio {
                theta,
                theta_proposed,
            } => theta.iter().chain(*theta_proposed).copied().collect(),
        }
    }
}

/// The public facts a statistic's bound may use.
#[derive(Clone, Copy)]
pub struct Public<'a> {
    pub model: &'a dyn Model,
    /// The public row count n.
    pub rows: usize,
    pub neighbours: Neighbours,
    /// The run's per-row clip coefficient.
    pub clip: f64,
}

/// A statistic of the rows, split as the release path's contract requires.
pub trait Statistic {
    /// The bound, from public facts only: this method is given no rows.
    fn bound(&self, public: &Public<'_>) -> Bound;
    /// The clipped statistic: finite, each entry within `bound.statistic`, whatever the rows
    /// hold. It returns values, not a `Result`: nothing refuses once rows are read.
    fn compute(&self, model: &dyn Model, rows: &Columns, bound: &Bound) -> Vec<f64>;
}

/// Checks a parameter vector from a request: the model's dimension, every entry finite.
pub(crate) fn check_theta(model: &dyn Model, what: &str, theta: &[f64]) -> Result<(), PartyError> {
    let d = model.dim();
    if theta.len() != d {
        return Err(PartyError::InvalidArgument(format!(
            "{what} has {} entries; this party's model has dimension {d}",
            theta.len()
        )));
    }
    if let Some((i, v)) = theta.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(PartyError::InvalidArgument(format!(
            "{what}[{i}] is {v}; every entry must be finite"
        )));
    }
    Ok(())
}
