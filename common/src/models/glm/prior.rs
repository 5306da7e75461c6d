//! The weakly informative prior of a logistic GLM, from its public bounds alone: the
//! presets' prior, and the scale the `summaries` route compares a posterior's reach with.
//!
//! Gelman, Jakulin, Pittau & Su (2008, Sec. 2.2) scale each input to sd 0.5 and put a
//! Cauchy(0, 2.5) prior on its coefficient and Cauchy(0, 10) on the intercept; the models
//! here have normal priors, so the same scales enter as normal sds. The covariates are
//! private, so a feature's sd is its public box's, (hi − lo)/√12 as if uniform over it, and a
//! slope's sd is 2.5 per two of those sds. The intercept is at x = 0, not at the box's
//! centre, so its sd adds the slopes' reach from the centre to 0, variances summed.
//!
//! Why the presets use it: under the vague prior sd 10, a logistic GLM's released summaries
//! at 2 000 rows and ε ≤ 1 cannot tell a slope from a multiple of it once the score saturates,
//! and the noise-aware posterior ran out along that ray (60 data sets, θ fixed at
//! (0.5, 1, −0.5): 90 % intervals covered 61 and 57 % at ε 0.5 and 1, 2 and 16 unconverged);
//! under this prior (sds 10, 1.08, 1.08), over 200 data sets, they covered 94.2, 89.7, 90.2
//! and 90.3 % at ε 0.5, 1, 3 and 10, every posterior converged (docs/design.md §3).

/// A slope's sd per two sds of its feature (Gelman et al. 2008, Sec. 2.2).
pub const SLOPE_SCALE: f64 = 2.5;
/// The intercept's sd at the box's centre (Gelman et al. 2008, Sec. 2.2, likewise).
pub const INTERCEPT_SCALE: f64 = 10.0;

/// The weakly informative prior sds, intercept first when there is one, for features within
/// `features`' bounds [lo, hi].
pub fn weakly_informative_sd(intercept: bool, features: &[[f64; 2]]) -> Vec<f64> {
    let slopes: Vec<f64> = features
        .iter()
        .map(|[lo, hi]| SLOPE_SCALE / (2.0 * (hi - lo) / 12f64.sqrt()))
        .collect();
    let reach_to_zero: f64 = features
        .iter()
        .zip(&slopes)
        .map(|([lo, hi], s)| (0.5 * (lo + hi) * s).powi(2))
        .sum();
    let intercept = intercept.then(|| (INTERCEPT_SCALE.powi(2) + reach_to_zero).sqrt());
    intercept.into_iter().chain(slopes).collect()
}

/// How far the slopes of a draw from that prior move any row's linear predictor, Σⱼ mⱼ|θⱼ|
/// over the features (mⱼ = max(|loⱼ|, |hiⱼ|)), at its mean plus three sds: a posterior whose
/// slopes reach further has gone where the prior would not take it.
pub fn slope_reach_bound(features: &[[f64; 2]]) -> f64 {
    // |z| for z ~ N(0, 1) has mean √(2/π) and variance 1 − 2/π.
    let (mean_abs, var_abs) = (
        (2.0 / std::f64::consts::PI).sqrt(),
        1.0 - 2.0 / std::f64::consts::PI,
    );
    let scaled: Vec<f64> = weakly_informative_sd(false, features)
        .iter()
        .zip(features)
        .map(|(s, bounds)| s * max_abs(bounds))
        .collect();
    let mean: f64 = scaled.iter().sum::<f64>() * mean_abs;
    let var: f64 = scaled.iter().map(|v| v * v).sum::<f64>() * var_abs;
    mean + 3.0 * var.sqrt()
}

/// How far a feature within `[lo, hi]` reaches from 0: its multiplier in a row's predictor.
fn max_abs([lo, hi]: &[f64; 2]) -> f64 {
    lo.abs().max(hi.abs())
}

/// The quantile of the slopes' reach over a posterior's draws that [`past_weakly_informative`]
/// compares with the bound: a runaway posterior's chains may part, some near the data's θ and
/// some far out (one such run: feature1's median 2.4, its 95th percentile 16.6), so the median
/// can stay within the bound while a tenth of the mass is far beyond it.
pub const REACH_QUANTILE: f64 = 0.9;

/// The [`REACH_QUANTILE`] over `draws` (θ, intercept first when there is one) of the slopes'
/// reach Σⱼ mⱼ|θⱼ|, with [`slope_reach_bound`], when it passes that bound under a prior whose
/// slopes' sds `prior_sd` exceed the weakly informative ones: where a release cannot tell
/// the slopes from their multiples, such a prior lets the posterior run out along them, and
/// how far it goes is the prior's doing, not the data's. `None` otherwise.
pub fn past_weakly_informative<'a>(
    intercept: bool,
    features: &[[f64; 2]],
    prior_sd: &[f64],
    draws: impl Iterator<Item = &'a [f64]>,
) -> Option<(f64, f64)> {
    let first = usize::from(intercept);
    let default = weakly_informative_sd(false, features);
    // A hundredth over, so that the default written out by hand to a few digits counts as it.
    let vaguer = prior_sd[first..]
        .iter()
        .zip(&default)
        .any(|(s, w)| *s > 1.01 * w);
    if !vaguer {
        return None;
    }
    let reach: Vec<f64> = draws
        .map(|theta| {
            theta[first..]
                .iter()
                .zip(features)
                .map(|(t, bounds)| t.abs() * max_abs(bounds))
                .sum()
        })
        .collect();
    let reached = crate::diagnostics::quantile(&reach, REACH_QUANTILE);
    let bound = slope_reach_bound(features);
    (reached > bound).then_some((reached, bound))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A feature within [−2, 2] has sd 4/√12 = 1.155, so its slope's sd is 2.5/2.309 = 1.083;
    /// a centred box leaves the intercept at 10, an off-centre one adds the slope's reach to 0.
    #[test]
    fn the_scales_follow_the_bounds() {
        let sd = weakly_informative_sd(true, &[[-2.0, 2.0], [-1.0, 1.0]]);
        let slope = |width: f64| 2.5 * 12f64.sqrt() / (2.0 * width);
        assert!((sd[0] - 10.0).abs() < 1e-12);
        assert!((sd[1] - slope(4.0)).abs() < 1e-12 && (sd[1] - 1.0825).abs() < 1e-4);
        assert!((sd[2] - slope(2.0)).abs() < 1e-12);
        let off = weakly_informative_sd(true, &[[18.0, 90.0]]);
        let s = slope(72.0);
        assert!((off[1] - s).abs() < 1e-12);
        assert!((off[0] - (100.0 + (54.0 * s).powi(2)).sqrt()).abs() < 1e-12);
        assert_eq!(weakly_informative_sd(false, &[[0.0, 1.0]]).len(), 1);
    }

    /// Two features within [−2, 2]: each slope's reach 2·1.083 = 2.165, mean 2·2.165·0.798,
    /// sd √(2·2.165²·0.363); and the bound grows with the features.
    #[test]
    fn the_reach_bound_is_the_prior_s_mean_plus_three_sds() {
        let m = 2.0 * 2.5 * 12f64.sqrt() / 8.0;
        let expected = 2.0 * m * (2.0 / std::f64::consts::PI).sqrt()
            + 3.0 * (2.0 * m * m * (1.0 - 2.0 / std::f64::consts::PI)).sqrt();
        let two = slope_reach_bound(&[[-2.0, 2.0]; 2]);
        assert!((two - expected).abs() < 1e-12, "{two} against {expected}");
        assert!(slope_reach_bound(&[[-2.0, 2.0]; 5]) > two);
    }

    /// Draws out along the ray at (7, 8.5, −6.5), as a vague prior's posterior ran, pass the
    /// bound (reach 30 against 9.0); draws about (0.5, 1, −0.5) do not, and under the weakly
    /// informative prior itself nothing is said.
    #[test]
    fn only_a_vaguer_prior_s_far_draws_are_named() {
        let features = [[-2.0, 2.0]; 2];
        let far = [[7.0, 8.5, -6.5], [6.0, 9.5, -5.5], [8.0, 7.5, -7.5]];
        let near = [[0.5, 1.0, -0.5], [0.3, 1.2, -0.7], [0.6, 0.9, -0.4]];
        let vague = [10.0; 3];
        let (reached, bound) =
            past_weakly_informative(true, &features, &vague, far.iter().map(|t| &t[..])).unwrap();
        assert!(
            (reached - 30.0).abs() < 1e-12 && (bound - 9.0).abs() < 0.1,
            "{reached} {bound}"
        );
        assert_eq!(
            past_weakly_informative(true, &features, &vague, near.iter().map(|t| &t[..])),
            None
        );
        let default = weakly_informative_sd(true, &features);
        assert_eq!(
            past_weakly_informative(true, &features, &default, far.iter().map(|t| &t[..])),
            None
        );
    }
}
