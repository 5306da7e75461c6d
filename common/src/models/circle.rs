//! The circle model of Räisä 2020, Sec. 5.1: ln p(r|θ) = −a(θ1² + θ2² − r²)² with a flat
//! (improper) prior on θ ∈ R², tempering T. The posterior is a ring around the origin, hard for
//! a random walk (long and thin), with mean at the origin by symmetry.
//!
//! The thesis samples no exact reference, but one exists: with s = ‖θ‖², Σ_x (s − r²)² =
//! n(s − m)² + const, m the mean of r², so the posterior density in θ is proportional to
//! exp(−(s − m)²/(2v)), v = 1/(2Tan). In polar coordinates dθ = ½ ds dφ, so s is N(m, v)
//! truncated to s > 0 and the angle φ is uniform and independent of it.
use rand::{Rng, RngExt};
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};
use statrs::distribution::{Continuous, ContinuousCDF, Normal};

use super::{
    ExactPosterior, Model, ModelError, check_positive, check_true_theta, default_temperature,
    fingerprint_of,
};
use crate::data::Columns;

/// Circle hyperparameters as written in configuration (`kind = "circle"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CircleSpec {
    /// The likelihood's scale a > 0 (Räisä 2020, Table 5.1: 1e-5).
    pub a: f64,
    /// Tempering T of the likelihood.
    #[serde(default = "default_temperature")]
    pub temperature: f64,
    /// θ used to simulate data, whose norm is the rows' mean; (0, 3) if absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub true_theta: Option<Vec<f64>>,
}

impl CircleSpec {
    /// The thesis's circle (Räisä 2020, Table 5.1): a = 1e-5, T = 1.
    pub fn thesis() -> Self {
        CircleSpec {
            a: 1e-5,
            temperature: 1.0,
            true_theta: None,
        }
    }

    pub fn build(&self) -> Result<Circle, ModelError> {
        check_positive("a", self.a)?;
        check_positive("temperature", self.temperature)?;
        check_true_theta(&self.true_theta, 2)?;
        Ok(Circle {
            ta: self.temperature * self.a,
            spec: self.clone(),
        })
    }
}

#[derive(Clone, Debug)]
pub struct Circle {
    /// T·a: the tempered scale.
    ta: f64,
    spec: CircleSpec,
}

/// s = θ1² + θ2².
fn norm_sq(theta: &[f64]) -> f64 {
    theta[0] * theta[0] + theta[1] * theta[1]
}

impl Model for Circle {
    fn name(&self) -> &'static str {
        "circle"
    }

    fn dim(&self) -> usize {
        2
    }

    fn row_dim(&self) -> usize {
        1
    }

    fn fingerprint(&self) -> String {
        fingerprint_of(&format!(
            "circle/v1;a={:?};temperature={:?}",
            self.spec.a, self.spec.temperature
        ))
    }

    fn temperature(&self) -> f64 {
        self.spec.temperature
    }

    /// Flat: ln p(θ) = 0 everywhere (improper; the posterior is proper for any a > 0,
    /// Räisä 2020, Sec. 5.1).
    fn log_prior(&self, _theta: &[f64]) -> f64 {
        0.0
    }

    fn grad_log_prior(&self, _theta: &[f64], out: &mut [f64]) {
        out.fill(0.0);
    }

    /// A flat prior has no mode; (0, 1), the centre of the thesis's starting points, since at
    /// the origin every row's gradient vanishes and an ascent could not leave it.
    fn prior_mode(&self) -> Vec<f64> {
        vec![0.0, 1.0]
    }

    /// −T·a(s − r²)²: the thesis's log-likelihood, which has no normalising constant in r.
    fn log_lik_row(&self, theta: &[f64], row: &[f64]) -> f64 {
        let e = norm_sq(theta) - row[0] * row[0];
        -self.ta * e * e
    }

    /// ∂/∂θk = −4T·a(s − r²)·θk.
    fn grad_log_lik_row(&self, theta: &[f64], row: &[f64], out: &mut [f64]) {
        let e = norm_sq(theta) - row[0] * row[0];
        for (o, t) in out.iter_mut().zip(theta) {
            *o = -4.0 * self.ta * e * t;
        }
    }

    /// The likelihood gives no way to draw r from θ; the thesis draws r ~ N(3, 1). Here
    /// r ~ N(‖θ‖, 1), which is that at its θ = (0, 3).
    fn simulate(&self, theta: &[f64], n: usize, rng: &mut dyn Rng) -> Columns {
        let centre = norm_sq(theta).sqrt();
        let values = (0..n)
            .map(|_| {
                let z: f64 = StandardNormal.sample(&mut *rng);
                centre + z
            })
            .collect();
        Columns::from_column_major(n, 1, values).expect("finite simulated data")
    }

    /// s ~ N(m, v) truncated to s > 0, m the mean of r², v = 1/(2Tan); φ uniform (module
    /// doc). `None` without rows (the posterior is then flat and improper).
    fn exact_posterior(&self, data: &Columns) -> Option<Box<dyn ExactPosterior>> {
        let n = data.n() as f64;
        if data.n() == 0 {
            return None;
        }
        let m = data.col(0).iter().map(|r| r * r).sum::<f64>() / n;
        let sd = (2.0 * self.ta * n).recip().sqrt();
        Some(Box::new(RingPosterior::new(m, sd)?))
    }
}

/// The exact circle posterior: s = ‖θ‖² ~ N(m, sd²) truncated to s > 0, angle uniform.
struct RingPosterior {
    m: f64,
    sd: f64,
    s: Normal,
    /// P(s > 0) under the untruncated N(m, sd²).
    mass: f64,
}

impl RingPosterior {
    fn new(m: f64, sd: f64) -> Option<Self> {
        let s = Normal::new(m, sd).ok()?;
        let mass = s.sf(0.0);
        (mass > 0.0).then_some(RingPosterior { m, sd, s, mass })
    }

    /// E[s] = m + sd·φ(α)/P(s > 0), α = −m/sd (the truncated normal's mean).
    fn mean_norm_sq(&self) -> f64 {
        self.m + self.sd * self.sd * self.s.pdf(0.0) / self.mass
    }
}

impl ExactPosterior for RingPosterior {
    /// s by inverting the truncated CDF from the upper tail, Φ⁻¹ evaluated at
    /// P(s > 0)·(1 − U), accurate whether the truncation cuts much or nothing.
    fn sample(&self, rng: &mut dyn Rng) -> Vec<f64> {
        let u: f64 = rng.random();
        let z = Normal::standard().inverse_cdf(self.mass * (1.0 - u));
        let s = (self.m - self.sd * z).max(0.0);
        let phi = std::f64::consts::TAU * rng.random::<f64>();
        let t = s.sqrt();
        vec![t * phi.cos(), t * phi.sin()]
    }

    fn mean(&self) -> Vec<f64> {
        vec![0.0, 0.0]
    }

    /// Var θ1 = E[s cos²φ] = E[s]/2, the same for θ2.
    fn sd(&self) -> Vec<f64> {
        vec![(0.5 * self.mean_norm_sq()).sqrt(); 2]
    }

    /// The density in s over the area element ½ ds dφ: normalised by π·√(2π)·sd·P(s > 0).
    fn log_density(&self, theta: &[f64]) -> f64 {
        self.s.ln_pdf(norm_sq(theta)) - (std::f64::consts::PI * self.mass).ln()
    }
}
