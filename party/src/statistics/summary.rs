//! The summaries route's release (`fedmcmc_common::models::summaries`): for a GLM, about a
//! public centre, each row's log-likelihood as a quadratic in its linear predictor, summed;
//! for a Gaussian-likelihood model, the rows' sum about their public box's centre. The
//! model bounds each row's contribution from its public column bounds (and the centre and
//! the window) and clips each row to that bound, so the release has a sensitivity fixed
//! before any row is read.
use fedmcmc_common::data::Columns;
use fedmcmc_common::models::summaries::{MAX_CURVATURE_WEIGHT, Reading};
use fedmcmc_common::models::{Model, Summaries};
use rand_chacha::ChaCha20Rng;

use super::Bound;
use super::{Computed, Public, Statistic, clipped_sum_bound};
use crate::error::PartyError;

/// The widest Chebyshev window a query may ask for, in linear-predictor units: far beyond
/// any useful one (the route's default is 2), and small enough that the projection's
/// arithmetic stays finite.
pub const MAX_WINDOW: f64 = 100.0;

/// Refuses a window that is not a finite number in [0, [`MAX_WINDOW`]].
pub(super) fn check_window(window: f64) -> Result<(), PartyError> {
    check_within("window", window, [0.0, MAX_WINDOW])
}

/// Refuses a curvature weight that is not a finite number in [1, `MAX_CURVATURE_WEIGHT`]
/// (a weight below 1 would only coarsen Â; 0, a query that never set it, is refused too).
pub(super) fn check_curvature_weight(weight: f64) -> Result<(), PartyError> {
    check_within("curvature weight", weight, [1.0, MAX_CURVATURE_WEIGHT])
}

/// Refuses a curvature weight other than 1 for summaries that have no curvature block (a
/// bounded gaussian or banana model's sum of rows): the weight would change nothing in the
/// release, and a query that asks for it has mistaken the model, so it is told rather than
/// answered as if it had asked for 1. Public: the model and the query decide it.
pub(super) fn check_weight_applies(
    model: &dyn Model,
    summaries: &dyn Summaries,
    weight: f64,
) -> Result<(), PartyError> {
    match summaries.reading() {
        Reading::Mean(_) if weight != 1.0 => Err(PartyError::InvalidArgument(format!(
            "curvature weight is {weight}, but the {} model's summaries are a sum of rows with no curvature block: ask for weight 1",
            model.name()
        ))),
        _ => Ok(()),
    }
}

fn check_within(what: &str, value: f64, [lo, hi]: [f64; 2]) -> Result<(), PartyError> {
    if (lo..=hi).contains(&value) {
        Ok(())
    } else {
        Err(PartyError::InvalidArgument(format!(
            "{what} is {value}; it must be a number from {lo} to {hi}"
        )))
    }
}

pub struct Summary<'a> {
    pub(super) summaries: &'a dyn Summaries,
    pub(super) centre: &'a [f64],
    pub(super) window: f64,
    pub(super) curvature_weight: f64,
}

impl Statistic for Summary<'_> {
    /// Each row's part (a GLM's (βx̃, upper γx̃x̃ᵀ)) lies within the model's public row bound, so one row
    /// moves the sum by at most twice that under substitution and once under addition or
    /// removal.
    fn bound(&self, public: &Public<'_>) -> Bound {
        let weight = self.curvature_weight;
        clipped_sum_bound(
            public,
            self.summaries.row_bound(self.centre, self.window, weight),
        )
    }

    fn compute(&self, _: &dyn Model, rows: &Columns, _: &Bound, _: &mut ChaCha20Rng) -> Computed {
        Computed {
            value: (self.summaries).summary(rows, self.centre, self.window, self.curvature_weight),
            inherent_variance: 0.0,
        }
    }
}
