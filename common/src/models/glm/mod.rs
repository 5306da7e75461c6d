//! Generalised linear models over a party's own named columns (`kind = "glm"`): a label y
//! with linear predictor η = x̃ᵀθ, where x̃ is the row's features with a leading 1 when the
//! model has an intercept, and a family:
//!
//! - `gaussian`: y ~ N(η, σ²) with a known noise sd σ (`noise_sd`); conjugate with the normal
//!   prior, so it has an exact posterior;
//! - `logistic`: y ∈ [0, 1] (0/1 outcomes), ℓ = yη − ln(1 + e^η);
//! - `poisson`: y a count, ℓ = yη − e^η − ln y!.
//!
//! The prior is θⱼ ~ N(mⱼ, sⱼ²), independently.
//!
//! **Public bounds and the clip.** Every feature, and the label where the family needs it,
//! declares public bounds [lo, hi], and a party refuses at load a row outside them. Then the
//! ratio is Lipschitz with a constant that θ, θ′ and the bounds give: with the score
//! u(y, η) = ∂ℓ/∂η (monotone in y and in η, so extreme at the corners of the box),
//! |ℓ(x|θ′) − ℓ(x|θ)| ≤ max|u| · |x̃ᵀ(θ′ − θ)| ≤ max|u| · Σⱼ max(|loⱼ|, |hiⱼ|)·|θ′ⱼ − θⱼ|,
//! the max over labels in their bounds and predictors η over the box and the segment [θ, θ′]
//! (whose range the end points give: the box's largest η is convex in θ, its smallest
//! concave). [`Model::ratio_bound`] returns it, and the gradient's counterpart
//! max|u(y, η(θ))| · max‖x̃‖ is [`Model::gradient_bound`]. A party clips each row at the
//! smaller of that bound and the run's clip·‖θ′ − θ‖ (`party/src/statistics/`), so with a run
//! clip at least the model's (a large clip, say 1e6) the clip never binds and the release's
//! noise follows the Lipschitz bound, at the same privacy cost per release. The logistic
//! score is within (−1, 1), so there the Lipschitz constant is at most max‖x̃‖ everywhere;
//! the Gaussian and Poisson ones grow with |η|, so far from the data's θ the run's clip
//! takes over.
//!
//! The hot loops stream the columns in blocks: each block's predictors are accumulated
//! column by column into stack buffers, so no row is copied and nothing is allocated.
use nalgebra::{DMatrix, DVector};
use rand::{Rng, RngExt};

use super::mvn::MvNormal;
use super::{ExactPosterior, Model, SufficientStatistics, Summaries, fingerprint_of};
use crate::clip::{ClippedSum, clip, norm_sq_bound};
use crate::data::{ColumnSpec, Columns};

pub mod prior;
mod simulate;
mod spec;
mod summaries;

pub use spec::{Family, GlmColumn, GlmSpec};

const LN_2PI: f64 = 1.837_877_066_409_345_5;

/// Rows per block of the hot loops: the block's predictors live in stack buffers in L1.
const BLOCK: usize = 256;

/// The public bounds are mathematical upper bounds; this factor covers the rounding of the
/// per-row arithmetic, so that the clip at the bound never binds on a row within the bounds.
const ROUNDING_SLACK: f64 = 1.0 + 1e-9;

#[derive(Clone, Debug)]
pub struct Glm {
    family: Family,
    intercept: bool,
    /// Each feature's bounds [lo, hi].
    features: Vec<[f64; 2]>,
    /// Each feature's max(|lo|, |hi|).
    max_abs: Vec<f64>,
    /// The largest ‖x̃‖ over the box, the intercept's 1 included.
    max_norm: f64,
    /// The label's bounds [lo, hi].
    label: [f64; 2],
    prior_mean: Vec<f64>,
    prior_precision: Vec<f64>,
    /// Σⱼ −½ ln(2π sⱼ²).
    prior_log_norm: f64,
    /// σ² of the gaussian family (1 for the others, unused).
    noise_var: f64,
    temperature: f64,
    spec: GlmSpec,
}

/// ln(1 + e^η) without overflow.
#[inline(always)]
fn softplus(eta: f64) -> f64 {
    eta.max(0.0) + (-eta.abs()).exp().ln_1p()
}

#[inline(always)]
fn sigmoid(eta: f64) -> f64 {
    1.0 / (1.0 + (-eta).exp())
}

impl Glm {
    fn p(&self) -> usize {
        self.features.len()
    }

    /// The coefficients of the features: θ without its intercept.
    fn slopes<'t>(&self, theta: &'t [f64]) -> &'t [f64] {
        &theta[usize::from(self.intercept)..]
    }

    fn offset(&self, theta: &[f64]) -> f64 {
        if self.intercept { theta[0] } else { 0.0 }
    }

    /// η of one row given as features followed by the label.
    fn predictor(&self, theta: &[f64], row: &[f64]) -> f64 {
        self.offset(theta)
            + self
                .slopes(theta)
                .iter()
                .zip(row)
                .map(|(t, x)| t * x)
                .sum::<f64>()
    }

    /// The predictors of rows `start .. start + out.len()` of `data`, column by column.
    fn predictors(&self, data: &Columns, start: usize, theta: &[f64], out: &mut [f64]) {
        out.fill(self.offset(theta));
        for (j, &w) in self.slopes(theta).iter().enumerate() {
            if w != 0.0 {
                let col = &data.col(j)[start..start + out.len()];
                for (o, x) in out.iter_mut().zip(col) {
                    *o += w * x;
                }
            }
        }
    }

    /// The label column.
    fn labels<'d>(&self, data: &'d Columns) -> &'d [f64] {
        data.col(self.p())
    }

    /// The score u(y, η) = ∂ℓ/∂η, untempered.
    #[inline(always)]
    fn score(&self, y: f64, eta: f64) -> f64 {
        match self.family {
            Family::Gaussian => (y - eta) / self.noise_var,
            Family::Logistic => y - sigmoid(eta),
            Family::Poisson => y - eta.exp(),
        }
    }

    /// The range of η over the box of features at θ.
    fn predictor_range(&self, theta: &[f64]) -> [f64; 2] {
        let c = self.offset(theta);
        self.slopes(theta)
            .iter()
            .zip(&self.features)
            .fold([c, c], |[lo, hi], (t, [a, b])| {
                [lo + (t * a).min(t * b), hi + (t * a).max(t * b)]
            })
    }

    /// max |u(y, η)| over labels in their bounds and η in `eta`: u is monotone in each, so
    /// at a corner. ∞ where the range is not a number (∞ − ∞ at absurd θ), so that a party
    /// then keeps the run's clip.
    fn max_score(&self, [eta_lo, eta_hi]: [f64; 2]) -> f64 {
        let [y_lo, y_hi] = self.label;
        let corners = [
            (y_lo, eta_hi),
            (y_hi, eta_lo),
            (y_lo, eta_lo),
            (y_hi, eta_hi),
        ];
        corners
            .iter()
            .map(|&(y, eta)| self.score(y, eta).abs())
            .fold(
                0.0,
                |m, v| if v.is_nan() { f64::INFINITY } else { m.max(v) },
            )
    }

    /// Σ over blocks of rows of `each(labels, η(θ), η(θ′), out)` for the block's slice of
    /// `out`: the ratio loops' common frame.
    fn ratio_blocks(
        &self,
        data: &Columns,
        theta: &[f64],
        theta_prop: &[f64],
        mut each: impl FnMut(usize, &[f64], &[f64], &[f64]),
    ) {
        assert_eq!(data.d(), self.row_dim(), "data columns");
        let (mut eta, mut eta_prop) = ([0.0; BLOCK], [0.0; BLOCK]);
        let labels = self.labels(data);
        let mut start = 0;
        while start < data.n() {
            let len = BLOCK.min(data.n() - start);
            self.predictors(data, start, theta, &mut eta[..len]);
            self.predictors(data, start, theta_prop, &mut eta_prop[..len]);
            each(
                start,
                &labels[start..start + len],
                &eta[..len],
                &eta_prop[..len],
            );
            start += len;
        }
    }

    /// Each row's clipped tempered ratio, passed to `sink(row, clipped, raw)`, the family's
    /// ratio chosen once outside the loop (ℓ(η′) − ℓ(η) in forms that cancel the normalising
    /// constants exactly).
    fn clipped_ratios(
        &self,
        data: &Columns,
        theta: &[f64],
        theta_prop: &[f64],
        bound: f64,
        sink: impl FnMut(usize, f64, f64),
    ) {
        let half_precision = 0.5 / self.noise_var;
        let data = (data, theta, theta_prop);
        match self.family {
            Family::Gaussian => self.ratio_loop(data, bound, sink, |y, a, b| {
                (b - a) * (2.0 * y - a - b) * half_precision
            }),
            Family::Logistic => self.ratio_loop(data, bound, sink, |y, a, b| {
                y * (b - a) - (softplus(b) - softplus(a))
            }),
            Family::Poisson => self.ratio_loop(data, bound, sink, |y, a, b| {
                y * (b - a) - (b.exp() - a.exp())
            }),
        }
    }

    /// [`Glm::clipped_ratios`] for one family's untempered ratio `ratio(y, η, η′)`.
    fn ratio_loop(
        &self,
        (data, theta, theta_prop): (&Columns, &[f64], &[f64]),
        bound: f64,
        mut sink: impl FnMut(usize, f64, f64),
        ratio: impl Fn(f64, f64, f64) -> f64,
    ) {
        assert!(bound >= 0.0, "clip bound must be non-negative, got {bound}");
        let t = self.temperature;
        self.ratio_blocks(data, theta, theta_prop, |start, y, eta, eta_prop| {
            let rows = y.iter().zip(eta).zip(eta_prop).enumerate();
            for (i, ((&y, &a), &b)) in rows {
                let r = t * ratio(y, a, b);
                sink(start + i, clip(r, bound), r);
            }
        });
    }
}

impl Model for Glm {
    fn name(&self) -> &'static str {
        "glm"
    }

    fn dim(&self) -> usize {
        self.prior_mean.len()
    }

    /// The features, then the label.
    fn row_dim(&self) -> usize {
        self.p() + 1
    }

    fn columns(&self) -> Vec<ColumnSpec> {
        self.spec
            .features
            .iter()
            .zip(&self.features)
            .map(|(c, &b)| (c.name.clone(), b))
            .chain([(self.spec.label.name.clone(), self.label)])
            .map(|(name, bounds)| ColumnSpec {
                name,
                bounds: Some(bounds),
            })
            .collect()
    }

    /// `intercept` (when the model has one), then the feature columns' names.
    fn parameter_names(&self) -> Vec<String> {
        let intercept = self.intercept.then(|| "intercept".to_string());
        intercept
            .into_iter()
            .chain(self.spec.features.iter().map(|c| c.name.clone()))
            .collect()
    }

    /// Family, column names and bounds, intercept, noise sd and temperature: everything the
    /// likelihood and the admitted rows depend on.
    fn fingerprint(&self) -> String {
        let columns: Vec<String> = self
            .columns()
            .iter()
            .map(|c| format!("{}:{:?}", c.name, c.bounds))
            .collect();
        fingerprint_of(&format!(
            "glm/v1;family={};columns={columns:?};intercept={};noise_var={:?};temperature={:?}",
            self.family.name(),
            self.intercept,
            self.noise_var,
            self.temperature
        ))
    }

    fn temperature(&self) -> f64 {
        self.temperature
    }

    fn log_prior(&self, theta: &[f64]) -> f64 {
        self.prior_log_norm
            - 0.5
                * theta
                    .iter()
                    .zip(&self.prior_mean)
                    .zip(&self.prior_precision)
                    .map(|((t, m), p)| p * (t - m) * (t - m))
                    .sum::<f64>()
    }

    fn grad_log_prior(&self, theta: &[f64], out: &mut [f64]) {
        for (((o, t), m), p) in out
            .iter_mut()
            .zip(theta)
            .zip(&self.prior_mean)
            .zip(&self.prior_precision)
        {
            *o = -p * (t - m);
        }
    }

    fn prior_mode(&self) -> Vec<f64> {
        self.prior_mean.clone()
    }

    fn prior_sd(&self) -> Option<Vec<f64>> {
        Some(
            self.prior_precision
                .iter()
                .map(|p| p.sqrt().recip())
                .collect(),
        )
    }

    fn log_lik_row(&self, theta: &[f64], row: &[f64]) -> f64 {
        let (eta, y) = (self.predictor(theta, row), row[self.p()]);
        self.temperature
            * match self.family {
                Family::Gaussian => {
                    -0.5 * ((y - eta).powi(2) / self.noise_var + LN_2PI + self.noise_var.ln())
                }
                Family::Logistic => y * eta - softplus(eta),
                Family::Poisson => y * eta - eta.exp() - libm::lgamma(y + 1.0),
            }
    }

    /// T·u(y, η)·x̃.
    fn grad_log_lik_row(&self, theta: &[f64], row: &[f64], out: &mut [f64]) {
        let p = self.p();
        let s = self.temperature * self.score(row[p], self.predictor(theta, row));
        let (head, slopes) = out.split_at_mut(usize::from(self.intercept));
        head.fill(s);
        for (o, x) in slopes.iter_mut().zip(&row[..p]) {
            *o = s * x;
        }
    }

    fn clipped_llr_sum(
        &self,
        data: &Columns,
        theta: &[f64],
        theta_prop: &[f64],
        bound: f64,
    ) -> ClippedSum {
        let mut out = ClippedSum::default();
        self.clipped_ratios(data, theta, theta_prop, bound, |_, rc, r| {
            out.sum += rc;
            out.clipped += u64::from(rc != r);
        });
        out
    }

    fn clipped_llr_terms(
        &self,
        data: &Columns,
        theta: &[f64],
        theta_prop: &[f64],
        bound: f64,
        out: &mut [f64],
    ) {
        assert_eq!(out.len(), data.n(), "one term per row");
        self.clipped_ratios(data, theta, theta_prop, bound, |i, rc, _| out[i] = rc);
    }

    /// Row i's tempered gradient is sᵢ·x̃ᵢ with sᵢ = T·u(yᵢ, ηᵢ), so its norm is
    /// |sᵢ|·‖x̃ᵢ‖ and clipping it scales sᵢ: per block, the scores and squared norms go into
    /// stack buffers, the clip rescales the scores (zeroing those of non-finite norm), and each column adds Σ sᵢ·xᵢⱼ.
    fn clipped_grad_sum(&self, data: &Columns, theta: &[f64], bound: f64, out: &mut [f64]) -> u64 {
        assert_eq!(data.d(), self.row_dim(), "data columns");
        assert_eq!(out.len(), self.dim(), "one entry per parameter");
        assert!(bound >= 0.0, "clip bound must be non-negative, got {bound}");
        out.fill(0.0);
        let limit = norm_sq_bound(bound);
        let (mut s, mut norm_sq) = ([0.0; BLOCK], [0.0; BLOCK]);
        let labels = self.labels(data);
        let first = usize::from(self.intercept);
        let mut clipped = 0;
        let mut start = 0;
        while start < data.n() {
            let len = BLOCK.min(data.n() - start);
            let (s, norm_sq) = (&mut s[..len], &mut norm_sq[..len]);
            self.predictors(data, start, theta, s);
            for (si, y) in s.iter_mut().zip(&labels[start..start + len]) {
                *si = self.temperature * self.score(*y, *si);
            }
            // ‖sᵢ·x̃ᵢ‖² summed entry by entry in θ's order, as the row-by-row default does.
            for (q, si) in norm_sq.iter_mut().zip(s.iter()) {
                *q = if self.intercept { si * si } else { 0.0 };
            }
            for j in 0..self.p() {
                let col = &data.col(j)[start..start + len];
                for ((q, si), x) in norm_sq.iter_mut().zip(s.iter()).zip(col) {
                    let g = si * x;
                    *q += g * g;
                }
            }
            for (si, &q) in s.iter_mut().zip(norm_sq.iter()) {
                if q > limit || q.is_nan() {
                    clipped += 1;
                    let norm = q.sqrt();
                    *si = if norm.is_finite() {
                        *si * (bound / norm)
                    } else {
                        0.0
                    };
                }
            }
            if self.intercept {
                out[0] += s.iter().sum::<f64>();
            }
            for (j, o) in out[first..].iter_mut().enumerate() {
                let col = &data.col(j)[start..start + len];
                *o += s.iter().zip(col).map(|(si, x)| si * x).sum::<f64>();
            }
            start += len;
        }
        clipped
    }

    /// max|u| over the labels' bounds and η over the box and the segment [θ, θ′], times
    /// Σⱼ max(|loⱼ|, |hiⱼ|)·|θ′ⱼ − θⱼ| (see the module's comment).
    fn ratio_bound(&self, theta: &[f64], theta_prop: &[f64]) -> Option<f64> {
        let ([a, b], [c, d]) = (
            self.predictor_range(theta),
            self.predictor_range(theta_prop),
        );
        let reach: f64 = (self.offset(theta_prop) - self.offset(theta)).abs()
            + self
                .slopes(theta)
                .iter()
                .zip(self.slopes(theta_prop))
                .zip(&self.max_abs)
                .map(|((t, u), m)| m * (u - t).abs())
                .sum::<f64>();
        Some(self.max_score([a.min(c), b.max(d)]) * reach * ROUNDING_SLACK)
    }

    /// max|u| over the labels' bounds and η over the box at θ, times max‖x̃‖.
    fn gradient_bound(&self, theta: &[f64]) -> Option<f64> {
        Some(self.max_score(self.predictor_range(theta)) * self.max_norm * ROUNDING_SLACK)
    }

    /// Features uniform within their bounds; labels from the family at η, clamped into the
    /// label's bounds so that every row is admitted (the gaussian label's bounds should be
    /// wide enough that clamping is rare: the exact posterior is that of the rows as drawn).
    fn simulate(&self, theta: &[f64], n: usize, rng: &mut dyn Rng) -> Columns {
        self.simulate_with(theta, n, rng, &mut |row, rng| {
            for (x, [lo, hi]) in row.iter_mut().zip(&self.features) {
                *x = lo + (hi - lo) * rng.random::<f64>();
            }
        })
    }

    /// The gaussian family's conjugate update, with X̃ the design and Λ₀ the prior precision:
    /// Σ_n = (Λ₀ + (T/σ²) X̃ᵀX̃)⁻¹, μ_n = Σ_n (Λ₀ m₀ + (T/σ²) X̃ᵀy). The others have none.
    fn exact_posterior(&self, data: &Columns) -> Option<Box<dyn ExactPosterior>> {
        if self.family != Family::Gaussian {
            return None;
        }
        let dim = self.dim();
        let (gram, cross) = self.design_products(data);
        let w = self.temperature / self.noise_var;
        let precision = DMatrix::from_fn(dim, dim, |i, j| {
            w * gram[(i, j)] + if i == j { self.prior_precision[i] } else { 0.0 }
        });
        let cov = precision.cholesky()?.inverse();
        let rhs = DVector::from_fn(dim, |i, _| {
            self.prior_precision[i] * self.prior_mean[i] + w * cross[i]
        });
        let mean = &cov * rhs;
        Some(Box::new(MvNormal::new(mean, cov)?))
    }

    fn sufficient_statistics(&self) -> Option<&dyn SufficientStatistics> {
        (self.family == Family::Gaussian).then_some(self as &dyn SufficientStatistics)
    }

    fn summaries(&self) -> Option<&dyn Summaries> {
        Some(self)
    }
}

impl Glm {
    /// X̃ᵀX̃ and X̃ᵀy over the rows of `data`, X̃ the design (a column of ones first with an
    /// intercept).
    fn design_products(&self, data: &Columns) -> (DMatrix<f64>, Vec<f64>) {
        let (dim, first) = (self.dim(), usize::from(self.intercept));
        let ones = vec![1.0; data.n()];
        let column = |k: usize| {
            if k < first {
                &ones[..]
            } else {
                data.col(k - first)
            }
        };
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
        let labels = self.labels(data);
        (
            DMatrix::from_fn(dim, dim, |i, j| dot(column(i), column(j))),
            (0..dim).map(|i| dot(column(i), labels)).collect(),
        )
    }

    /// The pairs (a, b), a ≤ b, of the upper triangle of X̃ᵀX̃, in the order S holds them.
    fn upper_pairs(&self) -> impl Iterator<Item = (usize, usize)> {
        let dim = self.dim();
        (0..dim).flat_map(move |a| (a..dim).map(move |b| (a, b)))
    }

    /// max |x̃ₐ| over the box: 1 for the intercept's column.
    fn max_abs_design(&self) -> Vec<f64> {
        let intercept = self.intercept.then_some(1.0);
        intercept
            .into_iter()
            .chain(self.max_abs.iter().copied())
            .collect()
    }
}

/// The gaussian family as an exponential family in its rows: with η = x̃ᵀθ,
/// T·ℓ = (T/σ²)(y·x̃ᵀθ − ½ θᵀx̃x̃ᵀθ) + terms free of θ, so s(x) = (x̃·y, the upper triangle of
/// x̃x̃ᵀ), scaled by T/σ² through φ: S holds T·X̃ᵀy then T·(X̃ᵀX̃)ₐᵦ for a ≤ b. (Σ y², the other
/// sufficient statistic of the family, is free of θ and cancels from every ratio, so it is
/// not released.)
impl SufficientStatistics for Glm {
    fn entries(&self) -> usize {
        let dim = self.dim();
        dim + dim * (dim + 1) / 2
    }

    fn sum(&self, data: &Columns) -> Vec<f64> {
        let (gram, cross) = self.design_products(data);
        let t = self.temperature;
        cross
            .iter()
            .map(|c| t * c)
            .chain(self.upper_pairs().map(|(a, b)| t * gram[(a, b)]))
            .collect()
    }

    /// T·‖s(x)‖ at its largest over the box: |x̃ₐ·y| ≤ mₐ·max|y| and |x̃ₐx̃ᵦ| ≤ mₐmᵦ with
    /// mₐ = max|x̃ₐ|.
    fn row_bound(&self) -> f64 {
        let m = self.max_abs_design();
        let y = self.label[0].abs().max(self.label[1].abs());
        let sq: f64 = m.iter().map(|ma| (ma * y).powi(2)).sum::<f64>()
            + self
                .upper_pairs()
                .map(|(a, b)| (m[a] * m[b]).powi(2))
                .sum::<f64>();
        self.temperature * sq.sqrt()
    }

    /// (θ′ − θ)/σ² for X̃ᵀy; −(θ′ₐθ′ᵦ − θₐθᵦ)/σ² for a < b and half that for a = b, from
    /// −½θᵀMθ = −½Σₐ Mₐₐθₐ² − Σₐ₍ᵦ Mₐᵦθₐθᵦ.
    fn ratio_coefficients(&self, theta: &[f64], theta_prop: &[f64]) -> Vec<f64> {
        let precision = 1.0 / self.noise_var;
        theta
            .iter()
            .zip(theta_prop)
            .map(|(t, u)| precision * (u - t))
            .chain(self.upper_pairs().map(|(a, b)| {
                let weight = if a == b { 0.5 } else { 1.0 };
                -weight * precision * (theta_prop[a] * theta_prop[b] - theta[a] * theta[b])
            }))
            .collect()
    }
}
