//! A multivariate normal distribution: the exact posterior of the Gaussian model and the
//! latent posterior of the banana model (Räisä 2020, Thm 5.2).
use nalgebra::{DMatrix, DVector};
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};

use super::ExactPosterior;

#[derive(Clone, Debug)]
pub(crate) struct MvNormal {
    mean: DVector<f64>,
    /// Lower Cholesky factor L of the covariance, Σ = L Lᵀ.
    chol: DMatrix<f64>,
    /// −½ d ln 2π − ln det L.
    log_norm: f64,
}

impl MvNormal {
    /// `None` if `cov` is not symmetric positive definite (numerically).
    pub(crate) fn new(mean: DVector<f64>, cov: DMatrix<f64>) -> Option<Self> {
        let chol = cov.cholesky()?.unpack();
        let d = mean.len() as f64;
        let log_norm = -0.5 * d * (2.0 * std::f64::consts::PI).ln()
            - chol.diagonal().iter().map(|l| l.ln()).sum::<f64>();
        Some(MvNormal {
            mean,
            chol,
            log_norm,
        })
    }

    pub(crate) fn variance(&self) -> Vec<f64> {
        self.chol.row_iter().map(|r| r.norm_squared()).collect()
    }
}

impl ExactPosterior for MvNormal {
    /// μ + L z with z ~ N(0, I).
    fn sample(&self, rng: &mut dyn Rng) -> Vec<f64> {
        let z = DVector::from_fn(self.mean.len(), |_, _| StandardNormal.sample(&mut *rng));
        (&self.mean + &self.chol * z).as_slice().to_vec()
    }

    fn mean(&self) -> Vec<f64> {
        self.mean.as_slice().to_vec()
    }

    fn sd(&self) -> Vec<f64> {
        self.variance().into_iter().map(f64::sqrt).collect()
    }

    fn log_density(&self, theta: &[f64]) -> f64 {
        let diff = DVector::from_column_slice(theta) - &self.mean;
        let y = self
            .chol
            .solve_lower_triangular(&diff)
            .expect("Cholesky factor has a positive diagonal");
        self.log_norm - 0.5 * y.norm_squared()
    }
}
