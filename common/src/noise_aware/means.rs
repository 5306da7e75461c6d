//! The noise-aware posterior of a mean summary (`models/summaries.rs`, [`MeanSummaries`]):
//! the Gaussian-likelihood models x ~ N(u(θ), Σ), whose rows enter only through their sum.
//!
//! The federation released Ŝ = T·Σ(x − c) + e over its n rows, e ~ N(0, σ²I) (σ² the sum of
//! the parties' variances). Under the model the sum is exactly normal, so
//! Ŝ | θ ~ N(T·n(u(θ) − c), K), K = T·nΣ + σ²I: the noise convolved with the sampling
//! distribution in closed form (Bernstein & Sheldon 2018, Sec. 3), nothing latent left. The
//! posterior p(θ) N(Ŝ; T·n(u(θ) − c), K) is the model's exact posterior when σ = 0 and
//! widens by exactly the noise otherwise. For the `gaussian` model (u = θ) it is Gaussian; for
//! the banana, u is Gaussian and θ = g(u) (Räisä 2020, Thm 5.2 with the noisy likelihood).
use std::sync::Arc;

use nalgebra::{DMatrix, DVector};

use super::LogDensity;
use crate::models::{MeanSummaries, Model, Reading};

/// p(θ | Ŝ) of the module's comment.
pub struct MeanPosterior {
    model: Arc<dyn Model>,
    /// Ŝ + T·n·c, so that the residual is this − T·n·u(θ).
    target: DVector<f64>,
    /// T·n.
    scale: f64,
    /// K's Cholesky factor.
    k: nalgebra::Cholesky<f64, nalgebra::Dyn>,
}

/// The model's mean summaries; the caller checked that it has them.
fn means(model: &dyn Model) -> &dyn MeanSummaries {
    match model.summaries().map(|s| s.reading()) {
        Some(Reading::Mean(m)) => m,
        _ => panic!("the {} model has no mean summaries", model.name()),
    }
}

impl MeanPosterior {
    /// The posterior given the summed release `value` of `rows` rows in all, each entry
    /// with noise variance `noise_variance` (≥ 0). Panics if the model has no mean summaries.
    pub fn new(model: Arc<dyn Model>, value: &[f64], noise_variance: f64, rows: u64) -> Self {
        let m = means(model.as_ref());
        let d = model.dim();
        assert_eq!(value.len(), d, "summary length");
        assert!(
            noise_variance >= 0.0 && noise_variance.is_finite(),
            "noise variance {noise_variance}"
        );
        let scale = model.temperature() * rows as f64;
        let k = m.row_covariance() * scale + DMatrix::identity(d, d) * noise_variance;
        let offset = DVector::from_vec(m.offset());
        MeanPosterior {
            target: DVector::from_column_slice(value) + offset * scale,
            scale,
            k: k.cholesky().expect("T·nΣ + σ²I is positive definite"),
            model,
        }
    }

    /// The likelihood's own estimate of u, (Ŝ + T·n·c)/(T·n), and its sds √diag(K)/(T·n):
    /// where chains start and how far apart, in u.
    pub fn u_estimate(&self) -> (Vec<f64>, Vec<f64>) {
        let k = self.k.l() * self.k.l().transpose();
        (
            self.target.iter().map(|t| t / self.scale).collect(),
            (0..k.nrows())
                .map(|i| k[(i, i)].sqrt() / self.scale)
                .collect(),
        )
    }

    /// θ with u(θ) = `u`.
    pub fn theta_of(&self, u: Vec<f64>) -> Vec<f64> {
        means(self.model.as_ref()).theta_of(u)
    }
}

impl LogDensity for MeanPosterior {
    fn dim(&self) -> usize {
        self.model.dim()
    }

    /// ln p(θ) − ½ rᵀK⁻¹r with r = Ŝ + T·n·c − T·n·u(θ); ∇ = ∇ln p + T·n·Jᵀ K⁻¹ r.
    fn log_density(&self, theta: &[f64], grad: &mut [f64]) -> f64 {
        let m = means(self.model.as_ref());
        let u = DVector::from_vec(m.mean(theta));
        let r = &self.target - u * self.scale;
        let k_inv_r = self.k.solve(&r);
        let value = -0.5 * r.dot(&k_inv_r) + self.model.log_prior(theta);
        if !value.is_finite() {
            return f64::NEG_INFINITY;
        }
        let mut pulled: Vec<f64> = k_inv_r.iter().map(|v| v * self.scale).collect();
        m.pull_back(theta, &mut pulled);
        self.model.grad_log_prior(theta, grad);
        for (g, p) in grad.iter_mut().zip(&pulled) {
            *g += p;
        }
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::{BananaSpec, ModelSpec};
    use crate::noise_aware::assert_gradient;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn banana() -> Arc<dyn Model> {
        ModelSpec::Banana(
            BananaSpec {
                a: 3.0,
                b: 0.5,
                m: -0.3,
                lik_var: vec![2.0, 0.5, 1.5],
                prior_var: 10.0,
                temperature: 0.7,
                true_theta: None,
                bounds: None,
            }
            .with_predictive_bounds(8.0),
        )
        .build()
        .unwrap()
    }

    #[test]
    fn the_gradient_matches_finite_differences() {
        let model = banana();
        let post = MeanPosterior::new(Arc::clone(&model), &[30.0, -12.0, 5.0], 40.0, 50);
        assert_gradient(&post, &[0.2, 0.9, -0.4], 1e-5);
    }

    /// Without noise the density is the model's exact posterior, up to a constant.
    #[test]
    fn without_noise_it_is_the_exact_posterior() {
        let model = banana();
        let data = model.simulate(&[0.2, 1.0, -0.5], 200, &mut ChaCha8Rng::seed_from_u64(3));
        let value = model
            .summaries()
            .unwrap()
            .summary(&data, &[0.0; 3], 0.0, 1.0);
        let post = MeanPosterior::new(Arc::clone(&model), &value, 0.0, 200);
        let exact = model.exact_posterior(&data).unwrap();
        let points = [[0.2, 1.0, -0.5], [0.25, 0.9, -0.45], [0.1, 1.1, -0.6]];
        let diff = |t: &[f64; 3]| post.log_density(t, &mut [0.0; 3]) - exact.log_density(t);
        let base = diff(&points[0]);
        for t in &points[1..] {
            assert!(
                (diff(t) - base).abs() < 1e-8,
                "{t:?}: {} vs {base}",
                diff(t)
            );
        }
    }
}
