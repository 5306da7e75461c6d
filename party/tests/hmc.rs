//! DP HMC and the private initialiser on a party: their refusals are public decisions
//! (neighbouring rows decide alike), an HMC chain's releases follow the iteration's fixed
//! pattern, the charge is Räisä 2020, Thm 4.3, and a gradient release is the clipped sum plus
//! the noise it states.
mod contract;

use contract::plans::{hmc_plan, initialiser_plan, plan, tau};
use contract::{Call, QueryKind, RunRef, StepAt, decided_alike, step_as};
use fedmcmc_common::accountant::Choice;
use fedmcmc_common::data::Columns;
use fedmcmc_common::mechanism::accounting_budget;
use fedmcmc_common::models::{Model, ModelSpec};
use fedmcmc_common::neighbours::Neighbours;
use fedmcmc_party::PartyNode;
use fedmcmc_party::budget::{Budget, NoiseRequest};
use fedmcmc_party::config::BudgetConfig;
use fedmcmc_party::error::PartyError;
use fedmcmc_party::ledger::Ledger;
use fedmcmc_party::node::{HMC, HmcPlan, INITIALISER, Plan};
use fedmcmc_party::release::StepKey;
use fedmcmc_party::statistics::Query;
use fedmcmc_proto::v1 as pb;
use rand::SeedableRng;
use statrs::function::erf::erfc;

const ROWS: usize = 300;

fn budget() -> BudgetConfig {
    BudgetConfig {
        epsilon: 1e3,
        delta: 1e-5,
        accountant: Choice::default(),
    }
}

/// A gradient step of `chain` in run slot `run` at θ.
fn gradient(run: usize, chain: u32, theta: &[f64]) -> Call {
    step_as(QueryKind::Gradient, run, chain, theta, &[])
}

/// Plans at and beyond every public limit, then hostile gradients, queries out of the
/// iteration's pattern, and a run used up.
///
/// Granted run slots: 0 HMC (L = 2, 3 iterations), 1 initialiser (4 steps), 2 full-data.
fn battery() -> Vec<Call> {
    let ok = (2.0, 0.5);
    let mut calls = vec![
        Call::Open(hmc_plan(1, 3, 2, ok, ok)),
        Call::Open(initialiser_plan(1, 4, 2.0, tau(0.5))),
        Call::Open(plan(1, 5, 2.0, tau(0.5))),
        // Refused: no leapfrog steps, a bad gradient clip or τ, a calibrated HMC plan, steps
        // that are not whole iterations, gradient terms on another variant, a bad clip for
        // the initialiser.
        Call::Open(hmc_plan(1, 3, 0, ok, ok)),
        Call::Open(hmc_plan(1, 3, 2, ok, (0.0, 0.5))),
        Call::Open(hmc_plan(1, 3, 2, ok, (f64::NAN, 0.5))),
        Call::Open(hmc_plan(1, 3, 2, ok, (2.0, -1.0))),
        Call::Open(hmc_plan(1, 3, 2, ok, (2.0, 1e300))),
        Call::Open(pb::RunPlan {
            noise: Some(pb::run_plan::Noise::Calibrate(true)),
            ..hmc_plan(1, 3, 2, ok, ok)
        }),
        Call::Open(pb::RunPlan {
            steps_per_chain: 13,
            ..hmc_plan(1, 3, 2, ok, ok)
        }),
        Call::Open(pb::RunPlan {
            leapfrog_steps: 2,
            gradient_clip: 2.0,
            gradient_tau: 0.5,
            ..plan(1, 5, 2.0, tau(0.5))
        }),
        Call::Open(initialiser_plan(1, 4, 0.0, tau(0.5))),
        Call::Open(initialiser_plan(1, 4, f64::INFINITY, tau(0.5))),
    ];
    let thetas: Vec<Vec<f64>> = vec![
        vec![0.0, 3.0],
        vec![0.0, 1e307],
        vec![1e154, -1e154],
        vec![f64::MAX, -f64::MAX],
        vec![0.0, f64::NAN],
        vec![f64::INFINITY, 0.0],
        vec![0.0],
        vec![0.0, 3.0, 1.0],
    ];
    for theta in &thetas {
        calls.push(gradient(1, 0, theta));
        // A gradient on a full-data run, a ratio on the initialiser: refused.
        calls.push(gradient(2, 0, theta));
        calls.push(step_as(QueryKind::Full, 1, 0, theta, &[0.1, 3.0]));
    }
    // HMC: an iteration is gradient, gradient, gradient, ratio. Out of pattern first (a
    // ratio where a gradient belongs), then in pattern, then a gradient where the ratio
    // belongs, the ratio, and iterations until the run is used up.
    let (th, prop) = ([0.0, 3.0], [0.01, 2.99]);
    calls.push(step_as(QueryKind::Full, 0, 0, &th, &prop));
    for theta in &thetas {
        calls.push(gradient(0, 0, theta));
    }
    calls.push(gradient(0, 0, &th));
    calls.push(step_as(QueryKind::Full, 0, 0, &th, &prop));
    for _ in 0..3 {
        for _ in 0..3 {
            calls.push(gradient(0, 0, &th));
        }
        calls.push(step_as(QueryKind::Full, 0, 0, &th, &prop));
        calls.push(Call::Step {
            kind: QueryKind::Full,
            run: RunRef::Slot(0),
            chain: 0,
            step: StepAt::Last,
            theta: th.to_vec(),
            theta_proposed: prop.to_vec(),
        });
    }
    calls.push(Call::Close(RunRef::Slot(0)));
    calls.push(Call::Close(RunRef::Slot(1)));
    calls
}

#[tokio::test]
async fn hmc_and_initialiser_requests_are_decided_alike_for_neighbouring_rows() {
    for t in decided_alike(ROWS, &battery(), budget()).await {
        assert_eq!(t.granted, 3, "{t:?}");
        assert!(t.released >= 15 && t.refused >= 30, "{t:?}");
    }
}

/// A substitute-neighbour node whose ledger is the file at `path` (opened afresh: a restart).
fn on_disk(path: &std::path::Path) -> (PartyNode, String, Columns) {
    node_on(
        Neighbours::Substitute,
        None,
        budget(),
        Ledger::open(path).unwrap(),
    )
}

/// A node over `ROWS` rows of the flat banana (row `extreme`, if given, replaced by values
/// whose gradient norm overflows) under `neighbours`, with an in-memory ledger.
fn node_on(
    neighbours: Neighbours,
    extreme: Option<usize>,
    budget: BudgetConfig,
    ledger: (Ledger, Vec<fedmcmc_party::ledger::RunRecord>),
) -> (PartyNode, String, Columns) {
    let spec = ModelSpec::flat_banana(2);
    let model = spec.build().unwrap();
    let mut data = model.simulate(
        &spec.true_theta(),
        ROWS,
        &mut rand_chacha::ChaCha8Rng::seed_from_u64(3),
    );
    if let Some(i) = extreme {
        let mut cols: Vec<Vec<f64>> = (0..2).map(|j| data.col(j).to_vec()).collect();
        cols[0][i] = 1e300;
        cols[1][i] = -1e300;
        data = Columns::from_columns(cols).unwrap();
    }
    let fingerprint = model.fingerprint();
    let node = PartyNode::new(
        "p".into(),
        model,
        data.clone(),
        neighbours,
        Budget::new(budget).unwrap(),
        ledger,
    )
    .unwrap();
    (node, fingerprint, data)
}

/// [`node_on`] with an in-memory ledger.
fn node(
    neighbours: Neighbours,
    extreme: Option<usize>,
    budget: BudgetConfig,
) -> (PartyNode, String, Columns) {
    let ledger = (Ledger::in_memory().unwrap(), Vec::new());
    node_on(neighbours, extreme, budget, ledger)
}

fn hmc(iterations: u64, leapfrog_steps: u32, tau_l: f64, tau_g: f64) -> Plan {
    Plan {
        variant: HMC.into(),
        hmc: Some(HmcPlan {
            leapfrog_steps,
            gradient_clip: 1.0,
            gradient_tau: tau_g,
        }),
        ..Plan::full_penalty(
            1,
            iterations * (u64::from(leapfrog_steps) + 2),
            2.0,
            NoiseRequest::Tau(tau_l),
        )
    }
}

/// Räisä 2020, Thm 4.3: δ(ε) of the Gaussian privacy-loss distribution N(μ, 2μ).
fn theorem_4_3_delta(mu: f64, epsilon: f64) -> f64 {
    let r = 2.0 * mu.sqrt();
    0.5 * (erfc((epsilon - mu) / r) - epsilon.exp() * erfc((epsilon + mu) / r))
}

/// The ε at which [`theorem_4_3_delta`] is `delta`, by bisection (δ(ε) decreases in ε).
/// The ε a party with [`budget`] states for a composition of total μ: the accountant's at the
/// δ it is asked about, plus the exact-noise reservation (`fedmcmc_common::mechanism`).
fn charged_epsilon(mu: f64) -> f64 {
    let b = budget();
    let (epsilon, delta) = accounting_budget(b.epsilon, b.delta);
    theorem_4_3_epsilon(mu, delta) + (b.epsilon - epsilon)
}

fn theorem_4_3_epsilon(mu: f64, delta: f64) -> f64 {
    let (mut lo, mut hi) = (0.0, 1.0);
    while theorem_4_3_delta(mu, hi) > delta {
        hi *= 2.0;
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if theorem_4_3_delta(mu, mid) > delta {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// Takes `steps` steps of an HMC chain (L + 1 gradients, then the ratio, per iteration).
async fn walk(node: &PartyNode, run_id: &str, leapfrog_steps: u32, steps: u64) {
    let per = u64::from(leapfrog_steps) + 2;
    let (theta, theta_proposed) = ([0.0, 3.0], [0.01, 2.99]);
    for step in 0..steps {
        let key = StepKey {
            run_id,
            chain: 0,
            step,
        };
        let query = if step % per == per - 1 {
            Query::LogLikRatio {
                theta: &theta,
                theta_proposed: &theta_proposed,
            }
        } else {
            Query::Gradient { theta: &theta }
        };
        node.step(&key, query).await.unwrap();
    }
}

/// Per party, the ε charged for k HMC iterations is Thm 4.3's for (k, L, τ_l, τ_g):
/// μ = k/(2σ′_l²) + k(L + 1)/(2σ′_g²) with σ′² = τ²n, at the party's δ; the grant's ε (the
/// reservation) is the same; and a run closed mid-iteration is charged the releases it made.
#[tokio::test]
async fn the_hmc_charge_is_theorem_4_3() {
    let (node, fingerprint, _) = node(Neighbours::Substitute, None, budget());
    let n = ROWS as f64;
    for (k, l, tau_l, tau_g) in [(5, 3, 0.5, 0.8), (12, 10, 0.3, 0.4), (1, 1, 2.0, 0.2)] {
        let grant = node
            .open_run(hmc(k, l, tau_l, tau_g), &fingerprint)
            .await
            .unwrap();
        let releases = k * (u64::from(l) + 2);
        walk(&node, &grant.run_id, l, releases).await;
        let closed = node.close_run(&grant.run_id).await.unwrap();
        let mu = k as f64 / (2.0 * tau_l * tau_l * n)
            + (k * (u64::from(l) + 1)) as f64 / (2.0 * tau_g * tau_g * n);
        let want = charged_epsilon(mu);
        println!(
            "k = {k}, L = {l}, τ_l = {tau_l}, τ_g = {tau_g}: ε = {:.9} charged, {:.9} granted, Thm 4.3 {want:.9}",
            closed.run_epsilon, grant.run_epsilon
        );
        assert_eq!(closed.releases, releases);
        assert_eq!(grant.releases, releases);
        assert_eq!(grant.tau, tau_l);
        for got in [closed.run_epsilon, grant.run_epsilon] {
            assert!((got - want).abs() <= 1e-9 * want, "{got} vs {want}");
        }
    }
    // Stopped after two gradients and a ratio of the first iteration, and two gradients of
    // the second (L = 3, so 5 releases per iteration): 1 ratio, 4 gradients.
    let grant = node
        .open_run(hmc(5, 3, 0.5, 0.8), &fingerprint)
        .await
        .unwrap();
    walk(&node, &grant.run_id, 3, 7).await;
    let closed = node.close_run(&grant.run_id).await.unwrap();
    let mu = 1.0 / (2.0 * 0.25 * n) + 6.0 / (2.0 * 0.64 * n);
    let want = charged_epsilon(mu);
    assert_eq!(closed.releases, 7);
    assert!(
        (closed.run_epsilon - want).abs() <= 1e-9 * want,
        "{} vs {want}",
        closed.run_epsilon
    );
}

/// The initialiser's releases are plain Gaussian gradient releases at τ_g: k of them cost
/// μ = k/(2τ_g²n).
#[tokio::test]
async fn the_initialiser_charge_is_its_gradient_releases() {
    let (node, fingerprint, _) = node(Neighbours::AddRemove, None, budget());
    let plan = Plan {
        variant: INITIALISER.into(),
        ..Plan::full_penalty(2, 6, 1.5, NoiseRequest::Tau(0.7))
    };
    let grant = node.open_run(plan, &fingerprint).await.unwrap();
    for chain in 0..2 {
        for step in 0..6 {
            let key = StepKey {
                run_id: &grant.run_id,
                chain,
                step,
            };
            node.step(&key, Query::Gradient { theta: &[0.0, 3.0] })
                .await
                .unwrap();
        }
    }
    let closed = node.close_run(&grant.run_id).await.unwrap();
    let want = charged_epsilon(12.0 / (2.0 * 0.49 * ROWS as f64));
    assert!((closed.run_epsilon - want).abs() <= 1e-9 * want);
}

/// A gradient release is T·Σ clip_{b_g}(∇ℓ(x|θ)) plus N(0, σ²) per entry with the σ² it
/// states: (τ_g√n·(2·T·b_g + √2·γ))² under substitution, (τ_g√n·(T·b_g + √2·γ))² under
/// addition or removal, γ the public grid the two entries are rounded to.
/// With τ_g small, the value is the clipped sum computed row by row here, a row whose
/// gradient norm overflows contributing nothing.
#[tokio::test]
async fn a_gradient_release_is_the_clipped_sum_with_its_stated_noise() {
    for (neighbours, factor) in [(Neighbours::Substitute, 2.0), (Neighbours::AddRemove, 1.0)] {
        let generous = BudgetConfig {
            epsilon: 1e9,
            ..budget()
        };
        let (node, fingerprint, data) = node(neighbours, Some(17), generous);
        let model: std::sync::Arc<dyn Model> = ModelSpec::flat_banana(2).build().unwrap();
        let tau_g = 1e-4;
        let grant = node
            .open_run(hmc(1, 1, 0.5, tau_g), &fingerprint)
            .await
            .unwrap();
        let theta = [0.2, 2.5];
        let answer = node
            .step(
                &StepKey {
                    run_id: &grant.run_id,
                    chain: 0,
                    step: 0,
                },
                Query::Gradient { theta: &theta },
            )
            .await
            .unwrap();
        let clip = 1.0;
        // Rounded to the grid γ of s·Δ: the two entries add √2·γ to Δ.
        let (s, delta) = (tau_g * (ROWS as f64).sqrt(), factor * clip);
        let grid = fedmcmc_common::mechanism::grid_step(s * delta).unwrap();
        let sigma = s * (delta + 2f64.sqrt() * grid);
        assert!((answer.noise_variance - sigma * sigma).abs() <= 1e-12 * sigma * sigma);
        let mut want = [0.0; 2];
        let (mut row, mut g) = ([0.0; 2], [0.0; 2]);
        let mut clipped = 0;
        for i in 0..data.n() {
            data.row_into(i, &mut row);
            model.grad_log_lik_row(&theta, &row, &mut g);
            let norm = (g[0] * g[0] + g[1] * g[1]).sqrt();
            if !norm.is_finite() {
                clipped += 1;
                continue;
            }
            let scale = if norm > clip {
                clipped += 1;
                clip / norm
            } else {
                1.0
            };
            want[0] += scale * g[0];
            want[1] += scale * g[1];
        }
        assert!(clipped > 1, "the clip must bind for some rows");
        for j in 0..2 {
            assert!(
                (answer.value[j] - want[j]).abs() <= 6.0 * sigma + 1e-9 * want[j].abs(),
                "{:?} vs {want:?}",
                answer.value
            );
        }
        // A ratio where the next gradient belongs is refused, publicly.
        let err = node
            .step(
                &StepKey {
                    run_id: &grant.run_id,
                    chain: 0,
                    step: 1,
                },
                Query::LogLikRatio {
                    theta: &theta,
                    theta_proposed: &theta,
                },
            )
            .await
            .unwrap_err();
        assert!(
            matches!(&err, PartyError::FailedPrecondition(m) if m.contains("gradient")),
            "{err:?}"
        );
    }
}

/// An open HMC run read back after a restart still reserves its whole plan, its chain goes
/// on where it stood, and once closed it is charged its releases at their own multipliers,
/// which a second restart reads back unchanged.
#[tokio::test]
async fn an_hmc_run_survives_restarts_with_its_reservation_and_its_charge() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let start = || on_disk(&path);
    let (first, fingerprint, _) = start();
    let grant = first
        .open_run(hmc(5, 3, 0.5, 0.8), &fingerprint)
        .await
        .unwrap();
    walk(&first, &grant.run_id, 3, 7).await;
    let reserved = first.describe().epsilon_committed;
    assert!((reserved - grant.run_epsilon).abs() <= 1e-12 * reserved);
    drop(first);

    let (second, _, _) = start();
    assert_eq!(second.describe().epsilon_committed, reserved);
    // The chain stands at step 7: the third gradient of the second iteration.
    let key = StepKey {
        run_id: &grant.run_id,
        chain: 0,
        step: 7,
    };
    second
        .step(&key, Query::Gradient { theta: &[0.0, 3.0] })
        .await
        .unwrap();
    let closed = second.close_run(&grant.run_id).await.unwrap();
    // 1 ratio, 7 gradients.
    let n = ROWS as f64;
    let want = charged_epsilon(1.0 / (2.0 * 0.25 * n) + 7.0 / (2.0 * 0.64 * n));
    assert!((closed.run_epsilon - want).abs() <= 1e-9 * want);
    assert!((closed.epsilon_committed - want).abs() <= 1e-9 * want);
    drop(second);

    let (third, _, _) = start();
    let after = third.describe().epsilon_committed;
    assert!((after - want).abs() <= 1e-9 * want, "{after} vs {want}");
}

/// Step `step` of chain 0 of an HMC run with L = 1 (gradient, gradient, ratio per
/// iteration): the ratio of step 2 at θ′ = θ, that of step 5 at a θ′ that moved.
async fn ask(node: &PartyNode, run_id: &str, step: u64) -> fedmcmc_party::release::Contribution {
    let (theta, moved) = ([0.0, 3.0], [0.01, 2.99]);
    let key = StepKey {
        run_id,
        chain: 0,
        step,
    };
    let query = match step {
        2 => Query::LogLikRatio {
            theta: &theta,
            theta_proposed: &theta,
        },
        5 => Query::LogLikRatio {
            theta: &theta,
            theta_proposed: &moved,
        },
        _ => Query::Gradient { theta: &theta },
    };
    node.step(&key, query).await.unwrap()
}

/// The coordinator's HMC kernel asks the ratio at θ′ = θ when a trajectory diverges. That
/// answer is public (0 for every dataset, noise variance 0) and not charged: the run is
/// charged its gradients and its other ratios (Thm 4.3), after a restart of its durable
/// ledger too, which reads the public answer back as a step of the chain (a retry replays
/// it) and not as a release.
#[tokio::test]
async fn an_hmc_ratio_of_theta_to_itself_is_a_step_without_a_charge() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let start = || on_disk(&path);
    let (first, fingerprint, _) = start();
    let grant = first
        .open_run(hmc(3, 1, 0.5, 0.8), &fingerprint)
        .await
        .unwrap();
    for step in 0..3 {
        ask(&first, &grant.run_id, step).await;
    }
    let public = ask(&first, &grant.run_id, 2).await;
    assert!(public.replayed);
    assert_eq!(
        (public.value.as_slice(), public.noise_variance),
        (&[0.0][..], 0.0)
    );
    drop(first);

    let (second, _, _) = start();
    // The chain stands at step 3; step 2, the public answer read back, replays.
    let again = ask(&second, &grant.run_id, 2).await;
    assert!(again.replayed);
    assert_eq!(again, public);
    for step in 3..7 {
        ask(&second, &grant.run_id, step).await;
    }
    let closed = second.close_run(&grant.run_id).await.unwrap();
    // 1 ratio (step 5), 5 gradients (steps 0, 1, 3, 4, 6); step 2 is free.
    let n = ROWS as f64;
    let want = charged_epsilon(1.0 / (2.0 * 0.25 * n) + 5.0 / (2.0 * 0.64 * n));
    println!(
        "7 steps, 6 charged: ε = {:.9}, Thm 4.3 {want:.9}",
        closed.run_epsilon
    );
    assert_eq!(closed.releases, 6);
    assert!((closed.run_epsilon - want).abs() <= 1e-9 * want);
    assert!((closed.epsilon_committed - want).abs() <= 1e-9 * want);
    drop(second);

    let (third, _, _) = start();
    let after = third.describe().epsilon_committed;
    assert!((after - want).abs() <= 1e-9 * want, "{after} vs {want}");
}
