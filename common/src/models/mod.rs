//! Statistical models (DESIGN §3 "Models", Räisä 2020, Sec. 5.1). A model knows its prior, its
//! tempered per-row log-likelihood and gradients, the party's clipped log-ratio sum, how to
//! simulate data, and, where one exists, its exact posterior (the reference for tests and
//! for MMD against DP chains).
use std::sync::Arc;

use rand::Rng;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::clip::ClippedSum;
use crate::data::{ColumnSpec, Columns};

pub mod affine;
mod banana;
mod circle;
mod gaussian;
mod glm;
mod grid;
mod mixture;
mod mvn;
mod sufficient;
pub mod summaries;

pub use banana::{Banana, BananaSpec};
pub use circle::{Circle, CircleSpec};
pub use gaussian::{Gaussian, GaussianSpec};
pub use glm::{Family, Glm, GlmColumn, GlmSpec, prior as glm_prior};
pub use grid::{GridError, GridPosterior, MAX_EDGE_MASS};
pub use mixture::{Mixture, MixtureSpec};
pub use sufficient::{SufficientStatistics, noisy_log_lik_ratio};
pub use summaries::{MeanSummaries, QuadraticSummaries, Reading, RowBox, Summaries};

/// A Bayesian model with a tempered likelihood: the target is p(θ) · Π_x p(x|θ)^T.
/// Object safe: parties and coordinator hold an `Arc<dyn Model>`.
///
/// To write one (for what a `[model]` table cannot express; `party/examples/custom_model/`
/// is a complete one): implement the required methods, the prior and each row's tempered
/// log-likelihood and gradient. A party's rows arrive as [`Columns`], column-major (column j
/// is the data source's `x{j+1}`, one slice of n values), and the provided hot loops go
/// row by row through [`Model::log_lik_row`] and [`Model::grad_log_lik_row`]: correct, and
/// fast enough for small data. For speed, override [`Model::clipped_llr_sum`] (and
/// [`Model::clipped_grad_sum`] for DP HMC) with a pass down the columns, no row copies and
/// the normalising constant cancelled, clipping each row's term with
/// [`ClippedSum::add`]; [`clipped_llr_sum_by_rows`] and [`clipped_grad_sum_by_rows`] are the
/// defaults to test an override against. A row may hold any finite number: a clipped term
/// or gradient is bounded whatever its row, so a non-finite ratio is fine (it is clipped),
/// and nothing may panic on row values. The parties and the coordinator must build the same
/// model: [`Model::fingerprint`] is how they check.
pub trait Model: Send + Sync + std::fmt::Debug {
    /// The model's kind, as in [`ModelSpec`]'s `kind` for a built-in one (`"banana"`,
    /// `"glm"`, …); a custom model names itself.
    fn name(&self) -> &'static str;
    /// Dimension of θ.
    fn dim(&self) -> usize;
    /// Values per data row.
    fn row_dim(&self) -> usize;
    /// The columns a party reads for each row, in order (`row_dim` of them), with their
    /// public bounds if the model declares any. The default: `x1 … xd`, unbounded.
    fn columns(&self) -> Vec<ColumnSpec> {
        ColumnSpec::numbered(self.row_dim())
    }
    /// What each coefficient of θ is called in outputs (summary.json, the draws' header, the
    /// Python package's InferenceData), so an analyst reads names rather than positions.
    /// The default: `theta.1 … theta.d`, the draws' column names.
    fn parameter_names(&self) -> Vec<String> {
        (1..=self.dim()).map(|j| format!("theta.{j}")).collect()
    }
    /// Stable hex digest of the likelihood hyperparameters (temperature included; the prior
    /// is not, since parties never evaluate it). Parties and coordinator compare it to check
    /// that they compute the same likelihood.
    fn fingerprint(&self) -> String;
    /// The tempering T of the likelihood (1 for the plain posterior).
    fn temperature(&self) -> f64;
    fn log_prior(&self, theta: &[f64]) -> f64;
    /// ∇ ln p(θ), written into `out` (overwritten, length `dim`).
    fn grad_log_prior(&self, theta: &[f64], out: &mut [f64]);
    /// The prior's mode: public, so it is where the private initialiser starts its ascent.
    fn prior_mode(&self) -> Vec<f64>;
    /// Each coefficient's sd where the prior is independent normals (the GLMs), so that the
    /// outputs can state the prior a run used, its default included.
    fn prior_sd(&self) -> Option<Vec<f64>> {
        None
    }
    /// T · ln p(x|θ), normalising constant included.
    fn log_lik_row(&self, theta: &[f64], row: &[f64]) -> f64;
    /// ∇_θ T · ln p(x|θ), written into `out` (overwritten, length `dim`).
    fn grad_log_lik_row(&self, theta: &[f64], row: &[f64], out: &mut [f64]);
    /// The data columns that the per-row ratio ℓ(x|θ′) − ℓ(x|θ) depends on, when fewer than
    /// all: with one-component proposals θ and θ′ differ in one coordinate, and a row's ratio
    /// often depends on only the columns that coordinate touches (the banana's θⱼ, j ≥ 3,
    /// touches column j alone). The row-by-row defaults of [`Model::clipped_llr_sum`] and
    /// [`Model::clipped_llr_terms`] then read only these columns and pass the others as 0,
    /// so a model that returns `Some` must give the same ratio whatever the other columns
    /// hold. `None` (the default): every column. Public inputs only, like the ratio's clip.
    fn ratio_columns(&self, _theta: &[f64], _theta_prop: &[f64]) -> Option<Vec<usize>> {
        None
    }
    /// The party's hot loop: Σ_x clip(T·ℓ(x|θ′) − T·ℓ(x|θ), ±bound) over all rows of `data`.
    /// `bound` applies to the tempered term: a clip b on the untempered ratio is `T·b` here,
    /// since clip(T·r, T·b) = T·clip(r, b). The default is [`clipped_llr_sum_by_rows`], row
    /// by row through [`Model::log_lik_row`] over [`Model::ratio_columns`]; the built-in
    /// models override it with one pass per column (reading only the columns the ratio
    /// depends on, the affine ones only those with a non-zero weight).
    /// Panics if `data` has the wrong number of columns (validate data when loading it).
    fn clipped_llr_sum(
        &self,
        data: &Columns,
        theta: &[f64],
        theta_prop: &[f64],
        bound: f64,
    ) -> ClippedSum {
        clipped_llr_sum_by_rows(self, data, theta, theta_prop, bound)
    }
    /// Each row's clipped term clip(T·ℓ(x|θ′) − T·ℓ(x|θ), ±bound), written into `out` (one
    /// entry per row of `data`): the minibatch variants estimate their batch's variance from
    /// these. The default goes row by row through [`Model::log_lik_row`] over
    /// [`Model::ratio_columns`]; a model with a faster form of the ratio overrides it.
    /// Panics if `out` has the wrong length.
    fn clipped_llr_terms(
        &self,
        data: &Columns,
        theta: &[f64],
        theta_prop: &[f64],
        bound: f64,
        out: &mut [f64],
    ) {
        assert_eq!(out.len(), data.n(), "one term per row");
        for_each_ratio(self, data, theta, theta_prop, |i, r| {
            out[i] = crate::clip::clip(r, bound);
        });
    }
    /// Σ_x clip_b(∇_θ T·ℓ(x|θ)) over the rows of `data`, each row's tempered gradient scaled
    /// to norm at most `bound` by [`crate::clip::clip_norm`], written into `out` (length
    /// `dim`); returns how many rows the clip changed (local diagnostics only, never
    /// released). `bound` applies to the tempered gradient: a clip b_g on the untempered one
    /// is `T·b_g` here. The default is [`clipped_grad_sum_by_rows`]; a model with a faster
    /// form overrides it.
    fn clipped_grad_sum(&self, data: &Columns, theta: &[f64], bound: f64, out: &mut [f64]) -> u64 {
        clipped_grad_sum_by_rows(self, data, theta, bound, out)
    }
    /// A public bound on the untempered |ℓ(x|θ′) − ℓ(x|θ)| over every row the model admits
    /// (those within its [`Model::columns`]' bounds), from θ, θ′ and the hyperparameters
    /// alone; `None` (the default) where the model has none. A party clips each row's ratio
    /// at the smaller of this and the run's clip·‖θ′ − θ‖: where this is the smaller, the
    /// clip never binds, and the noise, calibrated to the smaller sensitivity, is smaller at
    /// the same privacy cost (the noise multiplier is unchanged).
    fn ratio_bound(&self, _theta: &[f64], _theta_prop: &[f64]) -> Option<f64> {
        None
    }
    /// A public bound on the untempered ‖∇_θ ℓ(x|θ)‖ over every row the model admits, as
    /// [`Model::ratio_bound`] is for the ratio: a party clips each row's gradient at the
    /// smaller of this and the run's gradient clip.
    fn gradient_bound(&self, _theta: &[f64]) -> Option<f64> {
        None
    }
    /// The model as an exponential family in its rows, if it is one ([`SufficientStatistics`]:
    /// the `sufficient-statistics` variant); `None` (the default) where it is not.
    fn sufficient_statistics(&self) -> Option<&dyn SufficientStatistics> {
        None
    }
    /// The model's summaries ([`Summaries`]: the `summaries` route), if it has them; `None`
    /// (the default) where it has none.
    fn summaries(&self) -> Option<&dyn Summaries> {
        None
    }
    /// `n` rows drawn from the (untempered) likelihood p(x|θ).
    fn simulate(&self, theta: &[f64], n: usize, rng: &mut dyn Rng) -> Columns;
    /// The exact tempered posterior given `data`, if the model has a closed form.
    fn exact_posterior(&self, data: &Columns) -> Option<Box<dyn ExactPosterior>>;
}

/// [`Model::clipped_llr_sum`] row by row through [`Model::log_lik_row`], reading only the
/// columns of [`Model::ratio_columns`]: the trait's default, public so that tests and
/// benchmarks can hold a model's faster override against it.
pub fn clipped_llr_sum_by_rows<M: Model + ?Sized>(
    model: &M,
    data: &Columns,
    theta: &[f64],
    theta_prop: &[f64],
    bound: f64,
) -> ClippedSum {
    assert_eq!(data.d(), model.row_dim(), "data columns");
    assert!(bound >= 0.0, "clip bound must be non-negative, got {bound}");
    let mut out = ClippedSum::default();
    for_each_ratio(model, data, theta, theta_prop, |_, r| out.add(r, bound));
    out
}

/// Calls `each(i, r_i)` with row i's ratio T·ℓ(x|θ′) − T·ℓ(x|θ), in row order, reading only
/// the columns of [`Model::ratio_columns`] (the others stay 0 in the row buffer).
fn for_each_ratio<M: Model + ?Sized>(
    model: &M,
    data: &Columns,
    theta: &[f64],
    theta_prop: &[f64],
    mut each: impl FnMut(usize, f64),
) {
    let columns: Vec<(usize, &[f64])> = model
        .ratio_columns(theta, theta_prop)
        .unwrap_or_else(|| (0..data.d()).collect())
        .into_iter()
        .map(|j| (j, data.col(j)))
        .collect();
    let mut row = vec![0.0; data.d()];
    for i in 0..data.n() {
        for &(j, col) in &columns {
            row[j] = col[i];
        }
        each(
            i,
            model.log_lik_row(theta_prop, &row) - model.log_lik_row(theta, &row),
        );
    }
}

/// [`Model::clipped_grad_sum`] row by row through [`Model::grad_log_lik_row`]: the trait's
/// default, public so that tests and benchmarks can hold a model's faster override against it.
pub fn clipped_grad_sum_by_rows<M: Model + ?Sized>(
    model: &M,
    data: &Columns,
    theta: &[f64],
    bound: f64,
    out: &mut [f64],
) -> u64 {
    assert_eq!(out.len(), model.dim(), "one entry per parameter");
    sum_clipped_rows(data, bound, out, |row, g| {
        model.grad_log_lik_row(theta, row, g)
    })
}

/// Σ_x clip_norm(grad(x), bound) over the rows of `data` into `out` (whose length is the
/// gradient's), and how many rows the clip changed: the plain loop, one row copy and one
/// [`crate::clip::clip_norm`] per row.
fn sum_clipped_rows(
    data: &Columns,
    bound: f64,
    out: &mut [f64],
    mut grad: impl FnMut(&[f64], &mut [f64]),
) -> u64 {
    out.fill(0.0);
    let (mut row, mut g) = (vec![0.0; data.d()], vec![0.0; out.len()]);
    let mut clipped = 0;
    for i in 0..data.n() {
        data.row_into(i, &mut row);
        grad(&row, &mut g);
        clipped += u64::from(crate::clip::clip_norm(&mut g, bound));
        for (o, gi) in out.iter_mut().zip(&g) {
            *o += gi;
        }
    }
    clipped
}

/// An exact posterior: a reference sample for accuracy measures and closed-form moments.
pub trait ExactPosterior: Send + Sync {
    fn sample(&self, rng: &mut dyn Rng) -> Vec<f64>;
    fn mean(&self) -> Vec<f64>;
    /// Marginal standard deviations.
    fn sd(&self) -> Vec<f64>;
    /// Normalised log density at θ.
    fn log_density(&self, theta: &[f64]) -> f64;
}

/// Why a model specification was rejected.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum ModelError {
    #[error("{field} must be positive and finite, got {value}")]
    NotPositive { field: &'static str, value: f64 },
    #[error("{field} must be finite, got {value}")]
    NotFinite { field: &'static str, value: f64 },
    #[error("{field} has length {got}, expected {expected}")]
    LengthMismatch {
        field: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("the {model} model needs dimension at least {min}, got {got}")]
    TooFewDimensions {
        model: &'static str,
        min: usize,
        got: usize,
    },
    #[error("cov must be symmetric: cov[{i}][{j}] = {a} but cov[{j}][{i}] = {b}")]
    NotSymmetric { i: usize, j: usize, a: f64, b: f64 },
    #[error("cov is not positive definite")]
    NotPositiveDefinite,
    #[error(
        "column name {name:?} is not a plain identifier (ASCII letters, digits and _, not starting with a digit)"
    )]
    ColumnName { name: String },
    #[error("column {name} is named twice")]
    DuplicateColumn { name: String },
    #[error("column {column} needs public bounds = [lo, hi]")]
    MissingBounds { column: String },
    #[error("column {column}: bounds [{lo}, {hi}] must be finite with lo < hi")]
    Bounds { column: String, lo: f64, hi: f64 },
    #[error("the {family} family: {message}")]
    Family {
        family: &'static str,
        message: String,
    },
}

/// A model as written in configuration files, e.g. in TOML
///
/// ```toml
/// [model]
/// kind = "banana"
/// a = 20.0
/// lik_var = [20.0, 2.5]   # σᵢ², one per dimension
/// prior_var = 1000.0      # σ0²
/// # optional: b = 0.0, m = 0.0, temperature = 1.0, true_theta = [0.0, 3.0]
/// ```
///
/// or the Gaussian mixture of Heikkilä et al. 2019
///
/// ```toml
/// [model]
/// kind = "mixture"
/// prior_var = [10.0, 1.0]   # σ1², σ2²
/// lik_var = 2.0             # σx²
/// # optional: temperature = 1.0, true_theta = [0.0, 1.0]
/// ```
///
/// or a generalised linear model over the party's own named columns (see [`GlmSpec`])
///
/// ```toml
/// [model]
/// kind = "glm"
/// family = "logistic"                    # or "gaussian" (with noise_sd) or "poisson"
/// features = [{ name = "age", bounds = [18.0, 90.0] }, { name = "dose", bounds = [0.0, 5.0] }]
/// label = { name = "outcome" }           # bounds required for gaussian and poisson
/// prior_sd = [10.0]                      # one sd for every coefficient, or one each
/// # optional: intercept = true, prior_mean, noise_sd, temperature = 1.0, true_theta
/// or the circle of Räisä 2020, Sec. 5.1 (flat prior; one column `x1`, the observed r)
///
/// ```toml
/// [model]
/// kind = "circle"
/// a = 1e-5
/// # optional: temperature = 1.0, true_theta = [0.0, 3.0]
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ModelSpec {
    Gaussian(GaussianSpec),
    Banana(BananaSpec),
    Mixture(MixtureSpec),
    Glm(GlmSpec),
    Circle(CircleSpec),
}

impl ModelSpec {
    /// Thesis "flat banana" (Räisä 2020, Table 5.1): a = 20, b = m = 0, σ1² = 20, σ2² = 2.5,
    /// σᵢ² = 1 for i > 2, σ0² = 1000, T = 1.
    pub fn flat_banana(d: usize) -> Self {
        ModelSpec::Banana(BananaSpec::flat(d))
    }

    /// The flat banana tempered to an effective sample size of 1000: T = 1000 / n.
    pub fn tempered_banana(d: usize, n: usize) -> Self {
        ModelSpec::Banana(BananaSpec {
            temperature: 1000.0 / n as f64,
            ..BananaSpec::flat(d)
        })
    }

    /// Gaussian likelihood with known covariance `cov` and prior N(0, prior_var·I), T = 1.
    pub fn gaussian(cov: Vec<Vec<f64>>, prior_var: f64) -> Self {
        ModelSpec::Gaussian(GaussianSpec {
            cov,
            prior_mean: None,
            prior_var,
            temperature: 1.0,
            true_theta: None,
            bounds: None,
        })
    }

    /// A gaussian or banana spec without bounds given bounds `k` sds of its prior predictive
    /// either side (so that it has summaries); any other spec unchanged.
    pub fn with_predictive_bounds(self, k: f64) -> Self {
        match self {
            ModelSpec::Gaussian(s) if s.bounds.is_none() => {
                ModelSpec::Gaussian(s.with_predictive_bounds(k))
            }
            ModelSpec::Banana(s) if s.bounds.is_none() => {
                ModelSpec::Banana(s.with_predictive_bounds(k))
            }
            other => other,
        }
    }

    /// Validate the hyperparameters and build the model.
    pub fn build(&self) -> Result<Arc<dyn Model>, ModelError> {
        Ok(match self {
            ModelSpec::Gaussian(s) => Arc::new(s.build()?),
            ModelSpec::Banana(s) => Arc::new(s.build()?),
            ModelSpec::Mixture(s) => Arc::new(s.build()?),
            ModelSpec::Glm(s) => Arc::new(s.build()?),
            ModelSpec::Circle(s) => Arc::new(s.build()?),
        })
    }

    /// The dimension of θ, without building the model.
    pub fn dim(&self) -> usize {
        match self {
            ModelSpec::Gaussian(s) => s.cov.len(),
            ModelSpec::Banana(s) => s.lik_var.len(),
            ModelSpec::Mixture(_) | ModelSpec::Circle(_) => 2,
            ModelSpec::Glm(s) => s.dim(),
        }
    }

    /// θ used to simulate data: the spec's `true_theta`, else (0, 3, 0, …) as in the thesis
    /// (for the circle, rows r ~ N(3, 1)), or (0, 1) for the mixture, as in Heikkilä et al.
    /// 2019, or zero for a GLM.
    pub fn true_theta(&self) -> Vec<f64> {
        let thesis = || {
            (0..self.dim())
                .map(|i| if i == 1 { 3.0 } else { 0.0 })
                .collect()
        };
        match self {
            ModelSpec::Gaussian(s) => s.true_theta.clone().unwrap_or_else(thesis),
            ModelSpec::Banana(s) => s.true_theta.clone().unwrap_or_else(thesis),
            ModelSpec::Mixture(s) => s.true_theta.clone().unwrap_or_else(|| vec![0.0, 1.0]),
            ModelSpec::Glm(s) => s.true_theta.clone().unwrap_or_else(|| vec![0.0; s.dim()]),
            ModelSpec::Circle(s) => s.true_theta.clone().unwrap_or_else(thesis),
        }
    }
}

fn default_temperature() -> f64 {
    1.0
}

fn check_positive(field: &'static str, value: f64) -> Result<(), ModelError> {
    if value > 0.0 && value.is_finite() {
        Ok(())
    } else {
        Err(ModelError::NotPositive { field, value })
    }
}

fn check_finite(field: &'static str, values: &[f64]) -> Result<(), ModelError> {
    match values.iter().find(|v| !v.is_finite()) {
        Some(&value) => Err(ModelError::NotFinite { field, value }),
        None => Ok(()),
    }
}

fn check_len(field: &'static str, expected: usize, got: usize) -> Result<(), ModelError> {
    if expected == got {
        Ok(())
    } else {
        Err(ModelError::LengthMismatch {
            field,
            expected,
            got,
        })
    }
}

/// Optional `true_theta` must be finite and of the right length.
fn check_true_theta(true_theta: &Option<Vec<f64>>, d: usize) -> Result<(), ModelError> {
    match true_theta {
        Some(t) => {
            check_len("true_theta", d, t.len())?;
            check_finite("true_theta", t)
        }
        None => Ok(()),
    }
}

/// FNV-1a (64-bit) of a canonical description, as 16 hex digits: stable across platforms and
/// builds, and needs no extra dependency.
fn fingerprint_of(canonical: &str) -> String {
    let hash = canonical.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, byte| {
        (h ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_reference_values() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(fingerprint_of(""), "cbf29ce484222325");
        assert_eq!(fingerprint_of("a"), "af63dc4c8601ec8c");
    }

    #[test]
    fn a_spec_states_the_dimension_its_model_has() {
        for spec in [
            ModelSpec::flat_banana(10),
            ModelSpec::gaussian(vec![vec![1.0]], 10.0),
            ModelSpec::Glm(GlmSpec::example(Family::Poisson, 4)),
            ModelSpec::Circle(CircleSpec::thesis()),
            ModelSpec::Mixture(MixtureSpec::heikkila(100.0, 1000)),
        ] {
            assert_eq!(spec.dim(), spec.build().unwrap().dim(), "{spec:?}");
            assert_eq!(spec.true_theta().len(), spec.dim(), "{spec:?}");
        }
    }
}
