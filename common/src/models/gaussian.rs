//! Gaussian likelihood with known covariance: x ~ N(θ, Σ), prior θ ~ N(m0, σ0² I), tempering
//! T (Räisä 2020, Sec. 5.1; the "correlated Gauss" experiment). Conjugate, so the exact
//! posterior is Gaussian.
use nalgebra::{DMatrix, DVector};
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};

use super::mvn::MvNormal;
use super::summaries::{MeanSummaries, RowBox, Summaries, boxed_sum_summaries};
use super::{
    ExactPosterior, Model, ModelError, affine, check_finite, check_len, check_positive,
    check_true_theta, default_temperature, fingerprint_of,
};
use crate::clip::ClippedSum;
use crate::data::{ColumnSpec, Columns};

const LN_2PI: f64 = 1.837_877_066_409_345_5;

/// Gaussian-model hyperparameters as written in configuration (`kind = "gaussian"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GaussianSpec {
    /// Likelihood covariance Σ, row by row; its size is the dimension.
    pub cov: Vec<Vec<f64>>,
    /// Prior mean m0; zero if absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prior_mean: Option<Vec<f64>>,
    /// Prior variance σ0².
    pub prior_var: f64,
    #[serde(default = "default_temperature")]
    pub temperature: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub true_theta: Option<Vec<f64>>,
    /// Public bounds [lo, hi] for each column: a party refuses rows outside them, and with
    /// them the model has summaries (the `summaries` route); none by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bounds: Option<Vec<[f64; 2]>>,
}

impl GaussianSpec {
    /// This spec with bounds `k` sds of the prior predictive N(m0, σ0²I + Σ) either side of
    /// its mean: wide enough that simulated rows never leave them, for the presets.
    pub fn with_predictive_bounds(mut self, k: f64) -> Self {
        let d = self.cov.len();
        let mean = self.prior_mean.clone().unwrap_or_else(|| vec![0.0; d]);
        let sd: Vec<f64> = (0..d)
            .map(|j| (self.prior_var + self.cov[j][j]).sqrt())
            .collect();
        self.bounds = Some(RowBox::around(&mean, &sd, k));
        self
    }

    pub fn build(&self) -> Result<Gaussian, ModelError> {
        let d = self.cov.len();
        if d < 1 {
            return Err(ModelError::TooFewDimensions {
                model: "gaussian",
                min: 1,
                got: d,
            });
        }
        for row in &self.cov {
            check_len("cov row", d, row.len())?;
            check_finite("cov", row)?;
        }
        for i in 0..d {
            for j in 0..i {
                let (a, b) = (self.cov[i][j], self.cov[j][i]);
                if (a - b).abs() > 1e-12 * a.abs().max(b.abs()) {
                    return Err(ModelError::NotSymmetric { i, j, a, b });
                }
            }
        }
        let prior_mean = self.prior_mean.clone().unwrap_or_else(|| vec![0.0; d]);
        check_len("prior_mean", d, prior_mean.len())?;
        check_finite("prior_mean", &prior_mean)?;
        check_positive("prior_var", self.prior_var)?;
        check_positive("temperature", self.temperature)?;
        check_true_theta(&self.true_theta, d)?;
        let row_box = RowBox::declared(&self.bounds, d)?;

        let cov = DMatrix::from_fn(d, d, |i, j| self.cov[i][j]);
        let chol = cov.cholesky().ok_or(ModelError::NotPositiveDefinite)?;
        let log_det = 2.0
            * chol
                .l_dirty()
                .diagonal()
                .iter()
                .map(|l| l.ln())
                .sum::<f64>();
        Ok(Gaussian {
            precision: chol.inverse(),
            chol_l: chol.unpack(),
            lik_log_norm: -0.5 * (d as f64 * LN_2PI + log_det),
            prior_mean,
            tau0: 1.0 / self.prior_var,
            temperature: self.temperature,
            row_box,
            spec: self.clone(),
        })
    }
}

#[derive(Clone, Debug)]
pub struct Gaussian {
    /// Σ⁻¹.
    precision: DMatrix<f64>,
    /// Lower Cholesky factor of Σ, for simulation.
    chol_l: DMatrix<f64>,
    /// −½ ln det(2πΣ), the untempered per-row normalising constant.
    lik_log_norm: f64,
    prior_mean: Vec<f64>,
    /// Prior precision 1/σ0².
    tau0: f64,
    temperature: f64,
    /// The public box of the rows, if declared.
    row_box: Option<RowBox>,
    spec: GaussianSpec,
}

impl Gaussian {
    /// (Σ⁻¹ v)ᵢ with v = a − b, without allocating.
    fn precision_times_diff(&self, a: &[f64], b: &[f64], i: usize) -> f64 {
        (0..self.dim())
            .map(|j| self.precision[(i, j)] * (a[j] - b[j]))
            .sum()
    }

    /// r_x = T (θ′ − θ)ᵀ Σ⁻¹ x − ½ T (θ′ − θ)ᵀ Σ⁻¹ (θ′ + θ): affine in x, as (w, c).
    fn affine_ratio(&self, theta: &[f64], theta_prop: &[f64]) -> (Vec<f64>, f64) {
        let d = self.dim();
        let w: Vec<f64> = (0..d)
            .map(|i| self.temperature * self.precision_times_diff(theta_prop, theta, i))
            .collect();
        let c = -0.5
            * (0..d)
                .map(|i| w[i] * (theta_prop[i] + theta[i]))
                .sum::<f64>();
        (w, c)
    }

    /// ∇_θ T ℓ(x|θ) = T Σ⁻¹ x − T Σ⁻¹ θ: affine in x, as (A, c) with A = T Σ⁻¹ column by column
    /// (see [`affine::clipped_affine_grad_sum`]; nalgebra stores Σ⁻¹ column by column too).
    fn affine_grad(&self, theta: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let d = self.dim();
        let a = self
            .precision
            .iter()
            .map(|p| self.temperature * p)
            .collect();
        let zero = vec![0.0; d];
        let c = (0..d)
            .map(|i| self.temperature * self.precision_times_diff(&zero, theta, i))
            .collect();
        (a, c)
    }
}

impl Model for Gaussian {
    fn name(&self) -> &'static str {
        "gaussian"
    }

    fn dim(&self) -> usize {
        self.prior_mean.len()
    }

    fn row_dim(&self) -> usize {
        self.prior_mean.len()
    }

    fn columns(&self) -> Vec<ColumnSpec> {
        RowBox::columns(&self.row_box, self.dim())
    }

    fn fingerprint(&self) -> String {
        fingerprint_of(&format!(
            "gaussian/v1;cov={:?};temperature={:?}{}",
            self.spec.cov,
            self.spec.temperature,
            self.row_box
                .as_ref()
                .map_or(String::new(), RowBox::fingerprint)
        ))
    }

    fn summaries(&self) -> Option<&dyn Summaries> {
        self.row_box.as_ref().map(|_| self as &dyn Summaries)
    }

    fn temperature(&self) -> f64 {
        self.temperature
    }

    fn prior_mode(&self) -> Vec<f64> {
        self.prior_mean.clone()
    }

    fn log_prior(&self, theta: &[f64]) -> f64 {
        let ss: f64 = theta
            .iter()
            .zip(&self.prior_mean)
            .map(|(t, m)| (t - m).powi(2))
            .sum();
        -0.5 * self.tau0 * ss + 0.5 * self.dim() as f64 * (self.tau0.ln() - LN_2PI)
    }

    fn grad_log_prior(&self, theta: &[f64], out: &mut [f64]) {
        for ((o, t), m) in out.iter_mut().zip(theta).zip(&self.prior_mean) {
            *o = -self.tau0 * (t - m);
        }
    }

    fn log_lik_row(&self, theta: &[f64], row: &[f64]) -> f64 {
        let q: f64 = (0..self.dim())
            .map(|i| (row[i] - theta[i]) * self.precision_times_diff(row, theta, i))
            .sum();
        self.temperature * (self.lik_log_norm - 0.5 * q)
    }

    fn grad_log_lik_row(&self, theta: &[f64], row: &[f64], out: &mut [f64]) {
        for (i, o) in out.iter_mut().enumerate() {
            *o = self.temperature * self.precision_times_diff(row, theta, i);
        }
    }

    affine::affine_hot_loops!();

    fn simulate(&self, theta: &[f64], n: usize, rng: &mut dyn Rng) -> Columns {
        let d = self.dim();
        let mut values = vec![0.0; n * d];
        let mut z = DVector::zeros(d);
        for i in 0..n {
            z.iter_mut()
                .for_each(|z| *z = StandardNormal.sample(&mut *rng));
            let x = &self.chol_l * &z;
            for j in 0..d {
                values[j * n + i] = theta[j] + x[j];
            }
        }
        Columns::from_column_major(n, d, values).expect("finite simulated data")
    }

    /// Conjugate update: Σ_n = (σ0⁻² I + nT Σ⁻¹)⁻¹, μ_n = Σ_n (σ0⁻² m0 + T Σ⁻¹ Σ_x x).
    fn exact_posterior(&self, data: &Columns) -> Option<Box<dyn ExactPosterior>> {
        let (d, n) = (self.dim(), data.n() as f64);
        let t = self.temperature;
        let post_precision = DMatrix::identity(d, d) * self.tau0 + &self.precision * (n * t);
        let cov = post_precision.cholesky()?.inverse();
        let sums = DVector::from_fn(d, |j, _| data.col(j).iter().sum::<f64>());
        let prior_mean = DVector::from_column_slice(&self.prior_mean);
        let mean = &cov * (prior_mean * self.tau0 + &self.precision * sums * t);
        Some(Box::new(MvNormal::new(mean, cov)?))
    }
}

/// With a declared box, S = T·Σ(x − c) is sufficient: u = θ.
impl Summaries for Gaussian {
    boxed_sum_summaries!();
}

impl MeanSummaries for Gaussian {
    fn mean(&self, theta: &[f64]) -> Vec<f64> {
        theta.to_vec()
    }

    fn pull_back(&self, _theta: &[f64], _grad: &mut [f64]) {}

    fn theta_of(&self, u: Vec<f64>) -> Vec<f64> {
        u
    }

    fn row_covariance(&self) -> DMatrix<f64> {
        DMatrix::from_fn(self.dim(), self.dim(), |i, j| self.spec.cov[i][j])
    }

    fn offset(&self) -> Vec<f64> {
        self.row_box
            .as_ref()
            .expect("summaries need the box")
            .centre()
    }
}
