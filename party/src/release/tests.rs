//! The release path's unit tests.
use std::sync::Arc;

use fedmcmc_common::clip;
use fedmcmc_common::data::Columns;
use fedmcmc_common::models::ModelSpec;
use fedmcmc_common::neighbours::Neighbours;
use rand::SeedableRng;

use super::*;
use crate::budget::{Budget, NoiseRequest};
use crate::config::BudgetConfig;
use crate::ledger::Ledger;
use crate::node::{PartyNode, Plan};
use crate::noise::NoiseSource;

/// T·Σ_x clip(r_x, b) over the rows, r_x the untempered ratio, straight from the model's
/// per-row log-likelihood (which is tempered: T·ℓ), not through the hot loop.
fn tempered_clipped_sum(
    model: &dyn fedmcmc_common::models::Model,
    data: &Columns,
    theta: &[f64],
    prop: &[f64],
    b: f64,
) -> (f64, u64) {
    let t = model.temperature();
    let mut row = vec![0.0; data.d()];
    let (mut sum, mut clipped) = (0.0, 0);
    for i in 0..data.n() {
        data.row_into(i, &mut row);
        let r = (model.log_lik_row(prop, &row) - model.log_lik_row(theta, &row)) / t;
        clipped += u64::from(r.abs() > b);
        sum += t * r.clamp(-b, b);
    }
    (sum, clipped)
}

/// A node over `rows` rows simulated from `spec` (seed `data_seed`) with a generous budget,
/// a ledger in `dir` and noise seeded with `noise_seed`; and its model.
fn seeded_node(
    spec: &ModelSpec,
    rows: usize,
    data_seed: u64,
    noise_seed: u64,
    ledger: (Ledger, Vec<crate::ledger::RunRecord>),
) -> (PartyNode, Arc<dyn fedmcmc_common::models::Model>) {
    let model = spec.build().unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(data_seed);
    let data = model.simulate(&spec.true_theta(), rows, &mut rng);
    let budget = Budget::new(BudgetConfig {
        epsilon: 1e6,
        delta: 0.5,
        accountant: Default::default(),
    })
    .unwrap();
    let node = PartyNode::with_noise(
        "test".into(),
        Arc::clone(&model),
        data,
        Neighbours::Substitute,
        budget,
        ledger,
        NoiseSource::seeded(noise_seed),
    )
    .unwrap();
    (node, model)
}

fn ledger_in(dir: &std::path::Path) -> (Ledger, Vec<crate::ledger::RunRecord>) {
    Ledger::open(&dir.join("ledger.sqlite")).unwrap()
}

/// The answers to steps 0 … n − 1 of chain 0 of run `run_id`, each asking `query`.
async fn steps(node: &PartyNode, run_id: &str, n: u64, query: Query<'_>) -> Vec<Contribution> {
    let mut answers = Vec::with_capacity(n as usize);
    for step in 0..n {
        let key = StepKey {
            run_id,
            chain: 0,
            step,
        };
        answers.push(node.step(&key, query).await.unwrap());
    }
    answers
}

/// The sample mean and unbiased variance.
fn mean_var(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var)
}

/// Releases at fixed (θ, θ′) are T·Σ clip(r_x, b) over the untempered ratios r_x, with
/// b = clip·‖θ′ − θ‖, rounded to the public grid γ of s·2·T·b, plus exact discrete noise
/// with the stated σ² = (s·(2·T·b + γ))², every value a multiple of γ: the sample mean is
/// within 4 standard errors of that sum and the sample variance within 4 of its own
/// standard errors (√(2/(N−1))·σ²) of σ². Seeded noise, fixed data; the clip binds for
/// some rows but not all.
async fn check_releases(spec: ModelSpec, clip: f64, theta: [f64; 2], prop: [f64; 2]) {
    const N: u64 = 4000;
    let dir = tempfile::tempdir().unwrap();
    let (node, model) = seeded_node(&spec, 5_000, 11, 2024, ledger_in(dir.path()));
    let grant = node
        .open_run(
            Plan::full_penalty(1, N, clip, NoiseRequest::Tau(0.02)),
            &model.fingerprint(),
        )
        .await
        .unwrap();
    let b = clip::row_bound(clip, &theta, &prop);
    let (exact, clipped) = tempered_clipped_sum(model.as_ref(), &node.data, &theta, &prop, b);
    assert!(
        clipped > 0 && clipped < node.data.n() as u64,
        "the clip should bind for some rows: {clipped}"
    );
    // Δ = 2·T·b, and the statistic is rounded to the grid of s·Δ, which adds √1·γ to Δ.
    let (s, delta) = (grant.noise_multiplier, 2.0 * model.temperature() * b);
    let grid = fedmcmc_common::mechanism::grid_step(s * delta).unwrap();
    let expected_var = (s * (delta + grid)).powi(2);
    let query = Query::LogLikRatio {
        theta: &theta,
        theta_proposed: &prop,
    };
    let mut values = Vec::with_capacity(N as usize);
    for c in steps(&node, &grant.run_id, N, query).await {
        assert!((c.noise_variance - expected_var).abs() <= 1e-12 * expected_var);
        assert_eq!(
            (c.value[0] / grid).fract(),
            0.0,
            "releases are on the public grid"
        );
        values.push(c.value[0]);
    }
    let n = N as f64;
    let (mean, var) = mean_var(&values);
    let z_mean = (mean - exact) / (expected_var / n).sqrt();
    let z_var = (var / expected_var - 1.0) / (2.0 / (n - 1.0)).sqrt();
    println!("{N} releases: z(mean) = {z_mean:+.2}, z(variance) = {z_var:+.2}");
    assert!(
        z_mean.abs() < 4.0,
        "mean {mean} vs exact {exact}: z = {z_mean}"
    );
    assert!(
        z_var.abs() < 4.0,
        "variance {var} vs stated {expected_var}: z = {z_var}"
    );
}

#[tokio::test]
async fn releases_are_unbiased_with_the_stated_variance() {
    check_releases(ModelSpec::flat_banana(2), 0.5, [0.0, 3.0], [0.004, 2.997]).await;
}

/// The thesis's tempered banana (T = 1000/n) with its clip 5: the clip bounds the
/// untempered ratio, so noise and clipped sum scale with T (Räisä 2020, Lemma 3.4).
#[tokio::test]
async fn tempered_releases_clip_the_untempered_ratio() {
    let spec = ModelSpec::tempered_banana(2, 100_000);
    check_releases(spec, 5.0, [0.0, 3.0], [0.5, 2.95]).await;
}
/// DP Barker's releases at fixed (θ, θ′) carry the stated total variance Cᵢ: the batch's
/// own spread plus the top-up. Over 3000 releases (seeded noise, fixed rows) the sample
/// variance is within 4 of its standard errors of Cᵢ, allowing below for the
/// finite-population factor 1 − b/n by which a batch drawn without replacement varies
/// less than the estimate σ²_b assumes. The proposal is long enough that the batch's own
/// variance is a good part of Cᵢ.
#[tokio::test]
async fn barker_releases_carry_their_share_of_c() {
    const N: u64 = 3000;
    let (rows, batch, share) = (20_000, 200u64, 1.5);
    let dir = tempfile::tempdir().unwrap();
    let (node, model) = seeded_node(
        &ModelSpec::flat_banana(2),
        rows,
        5,
        77,
        ledger_in(dir.path()),
    );
    let plan = Plan {
        variant: crate::node::BARKER.into(),
        batch_size: Some(batch),
        barker_variance: Some(share),
        ..Plan::full_penalty(1, N, 0.0, NoiseRequest::Calibrate)
    };
    let grant = node.open_run(plan, &model.fingerprint()).await.unwrap();
    let (theta, theta_proposed) = ([0.0, 3.0], [0.3, 2.4]);
    let query = Query::BarkerLogLikRatio {
        theta: &theta,
        theta_proposed: &theta_proposed,
    };
    let mut values = Vec::with_capacity(N as usize);
    for c in steps(&node, &grant.run_id, N, query).await {
        assert!((c.noise_variance - share).abs() < 1e-12 * share);
        values.push(c.value[0]);
    }
    let n = N as f64;
    let (_, var) = mean_var(&values);
    let fpc = 1.0 - batch as f64 / rows as f64;
    let se = (2.0 / (n - 1.0)).sqrt();
    println!("Barker releases: variance {var:.4} vs share {share} (fpc {fpc:.3})");
    assert!(
        var <= share * (1.0 + 4.0 * se) && var >= share * (fpc - 4.0 * se),
        "variance {var} vs share {share}"
    );
}

/// A machine crash: releases are not fsync'd one by one, so a party restarted on another
/// boot after a stop that was not clean refuses every step of a run it had open (a replay
/// too: no step is answered again, with fresh noise or not) and stays charged the run's
/// whole plan, which CloseRun then reports.
#[tokio::test]
async fn after_a_machine_crash_a_run_answers_nothing_more_and_keeps_its_whole_charge() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let at_boot = |boot: &str| Ledger::open_at_boot(&path, Some(boot.to_string())).unwrap();
    let spec = ModelSpec::flat_banana(2);
    let (node, model) = seeded_node(&spec, 1_000, 1, 2, at_boot("boot-a"));
    let plan = Plan::full_penalty(1, 10, 0.5, NoiseRequest::Tau(0.02));
    let run_id = node
        .open_run(plan, &model.fingerprint())
        .await
        .unwrap()
        .run_id;
    let (theta, theta_proposed) = ([0.0, 3.0], [0.01, 2.99]);
    let query = Query::LogLikRatio {
        theta: &theta,
        theta_proposed: &theta_proposed,
    };
    steps(&node, &run_id, 3, query).await;
    let committed = node.describe().epsilon_committed;
    drop(node);
    // What a machine crash leaves: the marker of a stop that was not clean.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute("UPDATE boot SET clean = 0", [])
        .unwrap();
    let (node, _) = seeded_node(&spec, 1_000, 1, 3, at_boot("boot-b"));
    for step in [2, 3] {
        let key = StepKey {
            run_id: &run_id,
            chain: 0,
            step,
        };
        match node.step(&key, query).await {
            Err(PartyError::FailedPrecondition(m)) => {
                assert!(m.contains("charged its whole plan"), "{m}")
            }
            other => panic!("step {step} of a run open at the crash: {other:?}"),
        }
    }
    let description = node.describe();
    assert_eq!(description.open_runs, 0);
    let tolerance = 1e-9 * committed;
    assert!((description.epsilon_committed - committed).abs() <= tolerance);
    let closed = node.close_run(&run_id).await.unwrap();
    assert_eq!(closed.releases, 10);
    assert!((closed.epsilon_committed - committed).abs() <= tolerance);
}
