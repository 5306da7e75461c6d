//! The Gaussian-mixture experiment of Heikkilä et al. 2019 (2-d, σ1² = 10, σ2² = 1,
//! σx² = 2, data at θ = (0, 1), b = 1000 rows per step, n₀ = 100, C = 2) with DP Barker
//! federated over three in-process parties. The posterior is bimodal, (0, 1) and its
//! relabelling (1, −1); the reference is the tempered posterior on a fine grid
//! (`GridPosterior`, midpoint rule), and the chains, started from prior draws, must find both
//! modes and match it in MMD. Every seed is fixed, the parties' noise too.
use std::sync::Arc;

use fedmcmc_common::diagnostics;
use fedmcmc_common::models::{ExactPosterior, GridPosterior, MixtureSpec, ModelSpec};
use fedmcmc_coordinator::federation::local::nodes;
use fedmcmc_coordinator::federation::{Federation, NoiseChoice};
use fedmcmc_coordinator::interrupt::Stop;
use fedmcmc_coordinator::sampler::{self, ChainTrace, Quiet, SamplerConfig};
use fedmcmc_coordinator::variant::Variant;
use fedmcmc_party::config::BudgetConfig;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

const CHAINS: u32 = 8;

/// Runs the experiment at `rows` rows, `iterations` per chain; returns the kept draws, the
/// MMD to the grid reference and the exact-vs-exact baseline (mean, sd).
async fn experiment(rows: usize, iterations: u64) -> (Vec<Vec<f64>>, f64, f64, f64) {
    let spec = ModelSpec::Mixture(MixtureSpec::heikkila(100.0, rows));
    let model = spec.build().unwrap();
    let data = model.simulate(&spec.true_theta(), rows, &mut ChaCha8Rng::seed_from_u64(11));
    let reference = GridPosterior::new(model.as_ref(), &data, [-3.0, -4.0], [4.0, 4.0], 160)
        .expect("the box holds the posterior");
    let budget = BudgetConfig {
        epsilon: 1e6,
        delta: 0.5,
        accountant: Default::default(),
    };
    let parties = nodes(&spec, data.split(3), budget, None)
        .unwrap()
        .into_iter()
        .zip(0..)
        .map(|((name, node), i)| {
            let node = Arc::into_inner(node).expect("a fresh node has one owner");
            (name, Arc::new(node.with_seeded_noise(900 + i)))
        })
        .collect();
    let federation = Arc::new(Federation::new(parties));
    let variant = Variant::Barker {
        batch_size: Some(1000),
        c: 2.0,
    };
    let infos = federation.describe().await.unwrap();
    let plans = variant
        .plans(&infos, CHAINS, iterations, 0.0, NoiseChoice::Calibrate)
        .unwrap();
    federation.open(&plans, &model).await.unwrap();
    let config = SamplerConfig {
        variant,
        chains: CHAINS,
        iterations,
        warmup: iterations / 4,
        proposal: fedmcmc_common::proposal::ProposalKind::Rw,
        proposal_sd: 0.08,
        proposal_shape: None,
        clip: 0.0,
        adapt: false,
        target_accept: 0.25,
        seed: 5,
        penalise: true,
    };
    // Overdispersed starts: prior draws.
    let mut rng = ChaCha8Rng::seed_from_u64(6);
    let inits = (0..CHAINS)
        .map(|_| {
            let z: [f64; 2] = [
                StandardNormal.sample(&mut rng),
                StandardNormal.sample(&mut rng),
            ];
            vec![10f64.sqrt() * z[0], z[1]]
        })
        .collect();
    let traces: Vec<ChainTrace> = sampler::sample(
        federation.clone(),
        model.clone(),
        &config,
        inits,
        Arc::new(Quiet),
        &Stop::new(),
    )
    .await
    .unwrap();
    federation.close().await.unwrap();
    let pooled: Vec<Vec<f64>> = traces
        .iter()
        .flat_map(|t| t.kept().map(move |i| t.draw(i).to_vec()))
        .collect();
    // As many draws as the chains are worth (mode switches are rare): the baseline is then
    // the MMD of that many independent exact draws.
    let ess = (0..2)
        .map(|j| {
            let chains: Vec<Vec<f64>> = traces.iter().map(|t| t.parameter(j)).collect();
            diagnostics::ess_bulk(&chains).unwrap()
        })
        .fold(f64::INFINITY, f64::min);
    let m = (ess as usize).clamp(50, 1000);
    let thinned: Vec<Vec<f64>> = pooled
        .iter()
        .step_by(pooled.len() / m)
        .take(m)
        .cloned()
        .collect();
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let exact: Vec<Vec<f64>> = (0..m).map(|_| reference.sample(&mut rng)).collect();
    let mmd = diagnostics::mmd(&thinned, &exact, &mut rng).unwrap();
    let baselines: Vec<f64> = (0..20)
        .map(|_| {
            let other: Vec<Vec<f64>> = (0..m).map(|_| reference.sample(&mut rng)).collect();
            diagnostics::mmd(&other, &exact, &mut rng).unwrap()
        })
        .collect();
    let mean = baselines.iter().sum::<f64>() / 20.0;
    let sd = (baselines.iter().map(|b| (b - mean).powi(2)).sum::<f64>() / 19.0).sqrt();
    let upper = pooled.iter().filter(|t| t[1] > 0.0).count() as f64 / pooled.len() as f64;
    println!(
        "n = {rows}: {} kept draws (ESS {ess:.0}), share at θ2 > 0 {upper:.3} (reference {:.3}), MMD of {m} draws {mmd:.4}, exact-vs-exact {mean:.4} ± {sd:.4}",
        pooled.len(),
        reference
            .cells()
            .filter(|(c, _)| c[1] > 0.0)
            .map(|(_, p)| p)
            .sum::<f64>()
    );
    (pooled, mmd, mean, sd)
}

/// Both modes are found: each half-plane θ2 > 0 and θ2 < 0 holds between 25% and 75% of the
/// draws (the reference: about half each, the prior favouring (0, 1) by e^0.05), and the
/// draws match the reference in MMD to within the exact-vs-exact spread.
fn check(draws: &[Vec<f64>], mmd: f64, base: f64, sd: f64) {
    let upper = draws.iter().filter(|t| t[1] > 0.0).count() as f64 / draws.len() as f64;
    assert!((0.25..=0.75).contains(&upper), "share at θ2 > 0: {upper}");
    assert!(
        mmd <= base + 4.0 * sd,
        "MMD {mmd} vs baseline {base} ± {sd}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn barker_recovers_both_modes_of_the_mixture() {
    let (draws, mmd, base, sd) = experiment(15_000, 50_000).await;
    check(&draws, mmd, base, sd);
}

/// The experiment at the scale, n = 10⁵ (run with `--ignored --release` for the
/// figures; the grid reference alone evaluates 2.6·10⁹ mixture densities).
///
/// The walk is not adapted: DP Barker's clip √(C/2)·√b/n₀ ≈ 0.32 is fixed, and the longer
/// steps adaptation finds make it bind for many rows (a visibly different, clipped target:
/// MMD 0.16 against a baseline of 0.026 in a trial); at sd 0.08 it binds beyond about four
/// standard deviations of a row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement at full scale; run with --release --ignored"]
async fn barker_recovers_both_modes_at_full_scale() {
    let (draws, mmd, base, sd) = experiment(100_000, 50_000).await;
    check(&draws, mmd, base, sd);
}
