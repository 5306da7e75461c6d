//! χ² goodness of fit of integer samples against an exact cdf, shared by the discrete
//! Gaussian tests and the release-mode example (common/examples/discrete_gaussian.rs).
#![allow(dead_code)]
use statrs::distribution::{ChiSquared, ContinuousCDF, Normal};

pub const ALPHA: f64 = 1e-3;

/// Pearson's χ² of `samples` against a law given by its cdf on the integers, over the bins
/// cut at `cuts` (bin i is (cuts[i-1], cuts[i]], the first and last open), after merging
/// neighbouring bins until each expects at least 5 draws. Returns (statistic, critical value
/// at α, degrees of freedom).
pub fn chi_square(samples: &[i128], cuts: &[i128], cdf: &dyn Fn(i128) -> f64) -> (f64, f64, usize) {
    let n = samples.len() as f64;
    let uppers: Vec<i128> = cuts
        .iter()
        .copied()
        .chain(std::iter::once(i128::MAX))
        .collect();
    let mut edges: Vec<(f64, usize)> = Vec::new(); // (probability, count) per raw bin
    let (mut previous_p, mut previous_cut) = (0.0, i128::MIN);
    for &upper in &uppers {
        let p = if upper == i128::MAX { 1.0 } else { cdf(upper) };
        let count = samples
            .iter()
            .filter(|&&x| x > previous_cut && x <= upper)
            .count();
        edges.push((p - previous_p, count));
        (previous_p, previous_cut) = (p, upper);
    }
    let mut merged: Vec<(f64, usize)> = Vec::new();
    let mut acc = (0.0, 0usize);
    for (p, c) in edges {
        acc = (acc.0 + p, acc.1 + c);
        if acc.0 * n >= 5.0 {
            merged.push(acc);
            acc = (0.0, 0);
        }
    }
    if let Some(last) = merged.last_mut() {
        last.0 += acc.0;
        last.1 += acc.1;
    }
    let stat: f64 = merged
        .iter()
        .map(|&(p, c)| {
            let e = p * n;
            (c as f64 - e).powi(2) / e
        })
        .sum();
    let dof = merged.len() - 1;
    let critical = ChiSquared::new(dof as f64)
        .unwrap()
        .inverse_cdf(1.0 - ALPHA);
    (stat, critical, dof)
}

/// Exact cdf of N_Z(0, σ²) by summing its pmf, for σ up to about 10³.
pub fn exact_dgauss_cdf(sigma_sq: f64) -> impl Fn(i128) -> f64 {
    let reach = (40.0 * sigma_sq.sqrt()).ceil() as i128 + 10;
    let weights: Vec<f64> = (-reach..=reach)
        .map(|k| (-((k * k) as f64) / (2.0 * sigma_sq)).exp())
        .collect();
    let z: f64 = weights.iter().sum();
    let mut cumulative = Vec::with_capacity(weights.len());
    let mut s = 0.0;
    for w in &weights {
        s += w / z;
        cumulative.push(s);
    }
    move |x: i128| {
        if x < -reach {
            0.0
        } else if x >= reach {
            1.0
        } else {
            cumulative[(x + reach) as usize]
        }
    }
}

/// cdf of N_Z(0, σ²) for σ ≥ 10³ from the normal cdf with the continuity correction,
/// P[X ≤ x] ≈ Φ((x + ½)/σ): by the midpoint rule the error per bin is below
/// (bin width)·max|φ''|/24 ≈ 10⁻⁸ at σ = 10³ and 10⁻¹⁴ at 10⁶, and the normaliser differs
/// from σ√(2π) by 2e^{−2π²σ²}: far below the Monte Carlo error of these tests.
pub fn normal_dgauss_cdf(sigma: f64) -> impl Fn(i128) -> f64 {
    let normal = Normal::new(0.0, sigma).unwrap();
    move |x: i128| normal.cdf(x as f64 + 0.5)
}
