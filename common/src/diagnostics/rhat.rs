//! Rank-normalised split R̂ (Vehtari et al. 2021, Sec. 4.1–4.2).

use super::rank::Split;
use super::summary::{mean_var, quantile_sorted};
use super::{DiagnosticsError, validate};

/// Rank-normalised split R̂: the larger of the bulk R̂ (on rank-normalised split draws) and
/// the tail R̂ (on rank-normalised draws folded about the median, |x − median|), so that
/// chains differing only in scale or tails are flagged too. Matches ArviZ's
/// `az.rhat(method="rank")`, except that a single chain is accepted (its two halves are
/// compared, as Stan does) where ArviZ returns NaN. Constant draws give NaN.
pub fn rhat<C: AsRef<[f64]>>(chains: &[C]) -> Result<f64, DiagnosticsError> {
    let split = Split::new(chains, validate(chains)?);
    let bulk = split_rhat(&split.rank_normalised());
    let mut sorted = split.data.clone();
    sorted.sort_unstable_by(f64::total_cmp);
    let median = quantile_sorted(&sorted, 0.5);
    let tail = split_rhat(&split.map(|x| (x - median).abs()).rank_normalised());
    Ok(bulk.max(tail))
}

/// Gelman–Rubin potential scale reduction on already split chains:
/// √((B/W + n − 1)/n) with B/n the variance of the chain means and W the mean within-chain
/// variance (both with ddof = 1), as in ArviZ's `_rhat`.
fn split_rhat(split: &Split) -> f64 {
    let n = split.half as f64;
    let (means, vars): (Vec<f64>, Vec<f64>) = split.chains().map(mean_var).unzip();
    let between = n * mean_var(&means).1;
    let within = vars.iter().sum::<f64>() / vars.len() as f64;
    ((between / within + n - 1.0) / n).sqrt()
}
