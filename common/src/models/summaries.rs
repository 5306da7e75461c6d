//! Summaries: what the `summaries` route releases, once or a few times per run, instead of
//! one noisy statistic per iteration (Bernstein & Sheldon 2018; Kulkarni et al. 2021). Every
//! model that has them gives the party one interface, [`Summaries`]: the summed vector about
//! a public centre and a public bound on one row's part of it. How the coordinator reads the
//! vector is the model's [`Reading`]:
//!
//! - **Quadratic summaries** (the GLMs; Huggins, Adams & Broderick 2017, PASS-GLM). Around a
//!   public centre θ_r each row's log-likelihood is replaced by a quadratic in its linear
//!   predictor η = x̃ᵀθ: with c = x̃ᵀθ_r and b the family's cumulant function,
//!   b(c + t) ≈ b(c) + b₁t + b₂t² for |t| ≤ h (a degree-2 Chebyshev projection over the
//!   window h; h = 0 is the Taylor expansion, the exact local curvature), so
//!   T·ℓ(x|θ) ≈ const + β·x̃ᵀΔ − ½γ·(x̃ᵀΔ)², Δ = θ − θ_r, β = T(y − b₁)/φ, γ = 2T·b₂/φ.
//!   The summed summary is then g = Σ β x̃ and A = Σ γ x̃x̃ᵀ: the whole data set's quadratic
//!   log-likelihood gᵀΔ − ½ΔᵀAΔ, released as one vector (g, the upper triangle of A) whose
//!   rows are bounded by public facts alone. For the gaussian family b is quadratic and the
//!   summary exact at any centre.
//! - **Mean summaries** (the Gaussian-likelihood models x ~ N(u(θ), Σ) with Σ known: the
//!   `gaussian` model, u = θ, and the banana, u = g⁻¹(θ)). Their rows enter the
//!   log-likelihood only through Σx (the squares are free of θ), an exact sufficient
//!   statistic: the release is S = T·Σ(x − c) over rows within a public box whose centre is
//!   c, and needs no centre of its own.
use nalgebra::DMatrix;

use super::ModelError;
use crate::data::{ColumnSpec, Columns};

/// The largest curvature weight a summary query may carry (`Summaries::summary`): far
/// beyond the route's own choices (`noise_aware::weight::curvature_weight`), and small
/// enough that the weighted bound stays far from overflow.
pub const MAX_CURVATURE_WEIGHT: f64 = 1e3;

/// What a party releases on the summaries route, whatever its reading.
pub trait Summaries: Send + Sync {
    /// Entries of the released vector.
    fn entries(&self) -> usize;
    /// The summed summary over the rows of `data`, about `centre` with `window` (≥ 0), each
    /// row's part within [`Summaries::row_bound`] whatever the row holds. A quadratic
    /// summary's curvature block is multiplied by `curvature_weight` (κ ≥ 1, public), so
    /// that one release can measure A more finely than g; mean summaries have no curvature
    /// and ignore it (a party refuses a query for them with any weight but 1).
    fn summary(
        &self,
        data: &Columns,
        centre: &[f64],
        window: f64,
        curvature_weight: f64,
    ) -> Vec<f64>;
    /// A public bound on the norm of one row's part of the summary about `centre` with
    /// `window` and `curvature_weight`, from the column bounds and hyperparameters alone.
    fn row_bound(&self, centre: &[f64], window: f64, curvature_weight: f64) -> f64;
    /// How the coordinator reads the release.
    fn reading(&self) -> Reading<'_>;
}

/// The two kinds of summary, as the coordinator reads them.
pub enum Reading<'a> {
    Quadratic(&'a dyn QuadraticSummaries),
    Mean(&'a dyn MeanSummaries),
}

/// The model's quadratic summaries, if its summaries are of that kind.
pub fn quadratic(model: &dyn super::Model) -> Option<&dyn QuadraticSummaries> {
    match model.summaries()?.reading() {
        Reading::Quadratic(q) => Some(q),
        Reading::Mean(_) => None,
    }
}

/// The GLMs' summaries: (g, upper A) about the centre.
pub trait QuadraticSummaries: Summaries {
    /// True when the quadratic is the log-likelihood itself (the gaussian family): one
    /// release at any centre is then exact.
    fn exact(&self) -> bool;
    /// max |x̃ᵀδ| over the public box of covariates: how far a move δ of θ moves any row's
    /// linear predictor.
    fn reach(&self, delta: &[f64]) -> f64;
    /// True when the summed score's mean given θ is exponential in θ with the first
    /// coefficient an intercept (the poisson family): its noise-aware posterior then models
    /// the covariates tilted at the centre (`noise_aware/tilted.rs`), which reads Taylor's
    /// summary (the finals' window 0), and pools no pilot.
    fn tilted(&self) -> bool;
    /// `Some(T)` when the summed score's mean given θ is T·Σx̃(σ(x̃ᵀθ) − σ(c)) (the logistic
    /// family at temperature T): its noise-aware posterior then bends the quadratic's linear
    /// mean by a public model of the covariates (`noise_aware/sigmoid.rs`), which reads
    /// Taylor's summary (the finals' window 0).
    fn sigmoid(&self) -> Option<f64>;
    /// Public bounds on the norms of one row's score βx̃ and of its curvature's upper
    /// triangle γx̃x̃ᵀ about `centre` with `window`: the row bound is their weighted norm.
    fn block_bounds(&self, centre: &[f64], window: f64) -> (f64, f64);
    /// Each design column's public bounds [lo, hi] (the intercept's [1, 1] first).
    fn design_box(&self) -> Vec<[f64; 2]>;
    /// True when the first coefficient is an intercept (its design column the constant 1).
    fn intercept(&self) -> bool;
}

/// The Gaussian-likelihood models' summaries: S = T·Σ(x − c) over rows within the public
/// box, whatever the query's centre. Under the model Σ(x − c) | θ ~ N(n(u(θ) − c), nΣ/T) in
/// the tempered sense (its density in θ is the tempered likelihood's), so the release
/// Ŝ = S + e, e ~ N(0, σ²I), has Ŝ | θ ~ N(T·n(u(θ) − c), T·nΣ + σ²I): the exact
/// noise-aware likelihood (Bernstein & Sheldon 2018, Sec. 3, for a Gaussian family and the
/// Gaussian mechanism, where the convolution is closed form).
pub trait MeanSummaries: Summaries {
    /// u(θ), the rows' mean.
    fn mean(&self, theta: &[f64]) -> Vec<f64>;
    /// Turns ∂f/∂u in `grad` into ∂f/∂θ in place (Jᵀ of u at θ).
    fn pull_back(&self, theta: &[f64], grad: &mut [f64]);
    /// θ with u(θ) = `u`.
    fn theta_of(&self, u: Vec<f64>) -> Vec<f64>;
    /// The rows' covariance Σ.
    fn row_covariance(&self) -> DMatrix<f64>;
    /// c, the box's centre.
    fn offset(&self) -> Vec<f64>;
}

/// The [`Summaries`] methods of a Gaussian-likelihood model whose rows' sum over its public
/// box is its summary: written once here, they read the model's `row_box: Option<RowBox>`
/// (set whenever the model reports summaries) and `temperature`. Used inside
/// `impl Summaries for …`.
macro_rules! boxed_sum_summaries {
    () => {
        fn entries(&self) -> usize {
            self.dim()
        }

        /// The same at any centre and window: the sum is exact.
        fn summary(&self, data: &Columns, _centre: &[f64], _window: f64, _weight: f64) -> Vec<f64> {
            self.row_box
                .as_ref()
                .expect("summaries need the box")
                .sum(data, self.temperature)
        }

        fn row_bound(&self, _centre: &[f64], _window: f64, _weight: f64) -> f64 {
            self.row_box
                .as_ref()
                .expect("summaries need the box")
                .row_bound(self.temperature)
        }

        fn reading(&self) -> $crate::models::summaries::Reading<'_> {
            $crate::models::summaries::Reading::Mean(self)
        }
    };
}
pub(crate) use boxed_sum_summaries;

/// A public box for a model's rows: per column [lo, hi]. The mean summaries of the
/// Gaussian-likelihood models are sums over it, about its centre.
#[derive(Clone, Debug, PartialEq)]
pub struct RowBox {
    pub bounds: Vec<[f64; 2]>,
}

impl RowBox {
    /// The box a spec declares (`bounds`, one [lo, hi] per column), checked: `None` when it
    /// declares none.
    pub fn declared(bounds: &Option<Vec<[f64; 2]>>, d: usize) -> Result<Option<Self>, ModelError> {
        let Some(bounds) = bounds else {
            return Ok(None);
        };
        if bounds.len() != d {
            return Err(ModelError::LengthMismatch {
                field: "bounds",
                expected: d,
                got: bounds.len(),
            });
        }
        for (j, &[lo, hi]) in bounds.iter().enumerate() {
            if !(lo.is_finite() && hi.is_finite() && lo < hi) {
                return Err(ModelError::Bounds {
                    column: format!("x{}", j + 1),
                    lo,
                    hi,
                });
            }
        }
        Ok(Some(RowBox {
            bounds: bounds.clone(),
        }))
    }

    /// The box `mean ± k·sd`, column by column: for a preset, the prior predictive's central
    /// region, so that no simulated row falls outside it.
    pub fn around(mean: &[f64], sd: &[f64], k: f64) -> Vec<[f64; 2]> {
        mean.iter()
            .zip(sd)
            .map(|(m, s)| [m - k * s, m + k * s])
            .collect()
    }

    /// `x1 … xd`, with the box's bounds where there is one (a party refuses at load a row
    /// outside them).
    pub fn columns(row_box: &Option<RowBox>, d: usize) -> Vec<ColumnSpec> {
        let columns = ColumnSpec::numbered(d);
        match row_box {
            Some(b) => columns
                .into_iter()
                .zip(&b.bounds)
                .map(|(c, &bounds)| ColumnSpec {
                    bounds: Some(bounds),
                    ..c
                })
                .collect(),
            None => columns,
        }
    }

    /// The part of a fingerprint that says the rows are bounded, and how.
    pub fn fingerprint(&self) -> String {
        format!(";bounds={:?}", self.bounds)
    }

    /// c, the box's centre.
    pub fn centre(&self) -> Vec<f64> {
        self.bounds.iter().map(|[lo, hi]| 0.5 * (lo + hi)).collect()
    }

    /// T·Σ(clamp(x) − c) column by column: each value is clamped to its bounds (a party
    /// refuses rows outside them at load, so the clamp only keeps the bound by
    /// construction), so one row's part has norm at most [`RowBox::row_bound`].
    pub fn sum(&self, data: &Columns, temperature: f64) -> Vec<f64> {
        self.bounds
            .iter()
            .enumerate()
            .map(|(j, &[lo, hi])| {
                let c = 0.5 * (lo + hi);
                temperature * data.col(j).iter().map(|x| x.clamp(lo, hi) - c).sum::<f64>()
            })
            .collect()
    }

    /// T·‖half-widths‖₂ with a relative margin for rounding: the most one row's part of
    /// [`RowBox::sum`] can weigh.
    pub fn row_bound(&self, temperature: f64) -> f64 {
        let half: f64 = self
            .bounds
            .iter()
            .map(|[lo, hi]| (0.5 * (hi - lo)).powi(2))
            .sum();
        temperature * half.sqrt() * (1.0 + 1e-12)
    }
}

/// Index of A's entry (a, b), a ≤ b, in the released upper triangle (after the d entries of g).
pub fn upper_index(dim: usize, a: usize, b: usize) -> usize {
    debug_assert!(a <= b && b < dim);
    dim + a * dim - a * (a + 1) / 2 + b
}

/// The released vector split into g and the symmetric A.
pub fn split_summary(dim: usize, value: &[f64]) -> (Vec<f64>, Vec<Vec<f64>>) {
    assert_eq!(value.len(), dim + dim * (dim + 1) / 2, "summary length");
    let g = value[..dim].to_vec();
    let mut a = vec![vec![0.0; dim]; dim];
    for i in 0..dim {
        for j in i..dim {
            let v = value[upper_index(dim, i, j)];
            a[i][j] = v;
            a[j][i] = v;
        }
    }
    (g, a)
}

/// The released layout of (g, A): g, then A's upper triangle ([`split_summary`]'s inverse).
pub fn join_summary(g: &[f64], a: &[Vec<f64>]) -> Vec<f64> {
    let dim = g.len();
    let mut value = vec![0.0; dim + dim * (dim + 1) / 2];
    value[..dim].copy_from_slice(g);
    for i in 0..dim {
        for j in i..dim {
            value[upper_index(dim, i, j)] = a[i][j];
        }
    }
    value
}

/// Nodes of the Gauss–Chebyshev rule the projections use: exact for the degree-2
/// coefficients of polynomials up to degree 2·NODES − 3, and for the smooth cumulants here
/// accurate to rounding over windows of a few units.
const NODES: usize = 24;

/// The linear and quadratic coefficients (b₁, b₂) of the degree-2 Chebyshev projection of
/// t ↦ f(c + t) over |t| ≤ h, h > 0: with s = t/h, f ≈ c₀/2 + c₁T₁(s) + c₂T₂(s) and
/// T₂(s) = 2s² − 1, so b₁ = c₁/h and b₂ = 2c₂/h² (Huggins et al. 2017, Sec. 4: the
/// Chebyshev approximation of the GLM's φ).
pub fn chebyshev_quadratic(f: impl Fn(f64) -> f64, c: f64, h: f64) -> (f64, f64) {
    let (mut c1, mut c2) = (0.0, 0.0);
    for j in 0..NODES {
        let phi = std::f64::consts::PI * (j as f64 + 0.5) / NODES as f64;
        let v = f(c + h * phi.cos());
        c1 += v * phi.cos();
        c2 += v * (2.0 * phi).cos();
    }
    let scale = 2.0 / NODES as f64;
    (scale * c1 / h, 2.0 * scale * c2 / (h * h))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_projection_of_a_quadratic_is_itself_and_tends_to_taylor() {
        let (b1, b2) = chebyshev_quadratic(|x| 3.0 + 2.0 * x + 0.5 * x * x, 1.0, 2.0);
        // f(1 + t) = 3 + 2 + 2t + 0.5(1 + 2t + t²) = 5.5 + 3t + 0.5t².
        assert!(
            (b1 - 3.0).abs() < 1e-12 && (b2 - 0.5).abs() < 1e-12,
            "{b1} {b2}"
        );
        let (b1, b2) = chebyshev_quadratic(f64::exp, 0.3, 1e-3);
        assert!((b1 - 0.3f64.exp()).abs() < 1e-6, "{b1}");
        assert!((b2 - 0.5 * 0.3f64.exp()).abs() < 1e-4, "{b2}");
    }

    #[test]
    fn upper_indices_follow_the_rows_of_the_triangle() {
        let d = 3;
        let order: Vec<usize> = (0..d)
            .flat_map(|a| (a..d).map(move |b| upper_index(d, a, b)))
            .collect();
        assert_eq!(order, (d..d + 6).collect::<Vec<_>>());
        let (g, a) = split_summary(2, &[1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(g, vec![1.0, 2.0]);
        assert_eq!(a, vec![vec![3.0, 4.0], vec![4.0, 5.0]]);
    }
}
