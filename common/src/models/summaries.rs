//! Quadratic summaries: what the `summaries` route releases, once or a few times per run,
//! instead of one noisy statistic per iteration (Kulkarni et al. 2021; Huggins, Adams &
//! Broderick 2017, PASS-GLM).
//!
//! Around a public centre θ_r each row's log-likelihood is replaced by a quadratic in its
//! linear predictor η = x̃ᵀθ: with c = x̃ᵀθ_r and b the family's cumulant function,
//! b(c + t) ≈ b(c) + b₁t + b₂t² for |t| ≤ h (a degree-2 Chebyshev projection over the window
//! h; h = 0 is the Taylor expansion, the exact local curvature), so
//! T·ℓ(x|θ) ≈ const + β·x̃ᵀΔ − ½γ·(x̃ᵀΔ)², Δ = θ − θ_r, β = T(y − b₁)/φ, γ = 2T·b₂/φ.
//! The summed summary is then g = Σ β x̃ and A = Σ γ x̃x̃ᵀ: the whole data set's quadratic
//! log-likelihood gᵀΔ − ½ΔᵀAΔ, released as one vector (g, the upper triangle of A) whose
//! rows are bounded by public facts alone. For the gaussian family b is quadratic and the
//! summary exact at any centre.
use crate::data::Columns;

pub trait QuadraticSummaries: Send + Sync {
    /// Entries of the released vector: d for g, then d(d+1)/2 for A's upper triangle (row
    /// by row: A₁₁, A₁₂, …, A₁d, A₂₂, …).
    fn entries(&self) -> usize;
    /// True when the quadratic is the log-likelihood itself (the gaussian family): one
    /// release at any centre is then exact.
    fn exact(&self) -> bool;
    /// The summed summary (g, upper A) over the rows of `data`, about `centre` with window
    /// `window` (≥ 0). Each row's β and γ are clipped to the public caps that
    /// [`QuadraticSummaries::row_bound`] uses, so the bound holds whatever the rows hold.
    fn summary(&self, data: &Columns, centre: &[f64], window: f64) -> Vec<f64>;
    /// A public bound on one row's contribution ‖(βx̃, upper(γx̃x̃ᵀ))‖₂ about `centre` with
    /// `window`, from the column bounds and hyperparameters alone.
    fn row_bound(&self, centre: &[f64], window: f64) -> f64;
    /// max |x̃ᵀδ| over the public box of covariates: how far a move δ of θ moves any row's
    /// linear predictor.
    fn reach(&self, delta: &[f64]) -> f64;
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
