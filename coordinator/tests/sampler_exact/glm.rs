//! GLMs: the logistic and poisson ones against a pooled plain Metropolis chain, and the
//! gaussian one by sufficient statistics against per-row ratios.
use fedmcmc_common::clip::row_bound;
use fedmcmc_common::data::Columns;
use fedmcmc_common::models::{Family, GlmSpec, Model, ModelSpec};
use fedmcmc_coordinator::variant::Variant;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;

use crate::checks::{assert_matches_exact, mean_noise_variance, z_between};
use crate::harness::{ITERATIONS, RW, Run, sample, sample_from, setup, simulated};

/// A plain random-walk Metropolis chain per seed on the pooled rows, without privacy:
/// ln π(θ) = ln p(θ) + Σ_x T·ℓ(x|θ), row by row through `log_lik_row`, Gaussian steps of
/// sd `step`, from `start`. Returns each parameter's draws per chain, the first quarter
/// dropped as warm-up.
fn reference_chains(
    model: &dyn Model,
    data: &Columns,
    start: &[f64],
    step: f64,
    iterations: usize,
    seeds: &[u64],
) -> Vec<Vec<Vec<f64>>> {
    let rows: Vec<Vec<f64>> = (0..data.n())
        .map(|i| {
            let mut row = vec![0.0; data.d()];
            data.row_into(i, &mut row);
            row
        })
        .collect();
    let log_post = |theta: &[f64]| {
        model.log_prior(theta)
            + rows
                .iter()
                .map(|x| model.log_lik_row(theta, x))
                .sum::<f64>()
    };
    let mut draws = vec![Vec::new(); model.dim()];
    for &seed in seeds {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (mut theta, mut current) = (start.to_vec(), log_post(start));
        let mut chain = vec![Vec::with_capacity(iterations); model.dim()];
        for i in 0..iterations {
            let prop: Vec<f64> = theta
                .iter()
                .map(|t| t + step * rng.sample::<f64, _>(StandardNormal))
                .collect();
            let proposed = log_post(&prop);
            if rng.random::<f64>().ln() < proposed - current {
                (theta, current) = (prop, proposed);
            }
            if i >= iterations / 4 {
                for (c, t) in chain.iter_mut().zip(&theta) {
                    c.push(*t);
                }
            }
        }
        for (d, c) in draws.iter_mut().zip(chain) {
            d.push(c);
        }
    }
    draws
}

/// Logistic and poisson GLMs over 3000 rows split among three parties, at a generous budget
/// (τ = 1e-6: Σσ² negligible) with a run clip of 1e6, so that every row is clipped at the
/// model's public Lipschitz bound instead: the DP chains match a long plain random-walk
/// Metropolis chain on the pooled rows (4 × 40 000 steps), every mean and sd within 4
/// standard errors of the difference. And the clip never binds: on every accepted step,
/// each party's rows recomputed at the bound the party used have no clipped row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn glms_match_a_pooled_non_private_chain() {
    for (name, family, reference_step) in [
        ("logistic GLM", Family::Logistic, 0.05),
        ("poisson GLM", Family::Poisson, 0.025),
    ] {
        let spec = ModelSpec::Glm(GlmSpec::example(family, 3));
        let (model, data) = simulated(&spec, 3000, 61);
        let start = spec.true_theta();
        let clip = 1e6;
        let traces = sample_from(
            &spec,
            &model,
            &data,
            start.clone(),
            Run {
                variant: Variant::Penalty,
                proposal: RW,
                iterations: ITERATIONS,
                parties: 3,
                tau: 1e-6,
                clip,
                proposal_sd: 0.02,
                adapt: true,
                penalise: true,
                seed: 67,
                secure: false,
            },
        )
        .await;
        let noise = mean_noise_variance(&traces);
        assert!(noise < 1e-4, "{name}: noise variance {noise}");
        let reference = reference_chains(
            model.as_ref(),
            &data,
            &start,
            reference_step,
            40_000,
            &[71, 72, 73, 74],
        );
        let mut worst: f64 = 0.0;
        for (j, reference) in reference.iter().enumerate() {
            let dp: Vec<Vec<f64>> = traces.iter().map(|t| t.parameter(j)).collect();
            let what = format!("{name} theta.{}: DP vs plain Metropolis", j + 1);
            let (z, z_sd) = z_between(&what, &dp, reference);
            worst = worst.max(z.abs()).max(z_sd.abs());
        }
        assert!(worst < 4.0, "{name}: worst |z| {worst}");

        let parts = data.split(3);
        let t = model.temperature();
        let (mut moves, mut clipped) = (0, 0);
        for trace in &traces {
            for i in 1..trace.steps() {
                let (a, b) = (trace.draw(i - 1), trace.draw(i));
                if a != b {
                    moves += 1;
                    let bound = t * row_bound(clip, a, b).min(model.ratio_bound(a, b).unwrap());
                    for part in &parts {
                        clipped += model.clipped_llr_sum(part, a, b, bound).clipped;
                    }
                }
            }
        }
        println!("{name}: {moves} accepted steps, {clipped} clipped rows");
        assert!(moves > 1000, "{name}: {moves} accepted steps");
        assert_eq!(clipped, 0, "{name}");
    }
}

/// The gaussian GLM (n = 30 000 over three parties) sampled twice at τ = 0.003 (Σσ² of
/// order 0.5 per step for both): by the per-row clipped ratio (clipped at the model's public
/// bound, which never binds) and by noisy sufficient statistics with eq. 8's variance
/// (Yıldırım & Ermiş 2019, Alg. 3). Each matches the exact posterior, and the two agree with
/// each other within their joint Monte Carlo error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sufficient_statistics_and_per_row_ratios_agree_on_the_gaussian_glm() {
    let s = setup(
        ModelSpec::Glm(GlmSpec::example(Family::Gaussian, 3)),
        30_000,
        13,
    );
    let run = |variant| Run {
        variant,
        proposal: RW,
        iterations: ITERATIONS,
        parties: 3,
        tau: 0.003,
        clip: 1e6,
        proposal_sd: 0.005,
        adapt: true,
        penalise: true,
        seed: 59,
        secure: false,
    };
    let per_row = sample(&s, run(Variant::Penalty)).await;
    let sufficient = sample(&s, run(Variant::SufficientStatistics)).await;
    for (name, traces) in [
        ("per-row", &per_row),
        ("sufficient statistics", &sufficient),
    ] {
        let noise = mean_noise_variance(traces);
        println!("{name}: mean Σσ² = {noise:.3}");
        assert!(
            noise > 0.05,
            "{name}: the noise should matter, Σσ² = {noise}"
        );
        assert_matches_exact(name, &s, traces);
    }
    for j in 0..s.model.dim() {
        let a: Vec<Vec<f64>> = per_row.iter().map(|t| t.parameter(j)).collect();
        let b: Vec<Vec<f64>> = sufficient.iter().map(|t| t.parameter(j)).collect();
        let what = format!("theta.{}: per-row vs sufficient statistics", j + 1);
        let (z, z_sd) = z_between(&what, &a, &b);
        assert!(z.abs() < 4.0 && z_sd.abs() < 4.0, "{what}");
    }
}
