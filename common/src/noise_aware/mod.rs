//! Noise-aware posteriors from released summaries, and the plain HMC that samples them.
//!
//! After a party releases its summary once (or a few times), the coordinator has noisy sums
//! and their public noise variance. Treating them as exact (the plug-in posterior) is
//! over-confident; the noise-aware posterior treats the true sums as latent and integrates
//! the noise (Bernstein & Sheldon 2018; Kulkarni et al. 2021): `quadratic` holds it for the
//! GLMs' quadratic summaries, `means` for the Gaussian-likelihood models' exact sums, `hmc`
//! samples either with exact gradients, at no further privacy cost.
pub mod hmc;
pub mod means;
pub mod quadratic;
pub mod rounds;

/// A log density with its gradient: all a sampler needs (as in nuts-rs's `CpuLogpFunc`).
pub trait LogDensity: Sync {
    fn dim(&self) -> usize;
    /// ln p(x) up to a constant, with ∇ ln p(x) written into `grad` (length `dim`). A point
    /// outside the support returns −∞ (the gradient is then ignored).
    fn log_density(&self, x: &[f64], grad: &mut [f64]) -> f64;
}
