//! The sufficient statistics of an exponential-family model, S = T·Σ_x s(x) over all rows
//! (Yıldırım & Ermiş 2019, Alg. 3): summed once when the party starts (they do not depend on
//! θ), released with fresh noise at every step, so a step costs the same whatever the rows.
use fedmcmc_common::data::Columns;
use fedmcmc_common::models::Model;
use rand_chacha::ChaCha20Rng;

use super::Bound;
use super::{Computed, Public, Statistic, clipped_sum_bound};

/// The party's summed statistics and the model's public bound on each row's ‖T·s(x)‖.
pub struct Sufficient<'a> {
    pub(super) sums: &'a [f64],
    pub(super) row_bound: f64,
}

impl Statistic for Sufficient<'_> {
    /// Each row's T·s(x) lies in the ball of radius R that the model's public column bounds
    /// give (rows outside them were refused at load), so one row moves S by at most 2R in L2
    /// norm under substitution and R under addition or removal; each entry is within n·R.
    fn bound(&self, public: &Public<'_>) -> Bound {
        clipped_sum_bound(public, self.row_bound)
    }

    fn compute(&self, _: &dyn Model, _: &Columns, _: &Bound, _: &mut ChaCha20Rng) -> Computed {
        Computed {
            value: self.sums.to_vec(),
            inherent_variance: 0.0,
        }
    }
}
