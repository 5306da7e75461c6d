//! Noise-aware posteriors from released summaries, and the plain HMC that samples them.
//!
//! After a party releases its summary once (or a few times), the coordinator has noisy sums
//! and their public noise variance. Treating them as exact (the plug-in posterior) is
//! over-confident; the noise-aware posterior treats the true sums as latent and integrates
//! the noise (Bernstein & Sheldon 2018; Kulkarni et al. 2021): `quadratic` holds it for the
//! GLMs' quadratic summaries, `means` for the Gaussian-likelihood models' exact sums, `hmc`
//! samples either with exact gradients, at no further privacy cost.
use rand_distr::Distribution;

mod covariates;
mod factor;
pub mod hmc;
pub mod means;
pub mod quadratic;
pub mod rounds;
mod sigmoid;
pub mod tilted;
pub mod weight;

/// A log density with its gradient: all a sampler needs (as in nuts-rs's `CpuLogpFunc`).
pub trait LogDensity: Sync {
    fn dim(&self) -> usize;
    /// ln p(x) up to a constant, with ∇ ln p(x) written into `grad` (length `dim`). A point
    /// outside the support returns −∞ (the gradient is then ignored).
    fn log_density(&self, x: &[f64], grad: &mut [f64]) -> f64;
    /// The point `x` of the sampler's space as its draws are reported: θ first, then any
    /// latent quantities. The same unless the density samples a reparametrisation.
    fn reported(&self, x: &[f64]) -> Vec<f64> {
        x.to_vec()
    }
    /// The point of the sampler's space that [`LogDensity::reported`] maps to `point`.
    fn sampler_point(&self, point: &[f64]) -> Vec<f64> {
        point.to_vec()
    }
}

/// A chain's move from an approximation's point: twice its sds times a standard normal draw
/// each, so that chains started this way spread wider than the posterior and R̂ can see a
/// region the approximation misses.
pub fn spread<R: rand::Rng + ?Sized>(sds: &[f64], rng: &mut R) -> Vec<f64> {
    sds.iter()
        .map(|sd| {
            let z: f64 = rand_distr::StandardNormal.sample(rng);
            2.0 * sd * z
        })
        .collect()
}

#[cfg(test)]
/// The gradient `target` reports at `x` against central differences, within `tolerance`
/// relative to the difference.
pub(crate) fn assert_gradient(target: &dyn LogDensity, x: &[f64], tolerance: f64) {
    let n = target.dim();
    let (mut grad, mut scratch) = (vec![0.0; n], vec![0.0; n]);
    target.log_density(x, &mut grad);
    for k in 0..n {
        let h = 1e-6 * (1.0 + x[k].abs());
        let (mut up, mut down) = (x.to_vec(), x.to_vec());
        up[k] += h;
        down[k] -= h;
        let fd = (target.log_density(&up, &mut scratch) - target.log_density(&down, &mut scratch))
            / (2.0 * h);
        assert!(
            (fd - grad[k]).abs() < tolerance * (1.0 + fd.abs()),
            "coordinate {k}: {fd} vs {}",
            grad[k]
        );
    }
}
