//! The subsampled log-likelihood ratio of the minibatch variants: each release draws its own
//! batch B of b rows without replacement from the party's n, with the release's secret
//! generator (the amplification by subsampling that their accounting counts on needs the
//! batch kept secret), and estimates the full-data ratio by
//!
//!   λ* = (n/b)·Σ_{x∈B} t_x,   σ²_b = (n/b)²·Σ_{x∈B} (t_x − t̄)²,
//!
//! t_x = T·clip(r_x) the tempered clipped per-row terms (Räisä 2020, Sec. 3.4). Two variants
//! release it differently:
//!
//! * minibatch DP penalty ([`MinibatchRatio`]): λ* − ½σ²_b plus Gaussian noise, the
//!   sensitivity Δλ + ½Δσ²_b of Lemma 3.4 (Thm 3.5); the coordinator's penalty test then
//!   subtracts ½Σσᵢ² for the added noise as in the full-data test;
//! * DP Barker ([`BarkerRatio`]): λ* plus noise N(0, Cᵢ − σ²_b), topping the batch's own
//!   variance up to the party's share Cᵢ of the total C (Heikkilä et al. 2019; Räisä 2020,
//!   Alg. 3). Its clip is fixed by Thm 3.3 instead of chosen (below).
use fedmcmc_common::data::Columns;
use fedmcmc_common::mechanism::grid_step;
use fedmcmc_common::models::Model;
use rand_chacha::ChaCha20Rng;

use super::Bound;
use super::log_lik_ratio::tempered_row_bound;
use super::{Computed, Public, Statistic};

/// A ratio query on a batch of `batch` rows, after the public checks.
pub struct BatchRatio<'a> {
    pub(super) theta: &'a [f64],
    pub(super) theta_proposed: &'a [f64],
    pub(super) batch: u64,
}

/// The minibatch DP penalty's query.
pub struct MinibatchRatio<'a>(pub(super) BatchRatio<'a>);

/// DP Barker's query; `share` is this party's Cᵢ.
pub struct BarkerRatio<'a> {
    pub(super) ratio: BatchRatio<'a>,
    pub(super) share: f64,
}

impl BatchRatio<'_> {
    /// λ* and σ²_b of a fresh secret batch, its terms clipped to `row`.
    fn estimate(
        &self,
        model: &dyn Model,
        rows: &Columns,
        row: f64,
        rng: &mut ChaCha20Rng,
    ) -> (f64, f64) {
        let (n, b) = (rows.n(), self.batch as usize);
        // A batch of every row is every row, whatever the draw: the sums below do not depend
        // on the rows' order, so it is read in place (DP Barker's default batch grows to all
        // of them at a generous budget, where drawing and copying it cost more than the ratio).
        let drawn;
        let batch_rows = if b == n {
            rows
        } else {
            let picked = rand::seq::index::sample(rng, n, b).into_vec();
            drawn = rows.select(&picked);
            &drawn
        };
        let mut terms = vec![0.0; b];
        model.clipped_llr_terms(batch_rows, self.theta, self.theta_proposed, row, &mut terms);
        let scale = n as f64 / b as f64;
        let sum: f64 = terms.iter().sum();
        let mean = sum / b as f64;
        let spread: f64 = terms.iter().map(|t| (t - mean) * (t - mean)).sum();
        (scale * sum, scale * scale * spread)
    }
}

impl Statistic for MinibatchRatio<'_> {
    /// Substitute neighbours (the only relation the party serves this variant under): with
    /// per-row bound t = T·clip·‖θ′ − θ‖ and a = n/b, Δλ = 2at and ½Δσ²_b ≤ 3(b − 1)a²t²/b
    /// (Räisä 2020, Lemma 3.4: 3(b−1)n²T²L²‖θ′−θ‖²/b³); their sum bounds the sensitivity of
    /// λ* − ½σ²_b (Thm 3.5). The value is within n·t + ½·a·n·t² (σ²_b ≤ a²·b·t²).
    fn bound(&self, public: &Public<'_>) -> Bound {
        let ratio = &self.0;
        let row = tempered_row_bound(public, ratio.theta, ratio.theta_proposed);
        let (n, b) = (public.rows as f64, ratio.batch as f64);
        let a = n / b;
        let lambda = 2.0 * a * row;
        let half_variance = 3.0 * (b - 1.0) * a * a * row * row / b;
        Bound {
            row,
            sensitivity: lambda + half_variance,
            statistic: n * row + 0.5 * a * n * row * row,
            rounding_covered: false,
        }
    }

    fn compute(
        &self,
        model: &dyn Model,
        rows: &Columns,
        bound: &Bound,
        rng: &mut ChaCha20Rng,
    ) -> Computed {
        let (lambda, variance) = self.0.estimate(model, rows, bound.row, rng);
        Computed {
            value: vec![lambda - 0.5 * variance],
            inherent_variance: 0.0,
        }
    }
}

/// The noise multiplier of a DP Barker release with batch b: its total noise std √Cᵢ over its
/// sensitivity √(2Cᵢ/b) (see [`BarkerRatio::bound`]).
pub fn barker_noise_multiplier(batch: u64) -> f64 {
    (batch as f64 / 2.0).sqrt()
}

/// The [`Bound`] of every DP Barker release of a run with share Cᵢ and batch b over n rows
/// (see [`BarkerRatio::bound`]): it depends on no θ, so OpenRun checks it once for all the
/// run's steps.
///
/// The release rounds λ* to the public grid γ of its noise √Cᵢ (`fedmcmc_common::mechanism`),
/// which moves it by up to γ/2: the clip is shrunk by γ/(2a) so that the rounded value's
/// sensitivity 2at + γ is still √(2Cᵢ/b) and the noise stays exactly Cᵢ.
pub fn barker_bound(rows: usize, batch: u64, share: f64) -> Bound {
    let (n, b) = (rows as f64, batch as f64);
    let a = n / b;
    let sensitivity = (2.0 * share / b).sqrt();
    // The grid the release path takes, from the same product s·Δ (`Calibration::check`).
    let grid = grid_step(barker_noise_multiplier(batch) * sensitivity).unwrap_or(0.0);
    let row = ((sensitivity - grid) / (2.0 * a)).max(0.0);
    Bound {
        row,
        sensitivity,
        statistic: n * row,
        rounding_covered: true,
    }
}

impl Statistic for BarkerRatio<'_> {
    /// Räisä 2020, Thm 3.3 holds for total noise variance 2 and tempered per-row ratios within
    /// √b/n, i.e. each row moves λ* by at most 1/√b. Scaling both, a party with share Cᵢ
    /// clips each tempered term to t = √(Cᵢ/(2b))/a (a = n/b), so each row moves λ* by at
    /// most √(Cᵢ/2)/√b: the theorem's bound holds for its releases at its q = b/n whatever
    /// the share. The clip is fixed, not chosen; with shares and batches proportional to
    /// the parties' rows it is the pooled √(C/2)·√b/n₀ on the untempered ratio (n₀ = nT).
    ///
    /// It also keeps the top-up possible: σ²_b ≤ a²·Σ t_x² ≤ a²·b·t² = Cᵢ/2, so the added
    /// noise Cᵢ − σ²_b never has to be negative (the papers assume C > σ²_b; here it holds by
    /// construction). The noise std √Cᵢ over the sensitivity 2at = √(2Cᵢ/b) gives the
    /// multiplier √(b/2).
    fn bound(&self, public: &Public<'_>) -> Bound {
        barker_bound(public.rows, self.ratio.batch, self.share)
    }

    fn compute(
        &self,
        model: &dyn Model,
        rows: &Columns,
        bound: &Bound,
        rng: &mut ChaCha20Rng,
    ) -> Computed {
        let (lambda, variance) = self.ratio.estimate(model, rows, bound.row, rng);
        Computed {
            value: vec![lambda],
            inherent_variance: variance,
        }
    }
}

#[cfg(test)]
mod tests {
    use fedmcmc_common::models::ModelSpec;
    use rand::SeedableRng;

    use super::*;

    /// A batch of every row reads them in place; its λ* and σ²_b are the full data's clipped
    /// sum and spread, whatever the generator.
    #[test]
    fn a_batch_of_every_row_is_the_full_data() {
        let model = ModelSpec::gaussian(vec![vec![1.0]], 10.0).build().unwrap();
        let values: Vec<f64> = (0..50).map(|i| f64::from(i) / 10.0 - 2.5).collect();
        let rows = Columns::from_column_major(50, 1, values.clone()).unwrap();
        let (theta, proposed) = ([0.1], [0.4]);
        let ratio = BatchRatio {
            theta: &theta,
            theta_proposed: &proposed,
            batch: 50,
        };
        let row = 0.5;
        let terms: Vec<f64> = values
            .iter()
            .map(|x| {
                let r = 0.5 * ((x - theta[0]).powi(2) - (x - proposed[0]).powi(2));
                r.clamp(-row, row)
            })
            .collect();
        assert!(
            terms.iter().any(|t| t.abs() == row),
            "some rows are clipped"
        );
        let sum: f64 = terms.iter().sum();
        let mean = sum / 50.0;
        let spread: f64 = terms.iter().map(|t| (t - mean).powi(2)).sum();
        for seed in [1, 2] {
            let mut rng = ChaCha20Rng::seed_from_u64(seed);
            let (lambda, variance) = ratio.estimate(model.as_ref(), &rows, row, &mut rng);
            assert!((lambda - sum).abs() < 1e-12, "{lambda} vs {sum}");
            assert!((variance - spread).abs() < 1e-12, "{variance} vs {spread}");
        }
    }
}
