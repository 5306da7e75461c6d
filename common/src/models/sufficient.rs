//! Models whose rows enter the likelihood through sufficient statistics (Yıldırım & Ermiş
//! 2019, Sec. 4 and Alg. 3): T·Σ_x ℓ(x|θ) = ⟨S, φ(θ)⟩ + terms free of θ, with S = Σ_x T·s(x).
//! A party can then release S once per step with fresh Gaussian noise, at a cost that does
//! not grow with its rows (S is summed once, at load), and the coordinator evaluates every
//! log-likelihood ratio from the federation's noisy sum: ⟨Ŝ, φ(θ′) − φ(θ)⟩, whose noise
//! variance is σ²‖φ(θ′) − φ(θ)‖² when each entry of Ŝ carries N(0, σ²) (their eq. 8).
use crate::data::Columns;

pub trait SufficientStatistics: Send + Sync {
    /// Entries of s(x).
    fn entries(&self) -> usize;
    /// S = Σ_x T·s(x) over the rows of `data`.
    fn sum(&self, data: &Columns) -> Vec<f64>;
    /// A public bound on ‖T·s(x)‖₂ over every row the model admits: the per-row bound of the
    /// released sum, from which its sensitivity follows.
    fn row_bound(&self) -> f64;
    /// φ(θ′) − φ(θ), so that the tempered log-likelihood ratio over the rows is ⟨S, it⟩.
    fn ratio_coefficients(&self, theta: &[f64], theta_prop: &[f64]) -> Vec<f64>;
}

/// The log-likelihood ratio ⟨Ŝ, c⟩ from noisy statistics `stats` whose entries each carry
/// noise of variance `noise_variance`, and the variance it carries, noise_variance·‖c‖²
/// (Yıldırım & Ermiş 2019, eq. 8), with c = φ(θ′) − φ(θ).
pub fn noisy_log_lik_ratio(
    family: &dyn SufficientStatistics,
    stats: &[f64],
    noise_variance: f64,
    theta: &[f64],
    theta_prop: &[f64],
) -> (f64, f64) {
    let c = family.ratio_coefficients(theta, theta_prop);
    let ratio = c.iter().zip(stats).map(|(c, s)| c * s).sum();
    let norm_sq: f64 = c.iter().map(|c| c * c).sum();
    (ratio, noise_variance * norm_sq)
}
