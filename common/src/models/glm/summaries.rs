//! The GLM's quadratic summaries (`models/summaries.rs`): the family's cumulant b(η) —
//! η²/2 (gaussian, φ = σ²), ln(1 + e^η) (logistic), e^η (poisson) — approximated about each
//! row's predictor at the centre, by Taylor's expansion (window 0) or a Chebyshev
//! projection over a window (Huggins et al. 2017; Kulkarni et al. 2021).
//!
//! **Public caps.** With c = x̃ᵀθ_r over the box [c_lo, c_hi] (public: the centre and the
//! column bounds), b₁ is increasing in c for a convex b, so |β| is largest at the corners
//! (y_hi, c_lo) and (y_lo, c_hi); γ = 2b₂ is at most sup b'' over the window (¼ for the
//! logistic, e^(c_hi + h) for the poisson). Each row's β and γ are clipped to these caps
//! (and a NaN to 0), so the row bound holds by construction. A row whose predictor leaves
//! the window is summarised by the same polynomial, less accurately; its contribution stays
//! within the bound. A logistic row's window stops at |η| = [`ROW_REACH`]: far out the
//! log-likelihood is linear, and a quadratic fitted over a window reaching there invents
//! curvature.
use super::{BLOCK, Family, Glm, ROUNDING_SLACK, sigmoid, softplus};
use crate::data::Columns;
use crate::models::summaries::{
    QuadraticSummaries, Reading, Summaries, chebyshev_quadratic, upper_index,
};
use crate::models::{Model, SufficientStatistics};

/// The farthest a logistic row's window reaches in its linear predictor: a row centred at
/// c gets the window min(h, R − |c|), and Taylor's expansion at |c| ≥ R, where the
/// logistic's curvature is under 3 % of its peak. Over a window reaching onto the plateau of
/// a nearly separable log-likelihood the fitted quadratic invents curvature out there, and
/// the posterior sits beyond the truth (docs/design.md §3). Measured with the posterior
/// sampled non-centred (`noise_aware/quadratic.rs`), θ drawn from N(0, 1), 200
/// repetitions on the same data sets and releases, 90 % coverage without the cut (some
/// rows sampled centred: the same posterior) → with R = 5: d = 5, 20 000 rows, ε 0.5, 1,
/// 3, 10: 87.3, 85.9, 90.1, 91.0 → 87.9, 88.2, 90.8, 90.7; d = 6, 100 000 rows, ε 0.5:
/// 87.2 → 89.0; d = 3, 2 000 rows: 92.0, 91.7, 88.2, 89.5 → 91.7, 92.7, 89.5, 89.7. With
/// R = 3, 4 and 6 d = 5 did worse (docs/design.md §3).
const ROW_REACH: f64 = 5.0;

/// How one summary maps a row's centre predictor c and label y to (β, γ).
struct Local {
    family: Family,
    window: f64,
    /// The poisson family's (1, k₂): e^(c+t) ≈ e^c(1 + t + k₂t²), the exact slope at the
    /// centre with the curvature of e^t's projection over |t| ≤ h. The projection's own
    /// slope, 2I₁(h)/h > 1, would raise every row's expected count at the centre and pull
    /// the mode down (on simulated poisson GLMs, d = 5, 20 000 rows, ε = 1: posterior means
    /// 0.31 sds low and 90 % intervals covering 78 %; with the exact slope 0.07 sds and 86 %).
    exp_coefficients: (f64, f64),
    /// T/φ.
    scale: f64,
}

impl Local {
    /// (b₁, b₂) of b about c.
    fn coefficients(&self, c: f64) -> (f64, f64) {
        match self.family {
            Family::Gaussian => (c, 0.5),
            Family::Logistic => {
                // Window 0, or a row at or beyond its reach: Taylor's expansion.
                let window = self.window.min(ROW_REACH - c.abs());
                if window > 0.0 {
                    chebyshev_quadratic(softplus, c, window)
                } else {
                    let s = sigmoid(c);
                    (s, 0.5 * s * (1.0 - s))
                }
            }
            Family::Poisson => {
                let (k1, k2) = self.exp_coefficients;
                let e = c.exp();
                (e * k1, e * k2)
            }
        }
    }
}

impl Glm {
    fn local(&self, window: f64) -> Local {
        let exp_coefficients = if window > 0.0 {
            (1.0, chebyshev_quadratic(f64::exp, 0.0, window).1)
        } else {
            (1.0, 0.5)
        };
        Local {
            family: self.family,
            window,
            exp_coefficients,
            scale: self.temperature / self.noise_var,
        }
    }

    /// The caps on |β| and on γ about `centre` with `window`.
    fn weight_caps(&self, local: &Local, centre: &[f64]) -> (f64, f64) {
        let [c_lo, c_hi] = self.predictor_range(centre);
        let [y_lo, y_hi] = self.label;
        let (b1_lo, _) = local.coefficients(c_lo);
        let (b1_hi, _) = local.coefficients(c_hi);
        let beta = (y_hi - b1_lo).abs().max((y_lo - b1_hi).abs());
        let curvature = match self.family {
            Family::Gaussian => 1.0,
            Family::Logistic => 0.25,
            Family::Poisson => (c_hi + local.window).exp(),
        };
        let cap = |v: f64| if v.is_nan() { f64::INFINITY } else { v };
        (cap(local.scale * beta), cap(local.scale * curvature))
    }

    /// Σ_{a≤b} mₐ²m_b² with mₐ = max |x̃ₐ| over the box.
    fn design_fourth_moment(&self) -> f64 {
        let m = self.max_abs_design();
        self.upper_pairs().map(|(a, b)| (m[a] * m[b]).powi(2)).sum()
    }
}

/// `v` within [lo, hi], a NaN at 0.
fn clamp(v: f64, lo: f64, hi: f64) -> f64 {
    if v.is_nan() { 0.0 } else { v.clamp(lo, hi) }
}

impl Summaries for Glm {
    fn entries(&self) -> usize {
        SufficientStatistics::entries(self)
    }

    fn summary(&self, data: &Columns, centre: &[f64], window: f64, weight: f64) -> Vec<f64> {
        assert_eq!(data.d(), self.row_dim(), "data columns");
        let d = self.dim();
        let local = self.local(window);
        let (beta_cap, gamma_cap) = self.weight_caps(&local, centre);
        let first = usize::from(self.intercept);
        let labels = self.labels(data);
        let mut out = vec![0.0; Summaries::entries(self)];
        let (mut beta, mut gamma) = ([0.0; BLOCK], [0.0; BLOCK]);
        let mut start = 0;
        while start < data.n() {
            let len = BLOCK.min(data.n() - start);
            let (beta, gamma) = (&mut beta[..len], &mut gamma[..len]);
            self.predictors(data, start, centre, beta);
            for ((b, g), y) in beta.iter_mut().zip(gamma.iter_mut()).zip(&labels[start..]) {
                let (b1, b2) = local.coefficients(*b);
                *b = clamp(local.scale * (y - b1), -beta_cap, beta_cap);
                *g = clamp(local.scale * 2.0 * b2, 0.0, gamma_cap);
            }
            // x̃ₐ of the block: the intercept's ones, else feature a − first.
            let column = |a: usize| (a >= first).then(|| &data.col(a - first)[start..start + len]);
            for a in 0..d {
                let xa = column(a);
                out[a] += match xa {
                    Some(x) => beta.iter().zip(x).map(|(b, x)| b * x).sum::<f64>(),
                    None => beta.iter().sum::<f64>(),
                };
                for b in a..d {
                    let xb = column(b);
                    out[upper_index(d, a, b)] += match (xa, xb) {
                        (Some(xa), Some(xb)) => gamma
                            .iter()
                            .zip(xa)
                            .zip(xb)
                            .map(|((g, p), q)| g * p * q)
                            .sum::<f64>(),
                        (None, Some(x)) | (Some(x), None) => {
                            gamma.iter().zip(x).map(|(g, x)| g * x).sum::<f64>()
                        }
                        (None, None) => gamma.iter().sum::<f64>(),
                    };
                }
            }
            start += len;
        }
        for a in &mut out[d..] {
            *a *= weight;
        }
        out
    }

    /// √(β_max²·max‖x̃‖² + κ²γ_max²·Σ_{a≤b} mₐ²m_b²), κ the curvature weight.
    fn row_bound(&self, centre: &[f64], window: f64, weight: f64) -> f64 {
        let (score, curvature) = self.block_bounds(centre, window);
        (score * score + (weight * curvature).powi(2)).sqrt() * ROUNDING_SLACK
    }

    fn reading(&self) -> Reading<'_> {
        Reading::Quadratic(self)
    }
}

impl QuadraticSummaries for Glm {
    fn exact(&self) -> bool {
        self.family == Family::Gaussian
    }

    fn reach(&self, delta: &[f64]) -> f64 {
        self.max_abs_design()
            .iter()
            .zip(delta)
            .map(|(m, d)| m * d.abs())
            .sum()
    }

    fn tilted(&self) -> bool {
        self.family == Family::Poisson && self.intercept
    }

    fn sigmoid(&self) -> Option<f64> {
        (self.family == Family::Logistic).then_some(self.temperature)
    }

    /// β_max·max‖x̃‖ and γ_max·√Σ_{a≤b} mₐ²m_b².
    fn block_bounds(&self, centre: &[f64], window: f64) -> (f64, f64) {
        let (beta, gamma) = self.weight_caps(&self.local(window), centre);
        (
            beta * self.max_norm,
            gamma * self.design_fourth_moment().sqrt(),
        )
    }

    fn design_box(&self) -> Vec<[f64; 2]> {
        let intercept = self.intercept.then_some([1.0, 1.0]);
        intercept
            .into_iter()
            .chain(self.features.iter().copied())
            .collect()
    }

    fn intercept(&self) -> bool {
        self.intercept
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::summaries::split_summary;
    use crate::models::{GlmSpec, Model};
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    /// A logistic row's window stops at |η| = ROW_REACH: a row centred within reach of it
    /// gets the window that ends there, a row beyond it Taylor's expansion, a row near 0 the
    /// whole window.
    #[test]
    fn a_logistic_row_s_window_stops_at_its_reach() {
        let glm = GlmSpec::example(Family::Logistic, 3).build().unwrap();
        let local = glm.local(2.0);
        let taylor = |c: f64| {
            let s = sigmoid(c);
            (s, 0.5 * s * (1.0 - s))
        };
        let cases = [
            (0.5, chebyshev_quadratic(softplus, 0.5, 2.0)),
            (-4.0, chebyshev_quadratic(softplus, -4.0, ROW_REACH - 4.0)),
            (4.5, chebyshev_quadratic(softplus, 4.5, ROW_REACH - 4.5)),
            (ROW_REACH + 1.0, taylor(ROW_REACH + 1.0)),
            (-ROW_REACH, taylor(-ROW_REACH)),
        ];
        for (c, expected) in cases {
            assert_eq!(local.coefficients(c), expected, "c = {c}");
        }
        assert_ne!(
            chebyshev_quadratic(softplus, 4.5, 2.0),
            chebyshev_quadratic(softplus, 4.5, ROW_REACH - 4.5),
            "the case at 4.5 tells the cut window from the whole one"
        );
    }

    /// The summary's quadratic gᵀΔ − ½ΔᵀAΔ is, at window 0, the second-order Taylor
    /// expansion of the summed log-likelihood about the centre: its gradient and Hessian.
    #[test]
    fn the_taylor_summary_is_the_gradient_and_negative_hessian_at_the_centre() {
        for family in [Family::Logistic, Family::Poisson, Family::Gaussian] {
            let glm = GlmSpec::example(family, 3).build().unwrap();
            let data = glm.simulate(&[0.5, 1.0, -0.5], 500, &mut ChaCha8Rng::seed_from_u64(1));
            let centre = [0.3, 0.7, -0.2];
            let (g, a) = split_summary(3, &Summaries::summary(&glm, &data, &centre, 0.0, 1.0));
            let total = |t: &[f64]| -> f64 {
                let mut row = vec![0.0; 3];
                (0..data.n())
                    .map(|i| {
                        data.row_into(i, &mut row);
                        glm.log_lik_row(t, &row)
                    })
                    .sum()
            };
            let h = 1e-4;
            for j in 0..3 {
                let shifted = |s: f64, k: usize, u: f64| {
                    let mut t = centre.to_vec();
                    t[j] += s;
                    t[k] += u;
                    t
                };
                let grad = (total(&shifted(h, j, 0.0)) - total(&shifted(-h, j, 0.0))) / (2.0 * h);
                assert!(
                    (grad - g[j]).abs() < 1e-5 * (1.0 + grad.abs()),
                    "{family:?} g[{j}]: {grad} vs {}",
                    g[j]
                );
                for (k, a_jk) in a[j].iter().enumerate() {
                    let hess = (total(&shifted(h, k, h))
                        - total(&shifted(h, k, -h))
                        - total(&shifted(-h, k, h))
                        + total(&shifted(-h, k, -h)))
                        / (4.0 * h * h);
                    assert!(
                        (hess + a_jk).abs() < 1e-3 * (1.0 + hess.abs()),
                        "{family:?} A[{j}][{k}]: {} vs {a_jk}",
                        -hess,
                    );
                }
            }
        }
    }

    /// Every row's contribution lies within the public row bound, for rows at the corners
    /// of the box and labels at their bounds, at centres, windows and curvature weights of
    /// every size; the weight multiplies the curvature block and nothing else.
    #[test]
    fn each_row_lies_within_the_public_bound() {
        for family in [Family::Logistic, Family::Poisson, Family::Gaussian] {
            let glm = GlmSpec::example(family, 3).build().unwrap();
            let features: Vec<[f64; 2]> = glm.features.clone();
            let [y_lo, y_hi] = glm.label;
            for centre in [[0.0, 0.0, 0.0], [1.0, -2.0, 3.0], [-5.0, 0.5, 0.1]] {
                for (window, weight) in [(0.0, 1.0), (0.5, 3.0), (4.0, 1.5), (0.0, 40.0)] {
                    let bound = Summaries::row_bound(&glm, &centre, window, weight);
                    for corner in 0..8u32 {
                        let x: Vec<f64> = (0..2)
                            .map(|j| features[j][((corner >> j) & 1) as usize])
                            .collect();
                        let y = if corner & 4 == 0 { y_lo } else { y_hi };
                        let data = Columns::from_rows(3, &[[x[0], x[1], y]]).unwrap();
                        let s = Summaries::summary(&glm, &data, &centre, window, weight);
                        let plain = Summaries::summary(&glm, &data, &centre, window, 1.0);
                        for (i, (w, p)) in s.iter().zip(&plain).enumerate() {
                            let want = if i < 3 { *p } else { weight * p };
                            assert!((w - want).abs() <= 1e-12 * want.abs(), "entry {i}");
                        }
                        let norm = s.iter().map(|v| v * v).sum::<f64>().sqrt();
                        assert!(
                            norm <= bound,
                            "{family:?} {centre:?} h={window}: {norm} > {bound}"
                        );
                    }
                }
            }
        }
    }
}
