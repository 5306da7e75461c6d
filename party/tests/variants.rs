//! The minibatch variants on a party: their refusals are public decisions (neighbouring rows
//! decide alike), their charge is the accountant's answer for their mechanism, and their
//! releases carry the noise they state.
mod contract;

use contract::plans::{barker_plan, minibatch_plan, plan, tau};
use contract::{Call, QueryKind, decided_alike, step_as};
use fedmcmc_common::accountant::{Choice, Composition, MechanismKind, Method, Release};
use fedmcmc_common::mechanism::accounting_budget;
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
        let expected = epsilon_of(mechanism, s, steps);
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

/// The accountant's ε for `count` releases of `mechanism` at multiplier `s`, at the party's δ.
/// The ε the party states for `count` releases: its accountant's at the (ε, δ) it asks
/// about, plus the reservation for exact discrete noise (`fedmcmc_common::mechanism`).
fn epsilon_of(mechanism: MechanismKind, s: f64, count: u64) -> f64 {
    let config = budget();
    let (epsilon, delta) = accounting_budget(config.epsilon, config.delta);
    let composition = Composition::new(
        vec![Release {
            mechanism,
            noise_multiplier: s,
            count: count as f64,
        }],
        Neighbours::Substitute,
    )
    .unwrap();
    config
        .accountant
        .epsilon(&composition, delta)
        .unwrap()
        .estimate
        .value
        + (config.epsilon - epsilon)
}

/// A DP Barker share so small that no step could be answered with it (its noise variance,
/// which is the share, underflows below f64's smallest normal number; or its clip underflows
/// to 0) is refused at OpenRun with INVALID_ARGUMENT, alike for neighbouring rows, before
/// anything is reserved. Around the threshold, a share is granted exactly when a step of it
/// is answered, with the share as its noise variance.
#[tokio::test]
async fn a_barker_share_too_small_to_answer_is_refused_at_open_run() {
    let (theta, prop) = ([0.0, 3.0], [0.05, 2.95]);
    let calls = vec![
        Call::Open(barker_plan(1, 5, 60, 1e-310)),
        Call::Open(barker_plan(1, 5, 16, 5e-324)),
        Call::Open(barker_plan(1, 5, 60, 1e-300)),
        step_as(QueryKind::Barker, 0, 0, &theta, &prop),
    ];
    for t in decided_alike(ROWS, &calls, budget()).await {
        for (d, share) in t.decisions[..2].iter().zip(["1e-310", "5e-324"]) {
            assert!(
                contract::refused(tonic::Code::InvalidArgument, "too small")(d),
                "{d:?}"
            );
            let contract::Decision::Refused { message, .. } = d else {
                unreachable!()
            };
            assert!(message.contains(share), "{message}");
            assert!(message.contains("no step could be answered"), "{message}");
        }
        assert!(matches!(t.decisions[2], contract::Decision::Granted { .. }));
        let contract::Decision::Released { noise_variance, .. } = t.decisions[3] else {
            panic!("{:?}", t.decisions[3]);
        };
        let v = f64::from_bits(noise_variance);
        assert!((v - 1e-300).abs() <= 1e-12 * 1e-300, "{v}");
    }

    let (node, fingerprint) = node(Neighbours::Substitute, budget());
    for share in [1e-310, 5e-324] {
        let err = node.open_run(barker(60, share), &fingerprint).await;
        assert!(
            matches!(err, Err(PartyError::InvalidArgument(_))),
            "{err:?}"
        );
    }
    let d = node.describe();
    assert_eq!((d.open_runs, d.epsilon_committed), (0, 0.0));

    // Around f64::MIN_POSITIVE: granted iff a step is answered.
    let (mut granted, mut refused) = (0, 0);
    for batch in [16, 60, ROWS as u64] {
        for f in [0.98, 0.995, 0.999_999, 1.0, 1.000_001, 1.005, 1.02] {
            let share = f64::MIN_POSITIVE * f;
            match node.open_run(barker(batch, share), &fingerprint).await {
                Ok(grant) => {
                    granted += 1;
                    let key = StepKey {
                        run_id: &grant.run_id,
                        chain: 0,
                        step: 0,
                    };
                    let query = Query::BarkerLogLikRatio {
                        theta: &theta,
                        theta_proposed: &prop,
                    };
                    let answer = node.step(&key, query).await;
                    let answer =
                        answer.unwrap_or_else(|e| panic!("b = {batch}, C = {share:e}: {e}"));
                    assert!(answer.noise_variance >= f64::MIN_POSITIVE);
                    node.close_run(&grant.run_id).await.unwrap();
                }
                Err(PartyError::InvalidArgument(m)) if m.contains("too small") => refused += 1,
                Err(e) => panic!("b = {batch}, C = {share:e}: {e}"),
            }
        }
    }
    println!("around the threshold: {granted} granted, {refused} refused");
    assert!(granted > 0 && refused > 0);
}

/// A ratio query whose θ′ is θ bit for bit has the value 0 for every dataset. Each ratio
/// variant answers it without a charge (0 with noise variance 0 for the penalty variants, 0
/// plus noise of the run's share for DP Barker, whose coordinator needs ΣCᵢ), as a step: the
/// chain advances, a retry replays the same answer, and the run is charged only its other
/// releases. Alike for neighbouring rows.
#[tokio::test]
async fn a_ratio_of_theta_to_itself_is_answered_without_a_charge() {
    let (same, theta, prop) = ([0.3, 2.5], [0.0, 3.0], [0.05, 2.95]);
    let kinds = [QueryKind::Full, QueryKind::Minibatch, QueryKind::Barker];
    let mut calls = vec![
        Call::Open(plan(1, 4, 2.0, tau(0.5))),
        Call::Open(minibatch_plan(1, 4, 2.0, 100, tau(0.5))),
        Call::Open(barker_plan(1, 4, 60, 2.0)),
    ];
    for (slot, kind) in kinds.into_iter().enumerate() {
        calls.push(step_as(kind, slot, 0, &same, &same));
        calls.push(Call::Step {
            kind,
            run: contract::RunRef::Slot(slot),
            chain: 0,
            step: contract::StepAt::Last,
            theta: same.to_vec(),
            theta_proposed: same.to_vec(),
        });
        calls.push(step_as(kind, slot, 0, &theta, &prop));
        calls.push(step_as(kind, slot, 0, &same, &same));
        calls.push(Call::Close(contract::RunRef::Slot(slot)));
    }
    for t in decided_alike(ROWS, &calls, budget()).await {
        for slot in 0..3 {
            let d = &t.decisions[3 + 5 * slot..3 + 5 * (slot + 1)];
            // The run's σ²: 0 for a penalty run at θ′ = θ, as every Barker release's (the
            // share, up to the rounding of (s·Δ)²) for the Barker run.
            let variance = match (slot, &d[2]) {
                (2, contract::Decision::Released { noise_variance, .. }) => *noise_variance,
                _ => 0.0f64.to_bits(),
            };
            assert!((f64::from_bits(variance) - [0.0, 0.0, 2.0][slot]).abs() < 1e-12);
            let public = |replayed| contract::Decision::Released {
                noise_variance: variance,
                replayed,
            };
            assert_eq!(d[0], public(false), "run {slot}: {d:?}");
            assert_eq!(d[1], public(true), "run {slot}: {d:?}");
            assert!(contract::fresh(&d[2]), "run {slot}: {d:?}");
            assert_eq!(d[3], public(false), "run {slot}: {d:?}");
            assert_eq!(d[4], contract::Decision::Closed { releases: 1 });
        }
    }

    // The values, and the charge: one release of each run's mechanism.
    let (node, fingerprint) = node(Neighbours::Substitute, budget());
    let n = ROWS as u64;
    let mut committed = 0.0;
    for (plan, mechanism) in [
        (
            Plan::full_penalty(1, 4, 2.0, NoiseRequest::Tau(0.5)),
            MechanismKind::Gaussian,
        ),
        (
            minibatch(100, NoiseRequest::Tau(0.5)),
            MechanismKind::BatchGaussian {
                batch: 100,
                population: n,
            },
        ),
        (
            barker(60, 2.0),
            MechanismKind::DpBarker {
                batch: 60,
                population: n,
            },
        ),
    ] {
        let variant = plan.variant.clone();
        let grant = node.open_run(plan, &fingerprint).await.unwrap();
        let ask = |step, theta: &'static [f64; 2], prop: &'static [f64; 2]| {
            let run_id = grant.run_id.clone();
            let variant = variant.clone();
            let node = &node;
            async move {
                let key = StepKey {
                    run_id: &run_id,
                    chain: 0,
                    step,
                };
                let (theta, theta_proposed) = (&theta[..], &prop[..]);
                let query = match variant.as_str() {
                    BARKER => Query::BarkerLogLikRatio {
                        theta,
                        theta_proposed,
                    },
                    MINIBATCH_PENALTY => Query::MinibatchLogLikRatio {
                        theta,
                        theta_proposed,
                    },
                    _ => Query::LogLikRatio {
                        theta,
                        theta_proposed,
                    },
                };
                node.step(&key, query).await.unwrap()
            }
        };
        const SAME: [f64; 2] = [0.3, 2.5];
        const THETA: [f64; 2] = [0.0, 3.0];
        const PROP: [f64; 2] = [0.05, 2.95];
        let first = ask(0, &SAME, &SAME).await;
        let again = ask(0, &SAME, &SAME).await;
        assert!(!first.replayed && again.replayed);
        assert_eq!(first.value[0].to_bits(), again.value[0].to_bits());
        let charged = ask(1, &THETA, &PROP).await;
        assert!(charged.noise_variance > 0.0);
        if variant == BARKER {
            assert_eq!(first.noise_variance, charged.noise_variance);
            assert!(first.value[0].is_finite() && first.value[0] != 0.0);
        } else {
            assert_eq!(
                (first.value.as_slice(), first.noise_variance),
                (&[0.0][..], 0.0)
            );
        }
        ask(2, &SAME, &SAME).await;
        let closed = node.close_run(&grant.run_id).await.unwrap();
        let want = epsilon_of(mechanism, grant.noise_multiplier, 1);
        println!(
            "{variant}: 3 steps, 1 charged, ε = {} (accountant {want})",
            closed.run_epsilon
        );
        assert_eq!(closed.releases, 1);
        assert_eq!(closed.run_epsilon, want, "{variant}");
        committed = closed.epsilon_committed;
    }
    assert_eq!(node.describe().epsilon_committed, committed);
}

/// DP Barker's groups stay bounded: runs at 32 batch sizes open (each closed with a release,
/// so each batch is a group the accountant composes), a 33rd batch is refused with a sentence
/// naming the batches, and a run at a batch already used still opens.
#[tokio::test]
async fn barker_batches_are_capped_per_population() {
    let (node, fingerprint) = node(Neighbours::Substitute, budget());
    for batch in 16..48 {
        charged(&node, &fingerprint, barker(batch, 2.0), 1).await;
    }
    match node.open_run(barker(48, 2.0), &fingerprint).await {
        Err(PartyError::BudgetExhausted(why)) => assert!(
            why.starts_with("this party has run DP Barker at 32 batch sizes")
                && why.ends_with("not 48"),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
    charged(&node, &fingerprint, barker(20, 2.0), 1).await;
}
