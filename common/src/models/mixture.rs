//! The two-component Gaussian mixture of Welling & Teh 2011, used as the GMM experiment of
//! Heikkilä et al. 2019: prior θⱼ ~ N(0, σⱼ²) and x ~ ½ N(θ1, σx²) + ½ N(θ1 + θ2, σx²), with
//! tempering T. Not conjugate, so there is no closed-form posterior; [`super::GridPosterior`]
//! gives a numerical reference in its two dimensions.
//!
//! The likelihood is invariant under the relabelling (θ1, θ2) ↦ (θ1 + θ2, −θ2), which swaps
//! the components, so the posterior is bimodal; only the prior tells the modes apart, and
//! weakly: at (0, 1) and (1, −1) its log ratio is 1/(2σ1²) = 0.05 with the default σ1² = 10.
use rand::{Rng, RngExt};
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};

use super::{
    ExactPosterior, Model, ModelError, check_len, check_positive, check_true_theta,
    default_temperature, fingerprint_of,
};
use crate::clip::ClippedSum;
use crate::data::Columns;

const LN_2PI: f64 = 1.837_877_066_409_345_5;

/// Mixture hyperparameters as written in configuration (`kind = "mixture"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixtureSpec {
    /// Prior variances [σ1², σ2²] of θ1 and θ2.
    pub prior_var: Vec<f64>,
    /// Variance σx² of each mixture component.
    pub lik_var: f64,
    /// Tempering T of the likelihood.
    #[serde(default = "default_temperature")]
    pub temperature: f64,
    /// θ used to simulate data; (0, 1) if absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub true_theta: Option<Vec<f64>>,
}

impl MixtureSpec {
    /// The settings of Heikkilä et al. 2019 (after Welling & Teh 2011): σ1² = 10, σ2² = 1,
    /// σx² = 2, tempered to an effective sample size `n0` out of `n` rows, T = n0 / n.
    /// `n = 0` gives T = ∞, which [`MixtureSpec::build`] rejects.
    pub fn heikkila(n0: f64, n: usize) -> Self {
        MixtureSpec {
            prior_var: vec![10.0, 1.0],
            lik_var: 2.0,
            temperature: n0 / n as f64,
            true_theta: None,
        }
    }

    pub fn build(&self) -> Result<Mixture, ModelError> {
        check_len("prior_var", 2, self.prior_var.len())?;
        for &v in &self.prior_var {
            check_positive("prior_var", v)?;
        }
        check_positive("lik_var", self.lik_var)?;
        check_positive("temperature", self.temperature)?;
        check_true_theta(&self.true_theta, 2)?;
        let (v1, v2) = (self.prior_var[0], self.prior_var[1]);
        Ok(Mixture {
            tau0: [1.0 / v1, 1.0 / v2],
            prior_log_norm: -(LN_2PI + 0.5 * (v1.ln() + v2.ln())),
            tau: 1.0 / self.lik_var,
            lik_log_norm: -std::f64::consts::LN_2 - 0.5 * (LN_2PI + self.lik_var.ln()),
            temperature: self.temperature,
            spec: self.clone(),
        })
    }
}

#[derive(Clone, Debug)]
pub struct Mixture {
    /// Prior precisions 1/σⱼ².
    tau0: [f64; 2],
    /// −ln(2π σ1 σ2), the prior's normalising constant.
    prior_log_norm: f64,
    /// Component precision τ = 1/σx².
    tau: f64,
    /// ln ½ − ½ ln(2π σx²): the weight and normalising constant of one component.
    lik_log_norm: f64,
    temperature: f64,
    spec: MixtureSpec,
}

/// ln(eᵃ + eᵇ) without overflow. Both −∞ gives −∞ (a row that neither component can
/// explain), where the generic formula would give NaN from −∞ − (−∞); a NaN argument
/// propagates.
#[inline(always)]
fn log_add_exp(a: f64, b: f64) -> f64 {
    if a == f64::NEG_INFINITY && b == f64::NEG_INFINITY {
        return a;
    }
    a.max(b) + (-(a - b).abs()).exp().ln_1p()
}

impl Mixture {
    /// The two components' exponents (a, b) = (−τ(x − θ1)²/2, −τ(x − θ1 − θ2)²/2).
    #[inline(always)]
    fn exponents(&self, theta: &[f64], x: f64) -> (f64, f64) {
        let d = x - theta[0];
        let e = d - theta[1];
        (-0.5 * self.tau * d * d, -0.5 * self.tau * e * e)
    }

    /// ln p(x|θ) − lik_log_norm, untempered: all of the log-likelihood that depends on θ.
    #[inline(always)]
    fn log_kernel(&self, theta: &[f64], x: f64) -> f64 {
        let (a, b) = self.exponents(theta, x);
        log_add_exp(a, b)
    }
}

impl Model for Mixture {
    fn name(&self) -> &'static str {
        "mixture"
    }

    fn dim(&self) -> usize {
        2
    }

    fn row_dim(&self) -> usize {
        1
    }

    fn fingerprint(&self) -> String {
        fingerprint_of(&format!(
            "mixture/v1;lik_var={:?};temperature={:?}",
            self.spec.lik_var, self.spec.temperature
        ))
    }

    fn temperature(&self) -> f64 {
        self.temperature
    }

    fn log_prior(&self, theta: &[f64]) -> f64 {
        self.prior_log_norm
            - 0.5 * (self.tau0[0] * theta[0] * theta[0] + self.tau0[1] * theta[1] * theta[1])
    }

    fn prior_mode(&self) -> Vec<f64> {
        vec![0.0; 2]
    }

    fn grad_log_prior(&self, theta: &[f64], out: &mut [f64]) {
        out[0] = -self.tau0[0] * theta[0];
        out[1] = -self.tau0[1] * theta[1];
    }

    fn log_lik_row(&self, theta: &[f64], row: &[f64]) -> f64 {
        self.temperature * (self.lik_log_norm + self.log_kernel(theta, row[0]))
    }

    /// With w = eᵇ/(eᵃ + eᵇ) the second component's responsibility for x:
    /// ∂ℓ/∂θ1 = τ(x − θ1 − wθ2) and ∂ℓ/∂θ2 = wτ(x − θ1 − θ2), times T.
    fn grad_log_lik_row(&self, theta: &[f64], row: &[f64], out: &mut [f64]) {
        let (a, b) = self.exponents(theta, row[0]);
        let w = (b - log_add_exp(a, b)).exp();
        let d = row[0] - theta[0];
        let t_tau = self.temperature * self.tau;
        out[0] = t_tau * (d - w * theta[1]);
        out[1] = t_tau * w * (d - theta[1]);
    }

    /// r_x = T (ln(e^{a′} + e^{b′}) − ln(eᵃ + eᵇ)): not affine in x, so one pass over the
    /// column evaluating both log-sums. The normalising constant cancels.
    fn clipped_llr_sum(
        &self,
        data: &Columns,
        theta: &[f64],
        theta_prop: &[f64],
        bound: f64,
    ) -> ClippedSum {
        assert_eq!(data.d(), self.row_dim(), "data columns");
        assert!(bound >= 0.0, "clip bound must be non-negative, got {bound}");
        let t = self.temperature;
        let mut out = ClippedSum::default();
        for &x in data.col(0) {
            out.add(
                t * (self.log_kernel(theta_prop, x) - self.log_kernel(theta, x)),
                bound,
            );
        }
        out
    }

    /// Each row picks a component with probability ½, then adds N(0, σx²) noise.
    fn simulate(&self, theta: &[f64], n: usize, rng: &mut dyn Rng) -> Columns {
        let sd = self.spec.lik_var.sqrt();
        let values = (0..n)
            .map(|_| {
                let mean = if rng.random_bool(0.5) {
                    theta[0] + theta[1]
                } else {
                    theta[0]
                };
                let z: f64 = StandardNormal.sample(&mut *rng);
                mean + sd * z
            })
            .collect();
        Columns::from_column_major(n, 1, values).expect("finite simulated data")
    }

    /// No closed form; see [`super::GridPosterior`].
    fn exact_posterior(&self, _data: &Columns) -> Option<Box<dyn ExactPosterior>> {
        None
    }
}
