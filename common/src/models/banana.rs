//! The banana model of Räisä 2020, Thm 5.2: prior θ ~ Ban(0, σ0² I, a, b, m) and
//! xᵢ ~ N(uᵢ, σᵢ²) with u = g⁻¹(θ) = (θ1, θ2 + a(θ1 − m)² + b, θ3, …). In u the model is a
//! conjugate Gaussian with diagonal covariances, and g⁻¹ is a shear with Jacobian 1, so the
//! tempered posterior is again a banana with a Gaussian latent u.
use nalgebra::{DMatrix, DVector};
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};

use super::mvn::MvNormal;
use super::summaries::{MeanSummaries, RowBox, Summaries, boxed_sum_summaries};
use super::{
    ExactPosterior, Model, ModelError, affine, check_finite, check_positive, check_true_theta,
    default_temperature, fingerprint_of,
};
use crate::clip::ClippedSum;
use crate::data::{ColumnSpec, Columns};

const LN_2PI: f64 = 1.837_877_066_409_345_5;

/// Banana hyperparameters as written in configuration (`kind = "banana"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BananaSpec {
    /// Curvature a of the shear.
    pub a: f64,
    #[serde(default)]
    pub b: f64,
    #[serde(default)]
    pub m: f64,
    /// Likelihood variances σᵢ², one per dimension; their number is the dimension.
    pub lik_var: Vec<f64>,
    /// Prior variance σ0² of the latent u.
    pub prior_var: f64,
    /// Tempering T of the likelihood.
    #[serde(default = "default_temperature")]
    pub temperature: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub true_theta: Option<Vec<f64>>,
    /// Public bounds [lo, hi] for each column: a party refuses rows outside them, and with
    /// them the model has summaries (the `summaries` route); none by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bounds: Option<Vec<[f64; 2]>>,
}

impl BananaSpec {
    /// This spec with bounds `k` sds of the prior predictive either side of its mean: the
    /// latent u ~ N(0, σ0²I), so column i ~ N(0, σ0² + σᵢ²). Wide enough that simulated rows
    /// never leave them, for the presets.
    pub fn with_predictive_bounds(mut self, k: f64) -> Self {
        let sd: Vec<f64> = self
            .lik_var
            .iter()
            .map(|v| (self.prior_var + v).sqrt())
            .collect();
        self.bounds = Some(RowBox::around(&vec![0.0; sd.len()], &sd, k));
        self
    }

    /// The thesis's flat banana (see [`super::ModelSpec::flat_banana`]).
    pub fn flat(d: usize) -> Self {
        let lik_var = (0..d)
            .map(|i| match i {
                0 => 20.0,
                1 => 2.5,
                _ => 1.0,
            })
            .collect();
        BananaSpec {
            a: 20.0,
            b: 0.0,
            m: 0.0,
            lik_var,
            prior_var: 1000.0,
            temperature: 1.0,
            true_theta: None,
            bounds: None,
        }
    }

    pub fn build(&self) -> Result<Banana, ModelError> {
        let d = self.lik_var.len();
        if d < 2 {
            return Err(ModelError::TooFewDimensions {
                model: "banana",
                min: 2,
                got: d,
            });
        }
        check_finite("a", &[self.a])?;
        check_finite("b", &[self.b])?;
        check_finite("m", &[self.m])?;
        for &v in &self.lik_var {
            check_positive("lik_var", v)?;
        }
        check_positive("prior_var", self.prior_var)?;
        check_positive("temperature", self.temperature)?;
        check_true_theta(&self.true_theta, d)?;
        let row_box = RowBox::declared(&self.bounds, d)?;
        Ok(Banana {
            row_box,
            shear: Shear {
                a: self.a,
                b: self.b,
                m: self.m,
            },
            tau: self.lik_var.iter().map(|v| 1.0 / v).collect(),
            lik_log_norm: -0.5 * self.lik_var.iter().map(|v| LN_2PI + v.ln()).sum::<f64>(),
            tau0: 1.0 / self.prior_var,
            temperature: self.temperature,
            spec: self.clone(),
        })
    }
}

/// g⁻¹(θ) = (θ1, θ2 + a(θ1 − m)² + b, θ3, …) of Räisä 2020, Def. 5.1, applied index by index so
/// per-row evaluation does not allocate.
#[derive(Clone, Copy, Debug)]
struct Shear {
    a: f64,
    b: f64,
    m: f64,
}

impl Shear {
    /// Component i (0-based) of u = g⁻¹(θ).
    fn u(&self, theta: &[f64], i: usize) -> f64 {
        if i == 1 {
            theta[1] + self.a * (theta[0] - self.m).powi(2) + self.b
        } else {
            theta[i]
        }
    }

    /// u = g⁻¹(θ) as a vector.
    fn g_inv(&self, theta: &[f64]) -> Vec<f64> {
        (0..theta.len()).map(|i| self.u(theta, i)).collect()
    }

    /// θ = g(u).
    fn g(&self, mut u: Vec<f64>) -> Vec<f64> {
        u[1] -= self.a * (u[0] - self.m).powi(2) + self.b;
        u
    }

    /// Chain rule through g⁻¹: given ∂f/∂u in `out`, turn it into ∂f/∂θ in place.
    fn pull_back(&self, theta: &[f64], out: &mut [f64]) {
        out[0] += out[1] * 2.0 * self.a * (theta[0] - self.m);
    }
}

#[derive(Clone, Debug)]
pub struct Banana {
    shear: Shear,
    /// Likelihood precisions τᵢ = 1/σᵢ².
    tau: Vec<f64>,
    /// Σᵢ −½ ln(2π σᵢ²), the untempered per-row normalising constant.
    lik_log_norm: f64,
    /// Prior precision τ0 = 1/σ0².
    tau0: f64,
    temperature: f64,
    /// The public box of the rows, if declared.
    row_box: Option<RowBox>,
    spec: BananaSpec,
}

impl Banana {
    /// r_x = Σᵢ T τᵢ (u′ᵢ − uᵢ) xᵢ − ½ T τᵢ (u′ᵢ − uᵢ)(u′ᵢ + uᵢ): affine in x, as (w, c).
    fn affine_ratio(&self, theta: &[f64], theta_prop: &[f64]) -> (Vec<f64>, f64) {
        let mut c = 0.0;
        let w = (0..self.tau.len())
            .map(|i| {
                let (u, up) = (self.shear.u(theta, i), self.shear.u(theta_prop, i));
                let wi = self.temperature * self.tau[i] * (up - u);
                c -= 0.5 * wi * (up + u);
                wi
            })
            .collect();
        (w, c)
    }

    /// ∇_θ T ℓ(x|θ) = Jᵀ T τ ⊙ (x − u), J the Jacobian of g⁻¹: affine in x, as (A, c) with A
    /// column by column (see [`affine::clipped_affine_grad_sum`]). Each column of A and c is
    /// a gradient in u, pulled back to θ by the same chain rule as
    /// [`Model::grad_log_lik_row`].
    fn affine_grad(&self, theta: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let d = self.dim();
        let (mut a, mut c) = (vec![0.0; d * d], vec![0.0; d]);
        for i in 0..d {
            let w = self.temperature * self.tau[i];
            a[i * d + i] = w;
            c[i] = -w * self.shear.u(theta, i);
        }
        for column in a.chunks_exact_mut(d).chain([&mut c[..]]) {
            self.shear.pull_back(theta, column);
        }
        (a, c)
    }
}

impl Model for Banana {
    fn name(&self) -> &'static str {
        "banana"
    }

    fn dim(&self) -> usize {
        self.tau.len()
    }

    fn row_dim(&self) -> usize {
        self.tau.len()
    }

    fn columns(&self) -> Vec<ColumnSpec> {
        RowBox::columns(&self.row_box, self.dim())
    }

    fn fingerprint(&self) -> String {
        let s = &self.spec;
        fingerprint_of(&format!(
            "banana/v1;a={:?};b={:?};m={:?};lik_var={:?};temperature={:?}{}",
            s.a,
            s.b,
            s.m,
            s.lik_var,
            s.temperature,
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

    /// Ban(0, σ0² I, a, b, m): N(0, σ0² I) at g⁻¹(θ), Jacobian 1 (Räisä 2020, Thm 5.2 proof).
    fn log_prior(&self, theta: &[f64]) -> f64 {
        let d = self.dim();
        let ss: f64 = (0..d).map(|i| self.shear.u(theta, i).powi(2)).sum();
        -0.5 * self.tau0 * ss + 0.5 * d as f64 * (self.tau0.ln() - LN_2PI)
    }

    /// g(0): the latent prior N(0, σ0² I) peaks at u = 0 and the shear has Jacobian 1.
    fn prior_mode(&self) -> Vec<f64> {
        self.shear.g(vec![0.0; self.dim()])
    }

    fn grad_log_prior(&self, theta: &[f64], out: &mut [f64]) {
        for (i, o) in out.iter_mut().enumerate() {
            *o = -self.tau0 * self.shear.u(theta, i);
        }
        self.shear.pull_back(theta, out);
    }

    fn log_lik_row(&self, theta: &[f64], row: &[f64]) -> f64 {
        let q: f64 = (0..self.dim())
            .map(|i| self.tau[i] * (row[i] - self.shear.u(theta, i)).powi(2))
            .sum();
        self.temperature * (self.lik_log_norm - 0.5 * q)
    }

    fn grad_log_lik_row(&self, theta: &[f64], row: &[f64], out: &mut [f64]) {
        for (i, o) in out.iter_mut().enumerate() {
            *o = self.temperature * self.tau[i] * (row[i] - self.shear.u(theta, i));
        }
        self.shear.pull_back(theta, out);
    }

    affine::affine_hot_loops!();

    fn simulate(&self, theta: &[f64], n: usize, rng: &mut dyn Rng) -> Columns {
        let mut values = Vec::with_capacity(n * self.dim());
        for (i, tau) in self.tau.iter().enumerate() {
            let (u, sd) = (self.shear.u(theta, i), tau.recip().sqrt());
            values.extend((0..n).map(|_| {
                let z: f64 = StandardNormal.sample(&mut *rng);
                u + sd * z
            }));
        }
        Columns::from_column_major(n, self.dim(), values).expect("finite simulated data")
    }

    /// Räisä 2020, Thm 5.2: u ~ N(μ, Σ) with μᵢ = T τᵢ Σx xᵢ / (T n τᵢ + τ0),
    /// Σᵢᵢ = 1 / (T n τᵢ + τ0), and θ = g(u).
    fn exact_posterior(&self, data: &Columns) -> Option<Box<dyn ExactPosterior>> {
        let n = data.n() as f64;
        let var: Vec<f64> = self
            .tau
            .iter()
            .map(|t| 1.0 / (self.temperature * n * t + self.tau0))
            .collect();
        let mean = DVector::from_fn(self.dim(), |i, _| {
            self.temperature * self.tau[i] * data.col(i).iter().sum::<f64>() * var[i]
        });
        let u = MvNormal::new(mean, DMatrix::from_diagonal(&DVector::from_vec(var)))?;
        Some(Box::new(BananaPosterior {
            u,
            shear: self.shear,
        }))
    }
}

/// Ban(μ, Σ, a, b, m) with diagonal Σ: the exact posterior of Thm 5.2.
struct BananaPosterior {
    u: MvNormal,
    shear: Shear,
}

impl ExactPosterior for BananaPosterior {
    fn sample(&self, rng: &mut dyn Rng) -> Vec<f64> {
        self.shear.g(self.u.sample(rng))
    }

    /// E[θ2] = μ2 − a(Σ11 + (μ1 − m)²) − b; the other components are μᵢ.
    fn mean(&self) -> Vec<f64> {
        let (mu, var) = (self.u.mean(), self.u.variance());
        let Shear { a, b, m } = self.shear;
        let mut mean = mu.clone();
        mean[1] = mu[1] - a * (var[0] + (mu[0] - m).powi(2)) - b;
        mean
    }

    /// Var θ2 = Σ22 + a² Var((u1 − m)²) = Σ22 + a² (4 (μ1 − m)² Σ11 + 2 Σ11²), by the
    /// Gaussian moments of u1 − m ~ N(μ1 − m, Σ11) and independence of u1 and u2.
    fn sd(&self) -> Vec<f64> {
        let (mu, mut var) = (self.u.mean(), self.u.variance());
        let (a, nu) = (self.shear.a, mu[0] - self.shear.m);
        var[1] += a * a * (4.0 * nu * nu * var[0] + 2.0 * var[0] * var[0]);
        var.into_iter().map(f64::sqrt).collect()
    }

    /// The latent Gaussian density at g⁻¹(θ) (the shear has Jacobian 1).
    fn log_density(&self, theta: &[f64]) -> f64 {
        self.u.log_density(&self.shear.g_inv(theta))
    }
}

/// With a declared box, S = T·Σ(x − c) is sufficient: the rows enter only through Σx, and
/// the squares in (x − u)² are free of θ.
impl Summaries for Banana {
    boxed_sum_summaries!();
}

impl MeanSummaries for Banana {
    fn mean(&self, theta: &[f64]) -> Vec<f64> {
        self.shear.g_inv(theta)
    }

    fn pull_back(&self, theta: &[f64], grad: &mut [f64]) {
        self.shear.pull_back(theta, grad);
    }

    fn theta_of(&self, u: Vec<f64>) -> Vec<f64> {
        self.shear.g(u)
    }

    fn row_covariance(&self) -> DMatrix<f64> {
        DMatrix::from_diagonal(&DVector::from_vec(
            self.tau.iter().map(|t| t.recip()).collect(),
        ))
    }

    fn offset(&self) -> Vec<f64> {
        self.row_box
            .as_ref()
            .expect("summaries need the box")
            .centre()
    }
}
