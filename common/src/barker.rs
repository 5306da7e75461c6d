//! The correction distribution of the DP Barker test (docs/design.md §3 "DP Barker").
//!
//! Barker's test accepts iff λ + V_log > 0 with V_log ~ Logistic(0, 1), which accepts with
//! probability 1/(1 + e^{−λ}). DP Barker (Heikkilä et al. 2019; Räisä 2020, Sec. 3.3, Alg. 3)
//! sees λ only through a release with Gaussian noise of a fixed total variance C < π²/3, and
//! splits V_log ≈ N(0, C) + V_corr: accepting iff λ̂ + V_corr > 0 then makes the same decision
//! in distribution. V_corr has no closed form (its characteristic function
//! πt/sinh(πt)·e^{Ct²/2} is not one for C > 0), so it is approximated, as in Heikkilä et al.
//! 2019, by a Gaussian mixture.
//!
//! A [`CorrectionFit`] is one such mixture for one C. The fits are made by the LP of
//! `examples/fit_vcorr.rs` and committed under `common/data/vcorr/`; [`CorrectionFit::load`]
//! reads them from the library itself, so no file is needed at run time. Each file records the
//! command (run from the workspace root) that regenerates it. How good a fit is is stated by
//! [`CorrectionFit::sup_error`]: the sup-norm distance between the CDF of N(0, C) + V_corr and
//! the Logistic(0, 1) CDF, which bounds the error of every acceptance probability. Committed:
//! C = 0.5 (1.4e-6), C = 1 (6.2e-7) and C = 2 (6.0e-4; Heikkilä et al. 2019 report 2.4e-3).
//! The same LP reaches only 3.8e-3 at C = 2.5 and 1.3e-2 at C = 3, as the deconvolution gets
//! harder towards π²/3, so those are not committed.
use rand::{Rng, RngExt};
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Var(Logistic(0, 1)) = π²/3: C must stay below it, since Var(V_corr) = π²/3 − C.
pub const LOGISTIC_VARIANCE: f64 = std::f64::consts::PI * std::f64::consts::PI / 3.0;

/// The committed fits, by file: each is embedded, so loading needs no file system.
const COMMITTED: &[(&str, &str)] = &[
    ("c0.5.json", include_str!("../data/vcorr/c0.5.json")),
    ("c1.json", include_str!("../data/vcorr/c1.json")),
    ("c2.json", include_str!("../data/vcorr/c2.json")),
];

/// The sup-norm check scans [−`SCAN_HALF_WIDTH`, `SCAN_HALF_WIDTH`]; beyond it the tails are
/// bounded analytically (see [`CorrectionFit::sup_error`]).
pub const SCAN_HALF_WIDTH: f64 = 40.0;

/// Spacing of the sup-norm scan. With the curvature bound of [`CorrectionFit::sup_error`],
/// what the scan can miss between two points is at most h²/8·(max|f′| + max|ℓ′|), which is
/// below 1e-7 for every C ≥ 0.5 (7.2e-8 at C = 0.5), and the bound includes it.
pub const SCAN_STEP: f64 = 1e-3;

/// Why no correction distribution can be given.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum BarkerError {
    #[error(
        "the Barker noise variance C must be a finite number in (0, π²/3 ≈ 3.29), got {0}: V_corr's variance π²/3 − C must be positive"
    )]
    InvalidC(f64),
    #[error("no correction distribution is committed for C = {c}; committed: {available:?}")]
    NoFit { c: f64, available: Vec<f64> },
    #[error("correction fit {name} is malformed: {reason}")]
    Malformed { name: String, reason: String },
}

/// A Gaussian mixture approximating V_corr for noise variance `c`: component k has weight
/// `weights[k]`, mean `means[k]` and standard deviation `sds[k]`. `sup_error` and `command`
/// record the fit's achieved error and the command that made it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CorrectionFit {
    /// C: the variance of the Gaussian noise this fit completes to a logistic.
    pub c: f64,
    pub weights: Vec<f64>,
    pub means: Vec<f64>,
    pub sds: Vec<f64>,
    /// sup_x |F(x) − L(x)| as computed by [`CorrectionFit::sup_error`] when the fit was made.
    pub sup_error: f64,
    /// The command that regenerates this fit.
    pub command: String,
}

/// The outcome of the sup-norm check of a fit against the Logistic(0, 1) CDF.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SupError {
    /// A bound on sup_x |F(x) − L(x)| over the whole real line.
    pub bound: f64,
    /// The largest |F − L| found on the scan grid, and where.
    pub grid_max: f64,
    pub argmax: f64,
    /// What the grid can miss between its points (curvature bound).
    pub between_points: f64,
    /// The bound on |F − L| beyond ±[`SCAN_HALF_WIDTH`].
    pub tails: f64,
}

/// Φ(z), the standard normal CDF, accurate in the lower tail.
pub fn normal_cdf(z: f64) -> f64 {
    0.5 * libm::erfc(-z * std::f64::consts::FRAC_1_SQRT_2)
}

/// 1 − Φ(z), accurate in the upper tail.
pub fn normal_sf(z: f64) -> f64 {
    0.5 * libm::erfc(z * std::f64::consts::FRAC_1_SQRT_2)
}

/// L(x) = 1/(1 + e^{−x}), the Logistic(0, 1) CDF: also Barker's acceptance probability at λ = x.
pub fn logistic_cdf(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

impl CorrectionFit {
    /// The committed fit for noise variance `c` (exact match: the Barker kernel fixes C to one
    /// of [`CorrectionFit::available`]).
    pub fn load(c: f64) -> Result<Self, BarkerError> {
        check_c(c)?;
        let fits = committed()?;
        let available = fits.iter().map(|f| f.c).collect();
        fits.into_iter()
            .find(|f| f.c == c)
            .ok_or(BarkerError::NoFit { c, available })
    }

    /// The values of C with a committed fit, ascending.
    pub fn available() -> Result<Vec<f64>, BarkerError> {
        Ok(committed()?.iter().map(|f| f.c).collect())
    }

    /// Parses and validates a fit file; `name` only labels errors.
    pub fn from_json(name: &str, json: &str) -> Result<Self, BarkerError> {
        let malformed = |reason: String| BarkerError::Malformed {
            name: name.to_owned(),
            reason,
        };
        let fit: CorrectionFit =
            serde_json::from_str(json).map_err(|e| malformed(e.to_string()))?;
        check_c(fit.c)?;
        fit.validate().map_err(malformed)?;
        Ok(fit)
    }

    /// Checks the shape of the mixture: equal lengths, finite means, positive sds,
    /// non-negative weights summing to 1.
    fn validate(&self) -> Result<(), String> {
        let k = self.weights.len();
        if k == 0 || self.means.len() != k || self.sds.len() != k {
            return Err(format!(
                "weights, means and sds must be non-empty and of equal length, got {}, {}, {}",
                k,
                self.means.len(),
                self.sds.len()
            ));
        }
        if let Some(w) = self.weights.iter().find(|w| !(w.is_finite() && **w >= 0.0)) {
            return Err(format!("weight {w} is not a finite non-negative number"));
        }
        let total: f64 = self.weights.iter().sum();
        if (total - 1.0).abs() > 1e-12 {
            return Err(format!("weights sum to {total}, not 1"));
        }
        if let Some(m) = self.means.iter().find(|m| !m.is_finite()) {
            return Err(format!("mean {m} is not finite"));
        }
        if let Some(s) = self.sds.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
            return Err(format!("sd {s} is not a finite positive number"));
        }
        Ok(())
    }

    /// One draw of V_corr: a component chosen by weight, then a normal draw from it.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        let u: f64 = rng.random::<f64>();
        let mut acc = 0.0;
        // The last component takes whatever rounding leaves above the cumulative sum.
        let mut k = self.weights.len() - 1;
        for (i, w) in self.weights.iter().enumerate() {
            acc += w;
            if u < acc {
                k = i;
                break;
            }
        }
        let z: f64 = StandardNormal.sample(rng);
        self.means[k] + self.sds[k] * z
    }

    /// P(λ̂ + V_corr > 0) = Σ_k w_k Φ((λ̂ + m_k)/s_k): the probability that the DP Barker test
    /// accepts given the released λ̂ (CmdStan's `accept_stat__` for this kernel).
    pub fn accept_probability(&self, lambda_hat: f64) -> f64 {
        (0..self.weights.len())
            .map(|k| self.weights[k] * normal_cdf((lambda_hat + self.means[k]) / self.sds[k]))
            .sum()
    }

    /// Var(V_corr) = Σ w (m² + s²) − (Σ w m)²; π²/3 − C for an exact correction.
    pub fn variance(&self) -> f64 {
        let mean: f64 = self
            .weights
            .iter()
            .zip(&self.means)
            .map(|(w, m)| w * m)
            .sum();
        let second: f64 = (0..self.weights.len())
            .map(|k| self.weights[k] * (self.means[k].powi(2) + self.sds[k].powi(2)))
            .sum();
        second - mean * mean
    }

    /// F(x) = P(N(0, C) + V_corr ≤ x) = Σ_k w_k Φ((x − m_k)/√(s_k² + C)): the CDF that must
    /// match the Logistic(0, 1) CDF.
    pub fn convolved_cdf(&self, x: f64) -> f64 {
        self.components()
            .map(|(w, m, sd)| w * normal_cdf((x - m) / sd))
            .sum()
    }

    /// 1 − F(x), accurate in the upper tail.
    pub fn convolved_sf(&self, x: f64) -> f64 {
        self.components()
            .map(|(w, m, sd)| w * normal_sf((x - m) / sd))
            .sum()
    }

    /// (w_k, m_k, √(s_k² + C)): the components of N(0, C) + V_corr.
    fn components(&self) -> impl Iterator<Item = (f64, f64, f64)> + '_ {
        (0..self.weights.len()).map(|k| {
            (
                self.weights[k],
                self.means[k],
                (self.sds[k].powi(2) + self.c).sqrt(),
            )
        })
    }

    /// A bound on sup_x |F(x) − L(x)| over the whole real line.
    ///
    /// e = F − L is scanned on the grid x_j = −40 + j·h, h = [`SCAN_STEP`] = 1e-3. Between two
    /// grid points e differs from its linear interpolant by at most h²/8·max|e″|, and the
    /// interpolant lies between the two end values, so |e| ≤ grid max + h²/8·max|e″|, with
    /// max|e″| ≤ max|f′| + max|ℓ′| ≤ Σ_k w_k/(σ_k²√(2πe)) + 1/(6√3) (f, ℓ the densities;
    /// σ_k² = s_k² + C), below 1e-7 for C ≥ 0.5; a plain Lipschitz argument would need
    /// h ≈ 1e-5 for the same guarantee. Beyond ±40 both CDFs are monotone and within their
    /// tail mass of 0 or 1, so |e| ≤ max(1 − F(40), 1 − L(40)) on the right and
    /// max(F(−40), L(−40)) on the left, computed exactly from the tail functions.
    pub fn sup_error(&self) -> SupError {
        let steps = (2.0 * SCAN_HALF_WIDTH / SCAN_STEP).round() as usize;
        let (mut grid_max, mut argmax) = (0.0f64, 0.0);
        for j in 0..=steps {
            let x = -SCAN_HALF_WIDTH + j as f64 * SCAN_STEP;
            let e = (self.convolved_cdf(x) - logistic_cdf(x)).abs();
            if e > grid_max {
                (grid_max, argmax) = (e, x);
            }
        }
        let two_pi_e = 2.0 * std::f64::consts::PI * std::f64::consts::E;
        let max_f_prime: f64 = self
            .components()
            .map(|(w, _, sd)| w / (sd * sd * two_pi_e.sqrt()))
            .sum();
        let max_l_prime = 1.0 / (6.0 * 3f64.sqrt());
        let between_points = SCAN_STEP * SCAN_STEP / 8.0 * (max_f_prime + max_l_prime);
        let right = self
            .convolved_sf(SCAN_HALF_WIDTH)
            .max(logistic_cdf(-SCAN_HALF_WIDTH));
        let left = self
            .convolved_cdf(-SCAN_HALF_WIDTH)
            .max(logistic_cdf(-SCAN_HALF_WIDTH));
        let tails = right.max(left);
        SupError {
            bound: (grid_max + between_points).max(tails),
            grid_max,
            argmax,
            between_points,
            tails,
        }
    }
}

/// C must be finite, positive and below π²/3.
fn check_c(c: f64) -> Result<(), BarkerError> {
    if c.is_finite() && c > 0.0 && c < LOGISTIC_VARIANCE {
        Ok(())
    } else {
        Err(BarkerError::InvalidC(c))
    }
}

/// Every committed fit, parsed and validated, ascending in C.
fn committed() -> Result<Vec<CorrectionFit>, BarkerError> {
    let mut fits = COMMITTED
        .iter()
        .map(|(name, json)| CorrectionFit::from_json(name, json))
        .collect::<Result<Vec<_>, _>>()?;
    fits.sort_by(|a, b| a.c.total_cmp(&b.c));
    Ok(fits)
}
