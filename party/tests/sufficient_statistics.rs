//! The sufficient-statistics release (Yıldırım & Ermiş 2019, Alg. 3) on a party serving the
//! gaussian GLM: its refusals are public decisions (neighbouring rows, one of them at a corner
//! of the columns' bounds, decide alike), its noise is the run's multiplier times the
//! sensitivity the model's public bounds give, and a party whose model has no sufficient
//! statistics refuses the variant. The query carries no θ, so there is no θ to refuse.
mod contract;

use contract::plans::{plan, sufficient_plan, tau};
use contract::{
    Call, Decision, QueryKind, RunRef, StepAt, Subject, decided_alike_for, fresh, refused,
    replayed, step_as,
};
use fedmcmc_common::accountant::{Choice, Method};
use fedmcmc_common::models::{Family, GlmSpec, ModelSpec};
use fedmcmc_party::config::BudgetConfig;
use fedmcmc_proto::v1 as pb;
use rand::SeedableRng;
use tonic::Code;

const ROWS: usize = 300;

fn budget() -> BudgetConfig {
    BudgetConfig {
        epsilon: 10.0,
        delta: 1e-5,
        accountant: Choice::Only(Method::Analytic),
    }
}

fn gaussian_glm() -> ModelSpec {
    ModelSpec::Glm(GlmSpec::example(Family::Gaussian, 3))
}

fn sufficient(run: usize, step: StepAt) -> Call {
    Call::Step {
        kind: QueryKind::Sufficient,
        run: RunRef::Slot(run),
        chain: 0,
        step,
        theta: Vec::new(),
        theta_proposed: Vec::new(),
    }
}

/// Run slots: 0 a three-step sufficient-statistics run, 1 a full-data penalty run. Then its
/// steps, a replay, out-of-order and unknown-run steps, the wrong query for each run, the
/// exhausted run, a plan beyond the budget, and a step after closing.
fn battery() -> Vec<Call> {
    let th = [0.5, 1.0, -0.5];
    let prop = [0.51, 0.99, -0.5];
    vec![
        Call::Open(sufficient_plan(1, 3, tau(0.5))),
        Call::Open(plan(1, 5, 2.0, tau(0.5))),
        sufficient(0, StepAt::Next),
        sufficient(0, StepAt::Last),
        sufficient(0, StepAt::Ahead(2)),
        Call::Step {
            kind: QueryKind::Sufficient,
            run: RunRef::Unknown,
            chain: 0,
            step: StepAt::At(0),
            theta: Vec::new(),
            theta_proposed: Vec::new(),
        },
        step_as(QueryKind::Full, 0, 0, &th, &prop),
        sufficient(1, StepAt::Next),
        step_as(QueryKind::Full, 1, 0, &th, &prop),
        sufficient(0, StepAt::Next),
        sufficient(0, StepAt::Next),
        sufficient(0, StepAt::Next),
        Call::Open(sufficient_plan(1, 1_000_000_000, tau(1e-3))),
        Call::Close(RunRef::Slot(0)),
        sufficient(0, StepAt::Next),
    ]
}

#[tokio::test]
async fn sufficient_statistics_refusals_are_public_decisions() {
    let spec = gaussian_glm();
    // Corners of the columns' bounds (features within [−2, 2], label within [−20, 20]): the
    // rows that move the statistics most.
    let substitutes = [
        vec![2.0, -2.0, 20.0],
        vec![-2.0, 2.0, -20.0],
        vec![2.0, 2.0, 20.0],
    ];
    let tallies = decided_alike_for(&spec, &substitutes, ROWS, &battery(), budget()).await;
    let decisions = &tallies[0].decisions;
    type Check<'a> = (usize, &'a dyn Fn(&Decision) -> bool);
    let expect: [Check; 11] = [
        (2, &fresh),
        (3, &replayed),
        (4, &refused(Code::FailedPrecondition, "out of order")),
        (5, &refused(Code::NotFound, "no run")),
        (
            6,
            &refused(
                Code::FailedPrecondition,
                "asks for a sufficient_statistics query, not log_lik_ratio",
            ),
        ),
        (
            7,
            &refused(
                Code::FailedPrecondition,
                "asks for a log_lik_ratio query, not sufficient_statistics",
            ),
        ),
        (8, &|d| matches!(d, Decision::Released { .. })),
        (11, &refused(Code::ResourceExhausted, "has used them all")),
        (12, &refused(Code::ResourceExhausted, "budget")),
        (13, &|d| matches!(d, Decision::Closed { releases: 3 })),
        (14, &refused(Code::FailedPrecondition, "closed")),
    ];
    for (i, check) in expect {
        assert!(check(&decisions[i]), "call {i}: {:?}", decisions[i]);
    }
    // Charged as Gaussian releases at the run's multiplier τ·√n, three of them.
    let Decision::Granted {
        noise_multiplier,
        releases,
        ..
    } = decisions[0]
    else {
        panic!("{:?}", decisions[0])
    };
    assert_eq!(releases, 3);
    let multiplier = f64::from_bits(noise_multiplier);
    assert!(
        (multiplier - 0.5 * (ROWS as f64).sqrt()).abs() < 1e-12,
        "{multiplier}"
    );
    // Every release states the noise the public bound gives: σ = τ·√n·(2R + √d·γ), R the
    // model's bound on a row's ‖T·s(x)‖, d the entries and γ the public grid they are
    // rounded to, whatever the rows hold.
    let model = spec.build().unwrap();
    let statistics = model.sufficient_statistics().unwrap();
    let (r, d) = (statistics.row_bound(), statistics.entries() as f64);
    let s = 0.5 * (ROWS as f64).sqrt();
    let grid = fedmcmc_common::mechanism::grid_step(s * 2.0 * r).unwrap();
    let sigma = s * (2.0 * r + d.sqrt() * grid);
    for i in [2, 3, 9, 10] {
        let Decision::Released { noise_variance, .. } = decisions[i] else {
            panic!("call {i}: {:?}", decisions[i])
        };
        let got = f64::from_bits(noise_variance);
        assert!(
            (got - sigma * sigma).abs() <= 1e-12 * got,
            "call {i}: {got}"
        );
    }
}

/// A party whose model has no sufficient statistics does not list the variant and refuses a
/// plan for it, saying why.
#[tokio::test]
async fn a_model_without_sufficient_statistics_refuses_the_variant() {
    for spec in [
        ModelSpec::flat_banana(2),
        ModelSpec::Glm(GlmSpec::example(Family::Logistic, 3)),
    ] {
        let model = spec.build().unwrap();
        let rows = model.simulate(
            &spec.true_theta(),
            50,
            &mut rand_chacha::ChaCha8Rng::seed_from_u64(3),
        );
        let mut subject = Subject::new(rows, &spec, budget());
        let described = subject
            .describe()
            .await
            .variants
            .contains(&(pb::Variant::SufficientStatistics as i32));
        assert!(!described, "{spec:?}");
        let decision = subject
            .call(
                &Call::Open(sufficient_plan(1, 3, tau(0.5))),
                &model.fingerprint(),
            )
            .await;
        let why = format!("the {} model has no sufficient statistics", model.name());
        assert!(
            refused(Code::Unimplemented, &why)(&decision),
            "{decision:?}"
        );
    }
}
