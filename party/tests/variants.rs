//! The minibatch variants on a party: their refusals are public decisions (neighbouring rows
//! decide alike), their charge is the accountant's answer for their mechanism, and their
//! releases carry the noise they state.
mod contract;

use contract::{Call, QueryKind, barker_plan, decided_alike, minibatch_plan, plan, step_as, tau};
use fedmcmc_common::accountant::{Choice, Composition, MechanismKind, Method, Release};
use fedmcmc_common::models::ModelSpec;
use fedmcmc_common::neighbours::Neighbours;
use fedmcmc_party::PartyNode;
use fedmcmc_party::budget::{Budget, NoiseRequest};
use fedmcmc_party::config::BudgetConfig;
use fedmcmc_party::error::PartyError;
use fedmcmc_party::ledger::Ledger;
use fedmcmc_party::node::{BARKER, MINIBATCH_PENALTY, Plan};
use fedmcmc_party::release::StepKey;
use fedmcmc_party::statistics::Query;
use fedmcmc_proto::v1 as pb;
use rand::SeedableRng;

const ROWS: usize = 300;

fn budget() -> BudgetConfig {
    BudgetConfig {
        // Large: DP Barker's bound at small batches is costly, and a calibrated plan takes
        // whatever is left. RDP, which covers every variant and answers in microseconds.
        epsilon: 1e5,
        delta: 1e-5,
        accountant: Choice::Only(Method::Rdp),
    }
}

/// Plans at and beyond every public limit of the two variants, then hostile steps on the
/// granted runs, wrong queries for a run's variant, and an exhausted run.
///
/// Granted run slots: 0 minibatch (b = 100), 1 Barker (b = 60), 2 Barker (b = 16),
/// 3 full-data, 4 a three-step minibatch run, 5 a calibrated minibatch run (b = ROWS), last
/// since it takes whatever budget is left.
fn battery() -> Vec<Call> {
    let n = ROWS as u64;
    let calibrate = pb::run_plan::Noise::Calibrate(true);
    let mut calls = vec![
        Call::Open(minibatch_plan(2, 200, 2.0, 100, tau(0.5))),
        Call::Open(barker_plan(2, 200, 60, 2.0)),
        Call::Open(barker_plan(1, 50, 16, 0.5)),
        Call::Open(plan(1, 50, 2.0, tau(0.5))),
        Call::Open(minibatch_plan(1, 3, 2.0, 10, tau(0.5))),
        Call::Open(minibatch_plan(1, 50, 2.0, n, calibrate)),
        // Refused: batches outside [2, n] or [16, n], shares outside (0, π²/3), a Barker
        // clip or τ, a batch for the full-data variant.
        Call::Open(minibatch_plan(1, 5, 2.0, 0, tau(0.5))),
        Call::Open(minibatch_plan(1, 5, 2.0, 1, tau(0.5))),
        Call::Open(minibatch_plan(1, 5, 2.0, n + 1, tau(0.5))),
        Call::Open(minibatch_plan(1, 5, 1e308, 100, tau(0.5))),
        Call::Open(barker_plan(1, 5, 15, 2.0)),
        Call::Open(barker_plan(1, 5, n + 1, 2.0)),
        Call::Open(barker_plan(1, 5, 60, 0.0)),
        Call::Open(barker_plan(1, 5, 60, -1.0)),
        Call::Open(barker_plan(1, 5, 60, f64::NAN)),
        Call::Open(barker_plan(1, 5, 60, 3.3)),
        Call::Open(pb::RunPlan {
            clip: 2.0,
            ..barker_plan(1, 5, 60, 2.0)
        }),
        Call::Open(pb::RunPlan {
            noise: Some(tau(0.5)),
            ..barker_plan(1, 5, 60, 2.0)
        }),
        Call::Open(pb::RunPlan {
            batch_size: 50,
            ..plan(1, 5, 2.0, tau(0.5))
        }),
    ];
    let pairs: Vec<(Vec<f64>, Vec<f64>)> = vec![
        (vec![0.0, 3.0], vec![0.01, 2.99]),
        (vec![0.0, 3.0], vec![0.0, 3.0]),
        (vec![0.0, 1e307], vec![1.0, 1e307]),
        (vec![1e154, 0.0], vec![-1e154, 0.0]),
        (vec![0.0, 3.0], vec![5e-324, 3.0]),
        (vec![f64::MAX, -f64::MAX], vec![-f64::MAX, f64::MAX]),
        (vec![0.0, f64::NAN], vec![0.0, 3.0]),
        (vec![0.0], vec![0.0, 3.0]),
    ];
    for (theta, prop) in &pairs {
        calls.push(step_as(QueryKind::Minibatch, 0, 0, theta, prop));
        calls.push(step_as(QueryKind::Minibatch, 5, 0, theta, prop));
        calls.push(step_as(QueryKind::Barker, 1, 1, theta, prop));
        calls.push(step_as(QueryKind::Barker, 2, 0, theta, prop));
        // Each run answers its own variant's query only.
        calls.push(step_as(QueryKind::Full, 0, 0, theta, prop));
        calls.push(step_as(QueryKind::Barker, 0, 0, theta, prop));
        calls.push(step_as(QueryKind::Minibatch, 1, 0, theta, prop));
        calls.push(step_as(QueryKind::Minibatch, 3, 0, theta, prop));
    }
    for _ in 0..4 {
        calls.push(step_as(
            QueryKind::Minibatch,
            4,
            0,
            &[0.0, 3.0],
            &[0.5, 2.5],
        ));
    }
    calls
}

#[tokio::test]
async fn minibatch_and_barker_requests_are_decided_alike_for_neighbouring_rows() {
    for t in decided_alike(ROWS, &battery(), budget()).await {
        assert_eq!(t.granted, 6, "{t:?}");
        assert!(t.released >= 15 && t.refused >= 40, "{t:?}");
    }
}

/// A node over `ROWS` banana rows under `neighbours`, in-memory ledger, seeded noise.
fn node(neighbours: Neighbours, budget: BudgetConfig) -> (PartyNode, String) {
    let spec = ModelSpec::flat_banana(2);
    let model = spec.build().unwrap();
    let data = model.simulate(
        &spec.true_theta(),
        ROWS,
        &mut rand_chacha::ChaCha8Rng::seed_from_u64(3),
    );
    let fingerprint = model.fingerprint();
    let node = PartyNode::new(
        "p".into(),
        model,
        data,
        neighbours,
        Budget::new(budget).unwrap(),
        (Ledger::in_memory().unwrap(), Vec::new()),
    )
    .unwrap();
    (node, fingerprint)
}

fn minibatch(batch: u64, noise: NoiseRequest) -> Plan {
    Plan {
        variant: MINIBATCH_PENALTY.into(),
        batch_size: Some(batch),
        ..Plan::full_penalty(1, 20, 2.0, noise)
    }
}

fn barker(batch: u64, share: f64) -> Plan {
    Plan {
        variant: BARKER.into(),
        batch_size: Some(batch),
        barker_variance: Some(share),
        ..Plan::full_penalty(1, 20, 0.0, NoiseRequest::Calibrate)
    }
}

/// Runs `steps` steps of `query` on a fresh run of `plan`, closes it, and returns the grant's
/// noise multiplier and the run's ε as the party charged it.
async fn charged(node: &PartyNode, fingerprint: &str, plan: Plan, steps: u64) -> (f64, f64) {
    let variant = plan.variant.clone();
    let grant = node.open_run(plan, fingerprint).await.unwrap();
    for step in 0..steps {
        let key = StepKey {
            run_id: &grant.run_id,
            chain: 0,
            step,
        };
        let (theta, theta_proposed) = ([0.0, 3.0], [0.05, 2.95]);
        let query = if variant == BARKER {
            Query::BarkerLogLikRatio {
                theta: &theta,
                theta_proposed: &theta_proposed,
            }
        } else {
            Query::MinibatchLogLikRatio {
                theta: &theta,
                theta_proposed: &theta_proposed,
            }
        };
        node.step(&key, query).await.unwrap();
    }
    let closed = node.close_run(&grant.run_id).await.unwrap();
    assert_eq!(closed.releases, steps);
    (grant.noise_multiplier, closed.run_epsilon)
}

/// Per party, the ε charged for a run is the accountant's answer for its mechanism (batch
/// without replacement at q = b/n, or one DP Barker iteration), its noise multiplier and its
/// releases.
#[tokio::test]
async fn the_charge_is_the_accountants_answer_for_the_mechanism() {
    let config = budget();
    let (node, fingerprint) = node(Neighbours::Substitute, config);
    let n = ROWS as u64;
    for (plan, mechanism, steps) in [
        (
            minibatch(100, NoiseRequest::Tau(0.3)),
            MechanismKind::BatchGaussian {
                batch: 100,
                population: n,
            },
            7,
        ),
        (
            barker(60, 2.0),
            MechanismKind::DpBarker {
                batch: 60,
                population: n,
            },
            9,
        ),
        // Last: a calibrated plan takes whatever is left.
        (
            minibatch(30, NoiseRequest::Calibrate),
            MechanismKind::BatchGaussian {
                batch: 30,
                population: n,
            },
            12,
        ),
    ] {
        let (s, epsilon) = charged(&node, &fingerprint, plan, steps).await;
        let composition = Composition::new(
            vec![Release {
                mechanism,
                noise_multiplier: s,
                count: steps as f64,
            }],
            Neighbours::Substitute,
        )
        .unwrap();
        let expected = config
            .accountant
            .epsilon(&composition, config.delta)
            .unwrap()
            .estimate
            .value;
        println!(
            "{mechanism:?}, s = {s:.4}, {steps} releases: ε = {epsilon:.6} (accountant {expected:.6})"
        );
        assert_eq!(epsilon, expected, "{mechanism:?}");
        assert!(epsilon > 0.0);
    }
}

/// DP Barker's multiplier is fixed by its batch, √(b/2), whatever the share.
#[tokio::test]
async fn barker_noise_follows_from_the_batch() {
    let (node, fingerprint) = node(Neighbours::Substitute, budget());
    for (batch, share) in [(16, 0.5), (60, 2.0), (300, 1.0)] {
        let (s, _) = charged(&node, &fingerprint, barker(batch, share), 1).await;
        assert!(
            (s - (batch as f64 / 2.0).sqrt()).abs() < 1e-12 * s,
            "b = {batch}: s = {s}"
        );
    }
}

/// A party that states add/remove neighbours refuses the minibatch variants (their bounds
/// are for substitution), naming why, and Describe lists only the full-data ones.
#[tokio::test]
async fn add_remove_parties_refuse_the_minibatch_variants() {
    let (node, fingerprint) = node(Neighbours::AddRemove, budget());
    assert_eq!(
        node.describe().variants,
        vec!["full-penalty", "hmc", "initialiser"]
    );
    for plan in [minibatch(100, NoiseRequest::Tau(0.3)), barker(60, 2.0)] {
        match node.open_run(plan, &fingerprint).await {
            Err(PartyError::Unimplemented(m)) => {
                assert!(m.contains("substitute") && m.contains("add-remove"), "{m}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}
