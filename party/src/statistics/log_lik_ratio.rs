//! The full-data log-likelihood ratio: Σ_x clip(r_x, b) with r_x = ℓ(x|θ′) − ℓ(x|θ), each
//! party's term of the federated DP penalty (Yıldırım & Ermiş 2019, Alg. 2; its cost is
//! Räisä 2020, Thm 3.2).
use fedmcmc_common::clip;
use fedmcmc_common::data::Columns;
use fedmcmc_common::models::Model;

use super::{Public, Statistic, check_theta};
use crate::error::PartyError;
use crate::release::Bound;

/// A ratio query whose θ and θ′ passed the public checks.
pub struct LogLikRatio<'a> {
    theta: &'a [f64],
    theta_proposed: &'a [f64],
}

impl<'a> LogLikRatio<'a> {
    pub fn new(
        model: &dyn Model,
        theta: &'a [f64],
        theta_proposed: &'a [f64],
    ) -> Result<Self, PartyError> {
        check_theta(model, "theta", theta)?;
        check_theta(model, "theta_proposed", theta_proposed)?;
        Ok(LogLikRatio {
            theta,
            theta_proposed,
        })
    }
}

impl Statistic for LogLikRatio<'_> {
    /// Per-row Lipschitz clip (Räisä 2020, Sec. 3.1) on the untempered ratio, as the thesis
    /// does (Lemma 3.4), so its published clip values transfer: the release is
    /// T·Σ clip(r_x, b) = Σ clip(T·r_x, T·b), with sensitivity T times the untempered one.
    fn bound(&self, public: &Public<'_>) -> Bound {
        let row = public.model.temperature()
            * clip::row_bound(public.clip, self.theta, self.theta_proposed);
        Bound {
            row,
            sensitivity: public.neighbours.clipped_sum_sensitivity(row),
            statistic: public.rows as f64 * row,
        }
    }

    fn compute(&self, model: &dyn Model, rows: &Columns, bound: &Bound) -> Vec<f64> {
        let sum = model.clipped_llr_sum(rows, self.theta, self.theta_proposed, bound.row);
        vec![sum.sum]
    }
}
