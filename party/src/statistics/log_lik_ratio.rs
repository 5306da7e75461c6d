//! The full-data log-likelihood ratio: Σ_x clip(r_x, b) with r_x = ℓ(x|θ′) − ℓ(x|θ), each
//! party's term of the federated DP penalty (Yıldırım & Ermiş 2019, Alg. 2; its cost is
//! Räisä 2020, Thm 3.2).
use fedmcmc_common::clip::{self, ClippedSum};
use fedmcmc_common::data::Columns;
use fedmcmc_common::models::Model;
use rand_chacha::ChaCha20Rng;

use super::Bound;
use super::{Computed, Public, Statistic, clipped_sum_bound, parallel};

/// A ratio query whose θ and θ′ passed the public checks.
pub struct LogLikRatio<'a> {
    pub(super) theta: &'a [f64],
    pub(super) theta_proposed: &'a [f64],
}

/// The per-row bound on the tempered term: the clip bounds the untempered ratio, as the
/// thesis does (Räisä 2020, Lemma 3.4), so its published clip values transfer:
/// T·clip(r_x, b) = clip(T·r_x, T·b). Where the model bounds every admitted row's ratio
/// from public facts ([`Model::ratio_bound`]: a GLM over bounded columns), b is the smaller
/// of that and clip·‖θ′ − θ‖: a clip at the model's bound never binds, and the noise, a
/// fixed multiple of the sensitivity, shrinks with it at the same privacy cost.
pub(super) fn tempered_row_bound(
    public: &Public<'_>,
    theta: &[f64],
    theta_proposed: &[f64],
) -> f64 {
    let run = clip::row_bound(public.clip, theta, theta_proposed);
    let model = public.model.ratio_bound(theta, theta_proposed);
    // `f64::min` keeps the run's bound should the model's be NaN.
    public.model.temperature() * model.map_or(run, |m| run.min(m))
}

impl Statistic for LogLikRatio<'_> {
    /// Per-row Lipschitz clip (Räisä 2020, Sec. 3.1) on the untempered ratio: the release
    /// T·Σ clip(r_x, b) has sensitivity T times the untempered one.
    fn bound(&self, public: &Public<'_>) -> Bound {
        clipped_sum_bound(
            public,
            tempered_row_bound(public, self.theta, self.theta_proposed),
        )
    }

    fn compute(
        &self,
        model: &dyn Model,
        rows: &Columns,
        bound: &Bound,
        _: &mut ChaCha20Rng,
    ) -> Computed {
        let sum = parallel::split_sum(
            rows,
            parallel::threads_for(rows.n()),
            |part| model.clipped_llr_sum(part, self.theta, self.theta_proposed, bound.row),
            |a, b| ClippedSum {
                sum: a.sum + b.sum,
                clipped: a.clipped + b.clipped,
            },
        );
        Computed {
            value: vec![sum.sum],
            inherent_variance: 0.0,
        }
    }
}
