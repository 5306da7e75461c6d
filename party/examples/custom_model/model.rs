//! The example's model: a linear regression with Student-t errors, y = β0 + β1·x + ε with
//! ε ~ t_ν (ν = 4, scale 1), prior β ~ N(0, 10² I). Configuration cannot express it (the
//! built-in models are the thesis's), and it is robust: a row's log-likelihood moves by at
//! most (ν + 1)/(2√ν)·√(1 + x²) per unit of ‖β′ − β‖, however far y lies from the line, so a
//! clip at that bound loses nothing for bounded x.
//!
//! Both the party program (`main.rs`) and the coordinator's side (the system test
//! `tests/tests/custom_model.rs`, or an analyst's own program calling
//! `fedmcmc_coordinator::remote::run_with`) hold this same model: the party evaluates its
//! likelihood over its rows, the coordinator its prior for the acceptance test and proposals.
use fedmcmc_common::clip::ClippedSum;
use fedmcmc_common::data::Columns;
use fedmcmc_common::models::{ExactPosterior, Model};
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};

/// Degrees of freedom ν of the errors.
const NU: f64 = 4.0;
/// Prior variance of each coefficient.
const PRIOR_VAR: f64 = 100.0;

/// Rows are (x, y): column `x1` holds x, `x2` holds y (the party's data source names its
/// columns x1 … x{row_dim}).
#[derive(Debug, Default)]
pub struct StudentTRegression;

impl StudentTRegression {
    /// ln t_ν(e) without its constant: −(ν + 1)/2 · ln(1 + e²/ν).
    #[inline(always)]
    fn kernel(e: f64) -> f64 {
        -0.5 * (NU + 1.0) * (e * e / NU).ln_1p()
    }

    /// The constant of ln t_ν: lnΓ((ν + 1)/2) − lnΓ(ν/2) − ½ ln(νπ); for ν = 4,
    /// ln(3√π/4) − ln 1 − ½ ln(4π) = ln(3/8).
    fn log_norm() -> f64 {
        (3.0f64 / 8.0).ln()
    }
}

impl Model for StudentTRegression {
    fn name(&self) -> &'static str {
        "student-t-regression"
    }

    fn dim(&self) -> usize {
        2
    }

    fn row_dim(&self) -> usize {
        2
    }

    /// Parties and coordinator compare it: change it whenever the likelihood changes.
    fn fingerprint(&self) -> String {
        format!("student-t-regression/v1;nu={NU:?}")
    }

    fn temperature(&self) -> f64 {
        1.0
    }

    fn log_prior(&self, theta: &[f64]) -> f64 {
        let ss: f64 = theta.iter().map(|t| t * t).sum();
        -0.5 * ss / PRIOR_VAR - (2.0 * std::f64::consts::PI * PRIOR_VAR).ln()
    }

    fn grad_log_prior(&self, theta: &[f64], out: &mut [f64]) {
        for (o, t) in out.iter_mut().zip(theta) {
            *o = -t / PRIOR_VAR;
        }
    }

    fn prior_mode(&self) -> Vec<f64> {
        vec![0.0, 0.0]
    }

    fn log_lik_row(&self, theta: &[f64], row: &[f64]) -> f64 {
        Self::log_norm() + Self::kernel(row[1] - theta[0] - theta[1] * row[0])
    }

    /// ∂ℓ/∂β = (ν + 1)·e/(ν + e²)·(1, x), e = y − β0 − β1·x.
    fn grad_log_lik_row(&self, theta: &[f64], row: &[f64], out: &mut [f64]) {
        let e = row[1] - theta[0] - theta[1] * row[0];
        let w = (NU + 1.0) * e / (NU + e * e);
        out[0] = w;
        out[1] = w * row[0];
    }

    /// The party's hot loop, overriding the trait's row-by-row default: one pass down the two
    /// columns, no row copies, the constant cancelled. `ClippedSum::add` clips each row's
    /// term, which keeps the sum within n·bound whatever the rows hold (a NaN term becomes
    /// −bound).
    fn clipped_llr_sum(
        &self,
        data: &Columns,
        theta: &[f64],
        theta_prop: &[f64],
        bound: f64,
    ) -> ClippedSum {
        assert_eq!(data.d(), 2, "data columns");
        let mut out = ClippedSum::default();
        for (x, y) in data.col(0).iter().zip(data.col(1)) {
            let e = y - theta[0] - theta[1] * x;
            let e_prop = y - theta_prop[0] - theta_prop[1] * x;
            out.add(Self::kernel(e_prop) - Self::kernel(e), bound);
        }
        out
    }

    /// x ~ N(0, 1), y = β0 + β1·x + t_ν noise (a normal over the root of a χ²_ν / ν).
    fn simulate(&self, theta: &[f64], n: usize, rng: &mut dyn Rng) -> Columns {
        let mut normal = || -> f64 { StandardNormal.sample(&mut *rng) };
        let (mut xs, mut ys) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for _ in 0..n {
            let x = normal();
            let chi2: f64 = (0..NU as usize).map(|_| normal().powi(2)).sum();
            let noise = normal() / (chi2 / NU).sqrt();
            xs.push(x);
            ys.push(theta[0] + theta[1] * x + noise);
        }
        Columns::from_columns(vec![xs, ys]).expect("finite simulated data")
    }

    /// Not conjugate: no closed form.
    fn exact_posterior(&self, _data: &Columns) -> Option<Box<dyn ExactPosterior>> {
        None
    }
}
