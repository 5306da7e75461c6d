//! Per-parameter summary of pooled draws, the numbers DESIGN §5 puts in the JSON summary.

use serde::Serialize;

use super::{DiagnosticsError, ess_bulk, ess_tail, rhat, validate};

/// Summary statistics of one scalar parameter over all chains.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    /// Mean of the pooled draws.
    pub mean: f64,
    /// Standard deviation of the pooled draws (ddof = 1, as ArviZ's `az.summary`).
    pub sd: f64,
    /// 5%, 50% and 95% quantiles of the pooled draws, by [`quantile`].
    pub q5: f64,
    pub q50: f64,
    pub q95: f64,
    pub ess_bulk: f64,
    pub ess_tail: f64,
    /// Rank-normalised split R̂.
    pub rhat: f64,
}

/// Mean, sd, quantiles, bulk/tail-ESS and R̂ of one parameter's draws from several chains.
pub fn summary<C: AsRef<[f64]>>(chains: &[C]) -> Result<Summary, DiagnosticsError> {
    validate(chains)?;
    let mut pooled: Vec<f64> = chains
        .iter()
        .flat_map(|c| c.as_ref().iter().copied())
        .collect();
    let (mean, var) = mean_var(&pooled);
    pooled.sort_unstable_by(f64::total_cmp);
    Ok(Summary {
        mean,
        sd: var.sqrt(),
        q5: quantile_sorted(&pooled, 0.05),
        q50: quantile_sorted(&pooled, 0.5),
        q95: quantile_sorted(&pooled, 0.95),
        ess_bulk: ess_bulk(chains)?,
        ess_tail: ess_tail(chains)?,
        rhat: rhat(chains)?,
    })
}

/// The `p` quantile of `values` (any order) by linear interpolation between order
/// statistics at position (S − 1)·p: numpy's default `method="linear"`, R's type 7.
/// Panics if `values` is empty or `p` is outside [0, 1].
pub fn quantile(values: &[f64], p: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_unstable_by(f64::total_cmp);
    quantile_sorted(&sorted, p)
}

/// [`quantile`] of already sorted values, with numpy's rounding (`_lerp`): interpolate from
/// the nearer order statistic, so tied neighbours give exactly their common value.
pub(super) fn quantile_sorted(sorted: &[f64], p: f64) -> f64 {
    assert!(!sorted.is_empty(), "quantile of no values");
    assert!(
        (0.0..=1.0).contains(&p),
        "quantile probability {p} outside [0, 1]"
    );
    let h = (sorted.len() - 1) as f64 * p;
    let k = h.floor() as usize;
    let t = h - k as f64;
    let a = sorted[k];
    let Some(&b) = sorted.get(k + 1) else {
        return a;
    };
    let diff = b - a;
    if t >= 0.5 {
        b - diff * (1.0 - t)
    } else {
        a + diff * t
    }
}

/// Mean and unbiased (ddof = 1) variance by two passes; the variance is NaN for one value.
pub(super) fn mean_var(values: &[f64]) -> (f64, f64) {
    // Equal values have variance 0 exactly: Σx/n can miss x in its last bit, and a stuck
    // chain's R̂ would then be 10¹⁴ rather than ∞ (ArviZ's).
    if let [first, rest @ ..] = values
        && !rest.is_empty()
        && rest.iter().all(|v| v == first)
    {
        return (*first, 0.0);
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let ss = values.iter().map(|x| (x - mean).powi(2)).sum::<f64>();
    (mean, ss / (n - 1.0))
}
