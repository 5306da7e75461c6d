//! The statistical checks: chains against the exact posterior (z-scores of means and sds,
//! MMD against an exact-vs-exact baseline), against each other, noise and acceptance.
use fedmcmc_common::diagnostics;
use fedmcmc_coordinator::sampler::ChainTrace;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::harness::Setup;

pub(crate) fn mean_noise_variance(traces: &[ChainTrace]) -> f64 {
    let kept: Vec<f64> = traces
        .iter()
        .flat_map(|t| t.noise_variance[t.warmup as usize..].to_vec())
        .collect();
    kept.iter().sum::<f64>() / kept.len() as f64
}

/// Consecutive batches each chain's kept draws are cut into for [`sd_standard_error`].
const BATCHES_PER_CHAIN: usize = 5;

/// Monte Carlo standard error of the pooled sd, by batch means: the pooled variance is the
/// mean of the batches' mean squared deviations, so its error is their spread over √(number
/// of batches), and the sd's relative error is half the variance's. Batch means need no
/// estimate of how fast (x − m)² mixes; ESS-based errors came out 2–3 times too small here
/// (z(sd) varied with a standard deviation of about 2.5 across OS-seeded runs, while the
/// pooled sds averaged to the exact ones), because (x − m)² mixes far more slowly than x.
fn sd_standard_error(chains: &[Vec<f64>]) -> f64 {
    let n = chains.iter().map(Vec::len).sum::<usize>() as f64;
    let mean = chains.iter().flatten().sum::<f64>() / n;
    let batch_vars: Vec<f64> = chains
        .iter()
        .flat_map(|c| c.chunks_exact(c.len() / BATCHES_PER_CHAIN))
        .map(|b| b.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / b.len() as f64)
        .collect();
    let k = batch_vars.len() as f64;
    let var = batch_vars.iter().sum::<f64>() / k;
    let spread = batch_vars.iter().map(|v| (v - var).powi(2)).sum::<f64>() / (k - 1.0);
    (spread / k).sqrt() / (2.0 * var.sqrt())
}

/// z-scores of the difference of two samplers' mean and sd of one parameter (`a` and `b`:
/// each's post-warm-up draws per chain), from both Monte Carlo errors: the means' from the
/// bulk ESS, the sds' by batch means ([`sd_standard_error`]).
pub(crate) fn z_between(what: &str, a: &[Vec<f64>], b: &[Vec<f64>]) -> (f64, f64) {
    let (sa, sb) = (
        diagnostics::summary(a).unwrap(),
        diagnostics::summary(b).unwrap(),
    );
    let se = (sa.sd.powi(2) / sa.ess_bulk + sb.sd.powi(2) / sb.ess_bulk).sqrt();
    let z = (sa.mean - sb.mean) / se;
    let z_sd = (sa.sd - sb.sd) / sd_standard_error(a).hypot(sd_standard_error(b));
    println!(
        "{what}: {:.6} ± {:.6} (ess {:.0}) vs {:.6} ± {:.6} (ess {:.0}); z(mean) {z:+.2}, z(sd) {z_sd:+.2}",
        sa.mean, sa.sd, sa.ess_bulk, sb.mean, sb.sd, sb.ess_bulk
    );
    (z, z_sd)
}

/// Largest |z| of the chains' means and sds against the exact posterior.
pub(crate) fn worst_z(s: &Setup, traces: &[ChainTrace]) -> f64 {
    let mut worst: f64 = 0.0;
    for j in 0..s.model.dim() {
        let chains: Vec<Vec<f64>> = traces.iter().map(|t| t.parameter(j)).collect();
        let summary = diagnostics::summary(&chains).unwrap();
        let ess = summary.ess_bulk;
        let (mu, sd) = (s.exact.mean()[j], s.exact.sd()[j]);
        let se_sd = sd_standard_error(&chains);
        let z_mean = (summary.mean - mu) / (sd / ess.sqrt());
        let z_sd = (summary.sd - sd) / se_sd;
        println!(
            "theta.{}: mean {:.6} (exact {mu:.6}, z {z_mean:+.2}), sd {:.6} (exact {sd:.6}, z {z_sd:+.2}), ess {ess:.0}, rhat {:.4}",
            j + 1,
            summary.mean,
            summary.sd,
            summary.rhat
        );
        worst = worst.max(z_mean.abs()).max(z_sd.abs());
    }
    worst
}

/// The chains match the exact posterior: every mean and sd within 4 Monte Carlo standard
/// errors ([`worst_z`]), and the MMD within 4 sds of the exact-vs-exact baseline.
pub(crate) fn assert_matches_exact(name: &str, s: &Setup, traces: &[ChainTrace]) {
    let z = worst_z(s, traces);
    assert!(z < 4.0, "{name}: worst |z| {z}");
    let (mmd, base, sd) = mmd_against_baseline(s, traces);
    assert!(
        mmd <= base + 4.0 * sd,
        "{name}: MMD {mmd} vs baseline {base} ± {sd}"
    );
}

/// MMD of ESS-many evenly thinned draws against 1000 exact draws, and the mean and sd of 20
/// exact-vs-exact MMDs of the same sizes.
pub(crate) fn mmd_against_baseline(s: &Setup, traces: &[ChainTrace]) -> (f64, f64, f64) {
    let min_ess = (0..s.model.dim())
        .map(|j| {
            let chains: Vec<Vec<f64>> = traces.iter().map(|t| t.parameter(j)).collect();
            diagnostics::ess_bulk(&chains).unwrap()
        })
        .fold(f64::INFINITY, f64::min);
    let pooled: Vec<Vec<f64>> = traces
        .iter()
        .flat_map(|t| (t.warmup as usize..t.steps()).map(move |i| t.draw(i).to_vec()))
        .collect();
    let m = (min_ess as usize).clamp(50, 1000);
    let stride = pooled.len() / m;
    let thinned: Vec<Vec<f64>> = pooled.into_iter().step_by(stride).take(m).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(1234);
    let reference: Vec<Vec<f64>> = (0..1000).map(|_| s.exact.sample(&mut rng)).collect();
    let chain_mmd = diagnostics::mmd(&thinned, &reference, &mut rng).unwrap();
    let baselines: Vec<f64> = (0..20)
        .map(|_| {
            let exact: Vec<Vec<f64>> = (0..m).map(|_| s.exact.sample(&mut rng)).collect();
            diagnostics::mmd(&exact, &reference, &mut rng).unwrap()
        })
        .collect();
    let mean = baselines.iter().sum::<f64>() / 20.0;
    let sd = (baselines.iter().map(|b| (b - mean).powi(2)).sum::<f64>() / 19.0).sqrt();
    println!("MMD {chain_mmd:.4} with {m} thinned draws; exact baseline {mean:.4} ± {sd:.4}");
    (chain_mmd, mean, sd)
}

/// Post-warm-up acceptance rate over all chains.
pub(crate) fn acceptance(traces: &[ChainTrace]) -> f64 {
    let rates: Vec<f64> = traces.iter().filter_map(|t| t.acceptance_rate()).collect();
    rates.iter().sum::<f64>() / rates.len() as f64
}
