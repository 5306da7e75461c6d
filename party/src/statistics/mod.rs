//! What a party computes from its rows, one kind of query per file. A variant is a query (the
//! `oneof` in `proto/`), its statistic here, its accountant entry (`node.rs`) and a
//! coordinator kernel.
//!
//! Each statistic splits into the two phases of the release path's contract (`release.rs`):
//! [`Statistic::bound`] sees public facts only and fixes the per-row bound, the sensitivity
//! and a cap on the result; [`Statistic::compute`] sees the rows and cannot fail.
use fedmcmc_common::data::Columns;
use fedmcmc_common::models::Model;
use fedmcmc_common::neighbours::Neighbours;
use rand_chacha::ChaCha20Rng;

use crate::error::PartyError;
use crate::ledger::RunTerms;
use crate::node::{BARKER, FULL_PENALTY, MINIBATCH_PENALTY};
use crate::release::Bound;

pub mod log_lik_ratio;
pub mod minibatch;

pub use log_lik_ratio::LogLikRatio;
pub use minibatch::{BarkerRatio, BatchRatio, MinibatchRatio};

/// One step's query, as the coordinator asks it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Query<'a> {
    /// Clipped Σ_x [ℓ(x|θ′) − ℓ(x|θ)] over all rows (the full-data DP penalty).
    LogLikRatio {
        theta: &'a [f64],
        theta_proposed: &'a [f64],
    },
    /// The same ratio estimated on a secret batch, less half its estimated variance (the
    /// minibatch DP penalty).
    MinibatchLogLikRatio {
        theta: &'a [f64],
        theta_proposed: &'a [f64],
    },
    /// The batch estimate with noise topping its variance up to the run's share of C (DP
    /// Barker).
    BarkerLogLikRatio {
        theta: &'a [f64],
        theta_proposed: &'a [f64],
    },
}

impl<'a> Query<'a> {
    /// Entries in the released vector.
    pub fn released_len(&self) -> usize {
        1
    }

    /// (θ, θ′) of a ratio query.
    fn thetas(&self) -> (&'a [f64], &'a [f64]) {
        match *self {
            Query::LogLikRatio {
                theta,
                theta_proposed,
            }
            | Query::MinibatchLogLikRatio {
                theta,
                theta_proposed,
            }
            | Query::BarkerLogLikRatio {
                theta,
                theta_proposed,
            } => (theta, theta_proposed),
        }
    }

    /// The numbers the query is about, as the ledger stores them: a retry of a step must
    /// repeat them bit for bit.
    pub fn inputs(&self) -> Vec<f64> {
        let (theta, theta_proposed) = self.thetas();
        theta.iter().chain(theta_proposed).copied().collect()
    }

    /// The query's wire name, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Query::LogLikRatio { .. } => "log_lik_ratio",
            Query::MinibatchLogLikRatio { .. } => "minibatch_log_lik_ratio",
            Query::BarkerLogLikRatio { .. } => "barker_log_lik_ratio",
        }
    }

    /// The one variant whose runs ask this query.
    pub fn variant(&self) -> &'static str {
        match self {
            Query::LogLikRatio { .. } => FULL_PENALTY,
            Query::MinibatchLogLikRatio { .. } => MINIBATCH_PENALTY,
            Query::BarkerLogLikRatio { .. } => BARKER,
        }
    }

    /// The statistic that answers this query in a run with `terms`, after the public checks
    /// of the query's parameters and of its fit to the run's variant.
    pub(crate) fn statistic(
        &self,
        model: &dyn Model,
        terms: &RunTerms,
    ) -> Result<Box<dyn Statistic + Send + Sync + 'a>, PartyError> {
        if terms.variant != self.variant() {
            return Err(PartyError::FailedPrecondition(format!(
                "this is a {} run; a {} query belongs to a {} run",
                terms.variant,
                self.name(),
                self.variant()
            )));
        }
        let (theta, theta_proposed) = self.thetas();
        check_theta(model, "theta", theta)?;
        check_theta(model, "theta_proposed", theta_proposed)?;
        let batch = || {
            terms.batch_size.ok_or_else(|| {
                PartyError::FailedPrecondition(format!(
                    "the {} run has no batch size",
                    terms.variant
                ))
            })
        };
        Ok(match self {
            Query::LogLikRatio { .. } => Box::new(LogLikRatio {
                theta,
                theta_proposed,
            }),
            Query::MinibatchLogLikRatio { .. } => Box::new(MinibatchRatio(BatchRatio {
                theta,
                theta_proposed,
                batch: batch()?,
            })),
            Query::BarkerLogLikRatio { .. } => Box::new(BarkerRatio {
                ratio: BatchRatio {
                    theta,
                    theta_proposed,
                    batch: batch()?,
                },
                share: terms.barker_variance.ok_or_else(|| {
                    PartyError::FailedPrecondition("the barker run has no variance share".into())
                })?,
            }),
        })
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

/// What [`Statistic::compute`] returns: the statistic, and the variance it already carries
/// as an estimate (DP Barker's batch variance σ²_b, which the release's noise tops up to the
/// run's σ²; 0 when the release adds all of σ²).
#[derive(Clone, Debug, PartialEq)]
pub struct Computed {
    pub value: Vec<f64>,
    pub inherent_variance: f64,
}

/// A statistic of the rows, split as the release path's contract requires.
pub trait Statistic {
    /// The bound, from public facts only: this method is given no rows.
    fn bound(&self, public: &Public<'_>) -> Bound;
    /// The clipped statistic: finite, each entry within `bound.statistic`, whatever the rows
    /// hold; a batch, if any, drawn from `rng` (the release's secret generator). It returns
    /// values, not a `Result`: nothing refuses once rows are read.
    fn compute(
        &self,
        model: &dyn Model,
        rows: &Columns,
        bound: &Bound,
        rng: &mut ChaCha20Rng,
    ) -> Computed;
}

/// Checks a parameter vector from a request: the model's dimension, every entry finite.
fn check_theta(model: &dyn Model, what: &str, theta: &[f64]) -> Result<(), PartyError> {
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
