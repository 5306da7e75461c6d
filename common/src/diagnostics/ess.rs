//! Bulk- and tail-effective sample size (Vehtari et al. 2021, Sec. 3.2 and 4.3), a port of
//! ArviZ's `_ess`, which follows Stan.

use rustfft::FftPlanner;
use rustfft::num_complex::Complex;

use super::rank::Split;
use super::summary::{mean_var, quantile_sorted};
use super::{DiagnosticsError, validate};

/// Bulk-ESS: the ESS of the rank-normalised split draws, i.e. how well the centre of the
/// distribution is explored, defined even without finite moments. Equals ArviZ's
/// `az.ess(method="bulk")`.
pub fn ess_bulk<C: AsRef<[f64]>>(chains: &[C]) -> Result<f64, DiagnosticsError> {
    let split = Split::new(chains, validate(chains)?);
    Ok(split_ess(&split.rank_normalised()))
}

/// Tail-ESS: the smaller ESS of the indicators I(x ≤ q5) and I(x ≤ q95), i.e. how reliable
/// the 90% interval ends are. Equals ArviZ's `az.ess(method="tail")`; the quantiles are the
/// linear ones of [`quantile`](super::quantile) (ArviZ's `mquantiles(alphap=1, betap=1)` is the same
/// definition, computed with different rounding).
pub fn ess_tail<C: AsRef<[f64]>>(chains: &[C]) -> Result<f64, DiagnosticsError> {
    let n_draws = validate(chains)?;
    let split = Split::new(chains, n_draws);
    let mut pooled: Vec<f64> = chains
        .iter()
        .flat_map(|c| c.as_ref().iter().copied())
        .collect();
    pooled.sort_unstable_by(f64::total_cmp);
    let ess_at = |p: f64| {
        let q = quantile_sorted(&pooled, p);
        split_ess(&split.map(|x| if x <= q { 1.0 } else { 0.0 }))
    };
    Ok(ess_at(0.05).min(ess_at(0.95)))
}

/// ESS of already split chains: S / τ̂ with τ̂ = −1 + 2 Σ ρ̂_t from the multi-chain
/// autocorrelation estimate, truncated by Geyer's initial positive sequence and made
/// monotone (Geyer 1992), with τ̂ ≥ 1/log10(S) so that antithetic chains report at most
/// S·log10(S). Every step mirrors ArviZ's `_ess` so the results agree to rounding.
fn split_ess(split: &Split) -> f64 {
    let s = split.data.len();
    let (lo, hi) = split
        .data
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        });
    // ArviZ's threshold: numpy's float64 `resolution`.
    if hi - lo < 1e-15 {
        return s as f64;
    }
    let n = split.half;
    let m = split.n_chains() as f64;
    let nf = n as f64;
    let acov = mean_autocovariance(split);
    let chain_means: Vec<f64> = split.chains().map(|c| mean_var(c).0).collect();
    let mean_var_within = acov[0] * nf / (nf - 1.0);
    // Split chains always number at least two.
    let var_plus = mean_var_within * (nf - 1.0) / nf + mean_var(&chain_means).1;
    let rho_at = |t: usize| 1.0 - (mean_var_within - acov[t]) / var_plus;

    let mut rho = vec![0.0; n];
    rho[0] = 1.0;
    let mut rho_even = 1.0;
    let mut rho_odd = rho_at(1);
    rho[1] = rho_odd;
    // Geyer's initial positive sequence: sum pairs while their sum stays positive.
    let mut t = 1;
    while t + 3 < n && rho_even + rho_odd > 0.0 {
        rho_even = rho_at(t + 1);
        rho_odd = rho_at(t + 2);
        if rho_even + rho_odd >= 0.0 {
            rho[t + 1] = rho_even;
            rho[t + 2] = rho_odd;
        }
        t += 2;
    }
    // ArviZ's max_t = t − 2 may be −1; keep it as the count max_t + 1 = t − 1 instead.
    let kept = t - 1;
    if rho_even > 0.0 {
        rho[kept] = rho_even;
    }
    // Geyer's initial monotone sequence: pair sums may not increase.
    let mut t = 1;
    while t + 3 <= kept {
        let previous = rho[t - 1] + rho[t];
        if rho[t + 1] + rho[t + 2] > previous {
            rho[t + 1] = previous / 2.0;
            rho[t + 2] = rho[t + 1];
        }
        t += 2;
    }
    let tau = -1.0 + 2.0 * rho[..kept].iter().sum::<f64>() + rho.get(kept).copied().unwrap_or(0.0);
    let total = m * nf;
    total / tau.max(1.0 / total.log10())
}

/// Autocovariance at every lag, averaged over chains: each centred chain is zero-padded to
/// 2n and its periodogram inverse-transformed (the linear, not circular, autocovariance),
/// divided by n (the biased estimator, as ArviZ).
fn mean_autocovariance(split: &Split) -> Vec<f64> {
    let n = split.half;
    let len = 2 * n;
    let mut planner = FftPlanner::new();
    let forward = planner.plan_fft_forward(len);
    let inverse = planner.plan_fft_inverse(len);
    let mut buffer = vec![Complex::new(0.0, 0.0); len];
    let mut sum = vec![0.0; n];
    for chain in split.chains() {
        let mean = mean_var(chain).0;
        for (b, &x) in buffer.iter_mut().zip(chain) {
            *b = Complex::new(x - mean, 0.0);
        }
        buffer[n..].fill(Complex::new(0.0, 0.0));
        forward.process(&mut buffer);
        for b in &mut buffer {
            *b = Complex::new(b.norm_sqr(), 0.0);
        }
        inverse.process(&mut buffer);
        for (s, b) in sum.iter_mut().zip(&buffer) {
            *s += b.re;
        }
    }
    // rustfft's inverse is unnormalised (factor len); then n for the estimator and the chain
    // count for the average.
    let scale = 1.0 / (len as f64 * n as f64 * split.n_chains() as f64);
    sum.iter().map(|s| s * scale).collect()
}
