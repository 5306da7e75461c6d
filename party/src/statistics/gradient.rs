//! The clipped gradient: T·Σ_x clip_{b_g}(∇ℓ(x|θ)) over all rows, each row's untempered
//! gradient scaled to L2 norm at most b_g (Räisä 2020, Sec. 4.2 and Alg. 4). DP HMC releases
//! it L + 1 times per iteration; the private initialiser's ascent steps release it once each.
use fedmcmc_common::data::Columns;
use fedmcmc_common::models::Model;
use rand_chacha::ChaCha20Rng;

use super::Bound;
use super::{Computed, Public, Statistic, clipped_sum_bound, parallel};

/// A gradient query whose θ passed the public checks; `clip` is the run's b_g.
pub struct Gradient<'a> {
    pub(super) theta: &'a [f64],
    pub(super) clip: f64,
}

impl Statistic for Gradient<'_> {
    /// Each row's tempered gradient lies in the ball of radius T·b_g (the clip bounds the
    /// untempered gradient, as the ratio's clip does), so one row moves the sum by at most
    /// 2·T·b_g in L2 norm under substitution and T·b_g under addition or removal (Räisä 2020,
    /// Thm 4.2). Each entry of the sum is within n·T·b_g. Where the model bounds every
    /// admitted row's gradient norm ([`Model::gradient_bound`]), b_g is the smaller of that
    /// and the run's, as for the ratio.
    fn bound(&self, public: &Public<'_>) -> Bound {
        let model = public.model.gradient_bound(self.theta);
        let clip = model.map_or(self.clip, |m| self.clip.min(m));
        clipped_sum_bound(public, public.model.temperature() * clip)
    }

    fn compute(
        &self,
        model: &dyn Model,
        rows: &Columns,
        bound: &Bound,
        _: &mut ChaCha20Rng,
    ) -> Computed {
        let value = parallel::split_sum(
            rows,
            parallel::threads_for(rows.n()),
            |part| {
                let mut value = vec![0.0; model.dim()];
                model.clipped_grad_sum(part, self.theta, bound.row, &mut value);
                value
            },
            |mut a, b| {
                a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
                a
            },
        );
        Computed {
            value,
            inherent_variance: 0.0,
        }
    }
}
