//! What a party computes from its rows, one kind of query per file. A variant is a query (the
//! `oneof` in `proto/`), its statistic here, its accountant entry (`variants.rs`) and a
//! coordinator kernel.
//!
//! Each statistic splits into the two phases of the release path's contract (`release/`):
//! [`Statistic::bound`] sees public facts only and fixes the per-row bound, the sensitivity
//! and a cap on the result; [`Statistic::compute`] sees the rows and cannot fail.
use fedmcmc_common::data::Columns;
use fedmcmc_common::models::Model;
use fedmcmc_common::neighbours::Neighbours;
use rand_chacha::ChaCha20Rng;

use crate::error::PartyError;
use crate::ledger::RunTerms;
use crate::variants::{
    BARKER, FULL_PENALTY, HMC, INITIALISER, MINIBATCH_PENALTY, SUFFICIENT_STATISTICS, SUMMARIES,
};

pub mod gradient;
pub mod log_lik_ratio;
pub mod minibatch;
pub mod parallel;
pub mod sufficient;
pub mod summary;

pub use gradient::Gradient;
pub use log_lik_ratio::LogLikRatio;
pub use minibatch::{BarkerRatio, BatchRatio, MinibatchRatio};

/// What a query will compute, fixed from public inputs before any row is read.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bound {
    /// The bound b on each row's clipped term.
    pub row: f64,
    /// The L2 sensitivity of the statistic under the party's neighbour relation.
    pub sensitivity: f64,
    /// A bound on the magnitude of each entry of the statistic (n·b for a sum over n rows).
    pub statistic: f64,
    /// Whether `sensitivity` already covers rounding the statistic to its noise's grid (the
    /// clip was shrunk for it, so the noise is exactly s·Δ: DP Barker, whose total variance
    /// must be its share Cᵢ); otherwise the noise grows to cover it.
    pub rounding_covered: bool,
}

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
    /// T·Σ_x clip_{b_g}(∇ℓ(x|θ)) over all rows (DP HMC's leapfrog, the private initialiser).
    Gradient { theta: &'a [f64] },
    /// The sufficient statistics T·Σ_x s(x), `entries` of them (Yıldırım & Ermiş 2019,
    /// Alg. 3): the same at every step, noised afresh.
    SufficientStatistics { entries: usize },
    /// The quadratic summary (g, upper A weighted by `curvature_weight`) about `centre`
    /// with Chebyshev `window` (0: Taylor), `entries` of them (the summaries route).
    Summary {
        centre: &'a [f64],
        window: f64,
        curvature_weight: f64,
        entries: usize,
    },
}

/// The wire names of the queries.
const LOG_LIK_RATIO: &str = "log_lik_ratio";
const MINIBATCH_LOG_LIK_RATIO: &str = "minibatch_log_lik_ratio";
const BARKER_LOG_LIK_RATIO: &str = "barker_log_lik_ratio";
const GRADIENT: &str = "gradient";
const SUFFICIENT: &str = "sufficient_statistics";
const SUMMARY: &str = "summary";

impl<'a> Query<'a> {
    /// Entries in the released vector: one per parameter for a gradient, else one.
    pub fn released_len(&self) -> usize {
        match self {
            Query::Gradient { theta } => theta.len(),
            Query::SufficientStatistics { entries } | Query::Summary { entries, .. } => *entries,
            _ => 1,
        }
    }

    /// The parameter vectors the query is about: (θ, θ′) of a ratio, θ of a gradient.
    fn thetas(&self) -> (&'a [f64], &'a [f64]) {
        match *self {
            Query::Gradient { theta } => (theta, &[]),
            Query::Summary { centre, .. } => (centre, &[]),
            Query::SufficientStatistics { .. } => (&[], &[]),
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
        let terms = match self {
            Query::Summary {
                window,
                curvature_weight,
                ..
            } => vec![*window, *curvature_weight],
            _ => Vec::new(),
        };
        theta
            .iter()
            .chain(theta_proposed)
            .chain(&terms)
            .copied()
            .collect()
    }

    /// Whether the query's true value is the same for every dataset, public before any row
    /// is read: a log-likelihood ratio (full-data, minibatch or DP Barker) whose θ′ is θ bit
    /// for bit, where every row's ratio ℓ(x|θ) − ℓ(x|θ) is 0 and so is the statistic.
    /// [`PartyNode::step`](crate::PartyNode::step) answers it without reading a row and
    /// without a charge.
    pub fn is_public(&self) -> bool {
        match self {
            Query::LogLikRatio { .. }
            | Query::MinibatchLogLikRatio { .. }
            | Query::BarkerLogLikRatio { .. } => {
                let (theta, theta_proposed) = self.thetas();
                theta.len() == theta_proposed.len()
                    && theta
                        .iter()
                        .zip(theta_proposed)
                        .all(|(a, b)| a.to_bits() == b.to_bits())
            }
            Query::Gradient { .. } | Query::SufficientStatistics { .. } | Query::Summary { .. } => {
                false
            }
        }
    }

    /// The query's wire name, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Query::LogLikRatio { .. } => LOG_LIK_RATIO,
            Query::MinibatchLogLikRatio { .. } => MINIBATCH_LOG_LIK_RATIO,
            Query::BarkerLogLikRatio { .. } => BARKER_LOG_LIK_RATIO,
            Query::Gradient { .. } => GRADIENT,
            Query::SufficientStatistics { .. } => SUFFICIENT,
            Query::Summary { .. } => SUMMARY,
        }
    }

    /// The statistic that answers this query at `step` of a chain of a run with `terms`, and
    /// the noise multiplier of its release, after the public checks of the query's
    /// parameters and of its fit to the run's variant and the step. `summed` is the
    /// party's summed sufficient statistics, if its model has them.
    pub(crate) fn statistic(
        &self,
        model: &'a dyn Model,
        terms: &RunTerms,
        step: u64,
        summed: Option<&'a [f64]>,
    ) -> Result<(Box<dyn Statistic + Send + Sync + 'a>, f64), PartyError> {
        let expected = expected_query(terms, step)?;
        if self.name() != expected {
            return Err(PartyError::FailedPrecondition(format!(
                "step {step} of a {} run asks for a {expected} query, not {}",
                terms.variant,
                self.name(),
            )));
        }
        let (theta, theta_proposed) = self.thetas();
        match self {
            Query::SufficientStatistics { .. } => {}
            Query::Gradient { .. } => check_theta(model, "theta", theta)?,
            Query::Summary {
                window,
                curvature_weight,
                ..
            } => {
                check_theta(model, "centre", theta)?;
                summary::check_window(*window)?;
                summary::check_curvature_weight(*curvature_weight)?;
            }
            _ => {
                check_theta(model, "theta", theta)?;
                check_theta(model, "theta_proposed", theta_proposed)?;
            }
        }
        let batch = || {
            terms.batch_size.ok_or_else(|| {
                PartyError::FailedPrecondition(format!(
                    "the {} run has no batch size",
                    terms.variant
                ))
            })
        };
        let ratio_multiplier = terms.noise_multiplier;
        Ok(match self {
            Query::LogLikRatio { .. } => (
                Box::new(LogLikRatio {
                    theta,
                    theta_proposed,
                }),
                ratio_multiplier,
            ),
            Query::Gradient { .. } => {
                let (clip, multiplier) = terms.gradient_release().ok_or_else(|| {
                    PartyError::FailedPrecondition(format!(
                        "the {} run has no gradient terms",
                        terms.variant
                    ))
                })?;
                (Box::new(Gradient { theta, clip }), multiplier)
            }
            Query::SufficientStatistics { entries } => {
                let (Some(sums), Some(family)) = (summed, model.sufficient_statistics()) else {
                    return Err(PartyError::FailedPrecondition(format!(
                        "the {} model has no sufficient statistics",
                        model.name()
                    )));
                };
                check_entries("sufficient statistics", *entries, sums.len())?;
                (
                    Box::new(sufficient::Sufficient {
                        sums,
                        row_bound: family.row_bound(),
                    }),
                    ratio_multiplier,
                )
            }
            Query::Summary {
                centre,
                window,
                curvature_weight,
                entries,
            } => {
                let Some(summaries) = model.summaries() else {
                    return Err(PartyError::FailedPrecondition(format!(
                        "the {} model has no summaries (a GLM has them, and a gaussian or banana model with public bounds on its columns)",
                        model.name()
                    )));
                };
                check_entries("summary entries", *entries, summaries.entries())?;
                summary::check_weight_applies(model, summaries, *curvature_weight)?;
                (
                    Box::new(summary::Summary {
                        summaries,
                        centre,
                        window: *window,
                        curvature_weight: *curvature_weight,
                    }),
                    ratio_multiplier,
                )
            }
            Query::MinibatchLogLikRatio { .. } => (
                Box::new(MinibatchRatio(BatchRatio {
                    theta,
                    theta_proposed,
                    batch: batch()?,
                })),
                ratio_multiplier,
            ),
            Query::BarkerLogLikRatio { .. } => (
                Box::new(BarkerRatio {
                    ratio: BatchRatio {
                        theta,
                        theta_proposed,
                        batch: batch()?,
                    },
                    share: terms.barker_variance.ok_or_else(|| {
                        PartyError::FailedPrecondition(
                            "the barker run has no variance share".into(),
                        )
                    })?,
                }),
                ratio_multiplier,
            ),
        })
    }
}

/// The query a run of `terms` answers at `step` of a chain: its variant's one query, or for
/// DP HMC the fixed pattern of an iteration, L + 1 gradients then the ratio (Räisä 2020,
/// Alg. 4), so that a chain's releases are exactly those its run was charged for.
fn expected_query(terms: &RunTerms, step: u64) -> Result<&'static str, PartyError> {
    Ok(match terms.variant.as_str() {
        FULL_PENALTY => LOG_LIK_RATIO,
        MINIBATCH_PENALTY => MINIBATCH_LOG_LIK_RATIO,
        BARKER => BARKER_LOG_LIK_RATIO,
        INITIALISER => GRADIENT,
        SUFFICIENT_STATISTICS => SUFFICIENT,
        SUMMARIES => SUMMARY,
        HMC => {
            let per_iteration = terms.releases_per_iteration();
            if step % per_iteration == per_iteration - 1 {
                LOG_LIK_RATIO
            } else {
                GRADIENT
            }
        }
        other => {
            return Err(PartyError::FailedPrecondition(format!(
                "a run of the unknown variant {other:?} answers no query"
            )));
        }
    })
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

/// The bound of a sum over all rows of terms each within `row` (in L2 norm for a vector):
/// one row moves it by 2·row under substitution and by row under addition or removal, and
/// each entry is within n·row. The full-data ratio's and the gradient's.
fn clipped_sum_bound(public: &Public<'_>, row: f64) -> Bound {
    Bound {
        row,
        sensitivity: public.neighbours.clipped_sum_sensitivity(row),
        statistic: public.rows as f64 * row,
        rounding_covered: false,
    }
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

/// Refuses a query for `asked` entries of `what` where this party's model has `has`.
fn check_entries(what: &str, asked: usize, has: usize) -> Result<(), PartyError> {
    if asked == has {
        return Ok(());
    }
    Err(PartyError::InvalidArgument(format!(
        "the query asks for {asked} {what}; this party's model has {has}"
    )))
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
