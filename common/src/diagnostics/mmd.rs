//! Maximum mean discrepancy between two samples, the thesis's accuracy measure (Sec. 5.3;
//! Gretton, Borgwardt, Rasch, Schölkopf and Smola 2012, "A kernel two-sample test", JMLR 13).

use rand::{Rng, RngExt};

use super::DiagnosticsError;
use super::summary::quantile_sorted;

/// Number of random pairs behind the bandwidth, as in the thesis's experiments.
const BANDWIDTH_PAIRS: usize = 500;

/// √|MMD²| between samples `a` and `b` (points as rows) under the Gaussian kernel
/// exp(−‖x − y‖²/(2σ²)), with σ the median distance between 500 pairs of points drawn
/// uniformly with replacement from the pooled sample (the thesis's median heuristic; `rng`
/// drives that draw). MMD² is the unbiased statistic of [`mmd2_unbiased`], which can be
/// slightly negative, hence the absolute value. O(n·m·d) time, no allocation per pair.
pub fn mmd(a: &[Vec<f64>], b: &[Vec<f64>], rng: &mut dyn Rng) -> Result<f64, DiagnosticsError> {
    validate(a, b)?;
    let point = |i: usize| if i < a.len() { &a[i] } else { &b[i - a.len()] };
    let pooled = a.len() + b.len();
    let mut distances: Vec<f64> = (0..BANDWIDTH_PAIRS)
        .map(|_| {
            sq_dist(
                point(rng.random_range(0..pooled)),
                point(rng.random_range(0..pooled)),
            )
            .sqrt()
        })
        .collect();
    distances.sort_unstable_by(f64::total_cmp);
    let sigma = quantile_sorted(&distances, 0.5);
    Ok(mmd2_unbiased(a, b, sigma)?.abs().sqrt())
}

/// Unbiased MMD² (Gretton et al. 2012, eq. 3) with Gaussian kernel bandwidth `sigma`:
/// mean k over distinct pairs within `a`, plus the same within `b`, minus twice the mean k
/// across. Needs at least two points per sample, all of one dimension.
pub fn mmd2_unbiased(a: &[Vec<f64>], b: &[Vec<f64>], sigma: f64) -> Result<f64, DiagnosticsError> {
    validate(a, b)?;
    if !(sigma.is_finite() && sigma > 0.0) {
        return Err(DiagnosticsError::DegenerateBandwidth(sigma));
    }
    let gamma = 1.0 / (2.0 * sigma * sigma);
    let k = |x: &[f64], y: &[f64]| (-gamma * sq_dist(x, y)).exp();
    // Mean over ordered pairs i ≠ j, from the i < j half by symmetry.
    let within = |s: &[Vec<f64>]| {
        let sum: f64 = s
            .iter()
            .enumerate()
            .map(|(i, x)| s[i + 1..].iter().map(|y| k(x, y)).sum::<f64>())
            .sum();
        2.0 * sum / (s.len() * (s.len() - 1)) as f64
    };
    let across: f64 = a
        .iter()
        .map(|x| b.iter().map(|y| k(x, y)).sum::<f64>())
        .sum();
    Ok(within(a) + within(b) - 2.0 * across / (a.len() * b.len()) as f64)
}

fn sq_dist(x: &[f64], y: &[f64]) -> f64 {
    x.iter().zip(y).map(|(u, v)| (u - v) * (u - v)).sum()
}

/// Both samples need two points for the unbiased statistic, one common dimension, and
/// finite coordinates.
fn validate(a: &[Vec<f64>], b: &[Vec<f64>]) -> Result<(), DiagnosticsError> {
    let expected = a.first().map_or(0, Vec::len);
    for sample in [a, b] {
        if sample.len() < 2 {
            return Err(DiagnosticsError::TooFewPoints { got: sample.len() });
        }
        for point in sample {
            if point.len() != expected {
                return Err(DiagnosticsError::DimensionMismatch {
                    got: point.len(),
                    expected,
                });
            }
            if !point.iter().all(|x| x.is_finite()) {
                return Err(DiagnosticsError::NonFinite);
            }
        }
    }
    Ok(())
}
